"""DuckDB 2.0 runs triggers (`CREATE TRIGGER ... AFTER ... FOR EACH ROW | STATEMENT`), stored in the
database file: an insider who can write the file hangs one on a table the product writes, and its
statement runs inside the product's transaction, after a proof the transaction took (found by an
attack on the embedded default; each test failed first). As on PostgreSQL: a trigger on a control
table is refused before any decision reads the record, and where the database holds a trigger each
proof is taken again just before the commit (`Session.runs_table_code`, `Session.proven`); the
command is refused in one line and nothing changes."""

from __future__ import annotations

import pytest

from tests.test_pg_after_proof import _setup
from tests.test_pg_rollback import refused_in_one_line
from tests.test_trust import _insider_duckdb
from tests.world import keys


def test_a_trigger_on_a_control_table_is_refused_before_it_runs_in_a_publish(world, capfd):
    """Fired by the publish's own evidence row, after the copy's proof: the published table would
    hold bytes no gate checked, sealed as checked."""
    window = keys(1, 4)
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    published = world.fingerprints("published_revenue", window)
    _insider_duckdb(world, "CREATE TRIGGER late AFTER INSERT ON backfill_control.evidence FOR EACH STATEMENT "
                  "UPDATE main.published_revenue SET orders = orders + 1 WHERE region = 'north'")
    capfd.readouterr()
    code = world.cli("publish", "fix")
    err = capfd.readouterr().err
    assert code != 0 and err.count("\n") == 1 and 'the trigger "late"' in err, err
    _insider_duckdb(world, "DROP TRIGGER late ON backfill_control.evidence")  # as the fix says
    assert world.fingerprints("published_revenue", window) == published and world.phase() == "reconciled"
    assert world.cli("publish", "fix") == 0
    assert world.fingerprints("published_revenue", window) == world.fingerprints("daily_revenue", window)


def test_a_trigger_on_the_published_table_never_changes_a_rollback_after_its_proof(world, capfd):
    """The rollback restores the target and proves it, then restores the published table, whose
    trigger edits the restored target."""
    window = _setup(world)
    fixed = world.fingerprints("daily_revenue", window)
    _insider_duckdb(world, "CREATE TRIGGER late AFTER INSERT ON published_revenue FOR EACH STATEMENT "
                  "UPDATE main.daily_revenue SET orders = orders + 1 WHERE region = 'north'")
    capfd.readouterr()
    code = world.cli("rollback", "fix")
    out = capfd.readouterr()
    _insider_duckdb(world, "DROP TRIGGER late ON published_revenue")
    refused_in_one_line(world, window, fixed, code, out)
    assert "as the rollback was committing" in out.err, out.err
    assert world.cli("rollback", "fix") == 0  # once the trigger is gone


@pytest.mark.parametrize("engine_world", ["duckdb"], indirect=True)
def test_a_graph_publish_never_has_its_days_changed_after_their_proof(engine_world, monkeypatch, capfd):
    """The month's published copy, after the days' proof, fires a trigger editing the days."""
    from tests.test_graph import JANUARY, buggy_january_published, reconciled_graph

    world = buggy_january_published(engine_world, monkeypatch)
    reconciled_graph(world)
    _insider_duckdb(world, "CREATE TRIGGER late_days AFTER INSERT ON published_monthly_revenue FOR EACH STATEMENT "
                  "UPDATE main.published_revenue SET orders = orders + 1 WHERE region = 'north'")
    before = world.fingerprints("published_revenue", JANUARY)
    capfd.readouterr()
    code = world.cli("publish", "fix")
    err = capfd.readouterr().err
    _insider_duckdb(world, "DROP TRIGGER late_days ON published_monthly_revenue")
    assert code != 0 and err.count("\n") == 1 and "as the publish was committing" in err, err
    assert world.fingerprints("published_revenue", JANUARY) == before  # consumers keep the last good data
    assert world.cli("publish", "fix") == 0
    assert world.fingerprints("published_revenue", JANUARY) == world.fingerprints("daily_revenue", JANUARY)


def test_nothing_checked_is_remembered_while_the_database_holds_a_trigger(world):
    """A trigger fired by a write of the target can update control rows a check passed on: what a
    process checked while it holds the file is not taken as still true (`memo_while_locked`)."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    with world.warehouse().session() as session:
        assert session.memo_while_locked() is not None and not session.runs_table_code
    _insider_duckdb(world, "CREATE TRIGGER note AFTER INSERT ON orders FOR EACH STATEMENT "
                    "UPDATE backfill_control.writes SET row_count = row_count WHERE false")
    with world.warehouse().session() as session:
        assert session.runs_table_code and session.memo_while_locked() is None
