"""Warehouse faults on each engine: a commit that fails for real, the stage table, lock waits."""

from __future__ import annotations

import pytest

from backfill_assets.errors import WarehouseError


def _make_the_next_commit_fail(engine, session) -> None:
    """Inside `session`'s open transaction, a row whose commit fails: on PostgreSQL a deferred
    unique constraint checked at COMMIT, on DuckDB a second connection committing the same key first."""
    if engine.name == "postgresql":
        session.execute("INSERT INTO t VALUES (1)")
        session.execute("INSERT INTO t VALUES (1)")  # deferred: accepted until COMMIT
        return
    session.execute("INSERT INTO t VALUES (1)")
    with engine.session() as other:
        other.execute("INSERT INTO t VALUES (1)")  # committed first: ours conflicts at COMMIT


def test_after_commit_actions_of_a_failed_commit_never_run(engine):
    ran: list[str] = []
    with engine.session() as session:
        session.execute("CREATE TABLE t (i INTEGER, CONSTRAINT t_once UNIQUE (i) DEFERRABLE INITIALLY DEFERRED)"
                        if engine.name == "postgresql" else "CREATE TABLE t (i INTEGER PRIMARY KEY)")
        with pytest.raises(WarehouseError, match="(?i)duplicate key|unique"):
            with session.transaction():
                _make_the_next_commit_fail(engine, session)
                session.after_commit(lambda: ran.append("a head for a row never committed"))
        with session.transaction():  # the write path retries on the same session
            session.execute("INSERT INTO t VALUES (2)")
            session.after_commit(lambda: ran.append("committed"))
        assert ran == ["committed"]
        assert session.rows("SELECT i FROM t ORDER BY i") == ([(1,), (2,)] if engine.name == "duckdb" else [(2,)])


def test_a_users_own_backfill_stage_table_survives_every_write(engine_world):
    from tests.world import keys

    world = engine_world
    world.run_sql("CREATE TABLE backfill_stage (note VARCHAR)")
    world.run_sql("INSERT INTO backfill_stage VALUES ('the team keeps this')")
    assert world.materialize(keys(1, 2)).success  # a plan-free write of empty partitions stages them
    assert world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0
    assert world.sql("SELECT note FROM backfill_stage") == [("the team keeps this",)]
