"""An insider (warehouse write access, no evidence key) plants ledger rows that carry the number of a
chain row not yet written: the writer that appends that chain row must not seal them.

Each ledger row is sealed by the digest in the chain row that recorded it; the digest is computed by
reading back every row that carries the chain row's number (`seals.of_seq`). A row inserted before
that chain row existed, carrying its (predictable) number, was read back with the writer's own rows
and sealed with them: a gate result forged to `passed` then verified, and publish copied a
partition whose gates had failed.
"""

from __future__ import annotations

from tests.world import failure_text, keys

CONTROL = "backfill_control"


def _max_seq(world) -> int:
    return int(world.sql(f"SELECT coalesce(max(seq), 0) FROM {CONTROL}.evidence")[0][0])


def test_a_gate_result_planted_under_a_future_chain_row_is_never_sealed_by_it(engine_world, capsys):
    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    world.run_sql("INSERT INTO orders SELECT * FROM orders WHERE order_date = '2026-01-03' LIMIT 2")  # loaded twice
    assert world.cli("run", "fix") == 1  # 2026-01-03's gates fail
    (write_id,) = world.sql(f"SELECT max(write_id) FROM {CONTROL}.writes WHERE asset = 'daily_revenue' "
                            "AND partition_key = '2026-01-03'")[0]
    failed = world.sql(f"SELECT gate, checked_fingerprint, figures, recorded_at FROM {CONTROL}.gate_results "
                       "WHERE write_id = ? AND NOT passed", [write_id])
    assert failed

    # the insider reads the chain's pattern: a plan-free write of one empty partition appends its
    # chain rows in a fixed order; which of them is the `gates` row is plain to see
    before = _max_seq(world)
    assert world.materialize(keys(10, 10)).success
    kinds = [k for (k,) in world.sql(f"SELECT kind FROM {CONTROL}.evidence WHERE seq > ? ORDER BY seq", [before])]
    offset = kinds.index("gates") + 1

    # ...and plants, under the number the next such `gates` row will take, passing results for the
    # failed partition's latest write
    future = _max_seq(world) + offset
    for i, (gate, checked, figures, at) in enumerate(failed):
        world.run_sql(f"INSERT INTO {CONTROL}.gate_results VALUES (?, ?, 'fix', 'daily_revenue', '2026-01-03', ?, "
                      "true, ?, ?, ?, ?)", [10**12 + i, write_id, gate, checked, figures, at, future])
    # an ordinary incremental run appends that `gates` row: it refuses to seal what it did not write
    incremental = world.materialize(keys(11, 11))
    assert not incremental.success and "already carry evidence row" in failure_text(incremental)

    capsys.readouterr()
    published = world.cli("publish", "fix")
    err = capsys.readouterr().err
    assert published == 1 and f"evidence row {future}" in err, err
    assert world.rows("published_revenue", "2026-01-03") == 0
    assert world.cli("evidence", "verify") == 1


def test_a_seal_is_remembered_only_within_a_command_while_the_file_is_held_and_once_committed(world):
    """`remembering_verified` (a command's whole work) spares a second verification of a seal while
    this process holds the DuckDB file, so that no other process can write it: never outside a
    command, never what failed or was verified in a transaction that rolled back, and never past
    the end of the command or past the moment it lets the file go."""
    from backfill_assets.control import seals
    from backfill_assets.errors import ForgedRecord
    from backfill_assets.warehouse import release_kept, remembering_verified

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    seqs = sorted({int(s) for (s,) in world.sql(f"SELECT evidence_seq FROM {CONTROL}.writes")})
    sealed = {("writes", s) for s in seqs}
    warehouse = world.warehouse()

    with warehouse.session() as session:
        assert session.engine.verified_seals() is None  # outside a command: every read verified

    with remembering_verified():
        with warehouse.session() as session:
            # the world has kept its file open since before this command began: a connection whose
            # file was not asked, so nothing is remembered until the file is let go
            assert session.engine.verified_seals() is None
        release_kept()
        with warehouse.session() as session:
            remembered = session.engine.verified_seals()
            assert remembered == set()
            try:
                with session.transaction():
                    seals.verify(session, "writes", seqs)
                    assert not remembered  # not before the commit
                    raise RuntimeError("rolled back")
            except RuntimeError:
                pass
            assert not remembered
            with session.transaction():
                seals.verify(session, "writes", seqs)
            assert remembered == sealed

        with warehouse.session() as session:  # nothing kept it open in between: the file was let go
            assert session.engine.verified_seals() == set()
            session.execute(f"UPDATE {CONTROL}.writes SET row_count = row_count + 1 WHERE evidence_seq = ?",
                            [seqs[0]])
            try:
                seals.verify(session, "writes", seqs)
                raise AssertionError("a forged write verified")
            except ForgedRecord:
                pass
            assert session.engine.verified_seals() == set()  # what failed is never remembered

    with warehouse.session() as session:
        assert session.engine.verified_seals() is None  # the command ended


def test_a_warehouse_swapped_for_a_symlink_to_a_forged_copy_mid_command_is_verified_again(world):
    """Found by an attack on the memo: DuckDB's lock does not stop a `cp` of the file, nor a rename
    over it. An insider copies the warehouse, forges a write in the copy, and swaps the path for a
    symlink to it while a command holds the file: the command's next connection opens the copy, a
    database no lock of the command covers. What it reads there is verified again, not taken from
    what the command verified in the real file."""
    import os
    import shutil

    import duckdb
    import pytest

    from backfill_assets.control import seals
    from backfill_assets.errors import ForgedRecord
    from backfill_assets.warehouse import release_kept, remembering_verified

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    seqs = sorted({int(s) for (s,) in world.sql(f"SELECT evidence_seq FROM {CONTROL}.writes")})
    warehouse, path = world.warehouse(), world.warehouse_path
    world.run_sql("CHECKPOINT")
    forged = path.with_name("forged.duckdb")
    shutil.copy(path, forged)
    with duckdb.connect(str(forged)) as con:
        con.execute(f"UPDATE {CONTROL}.writes SET row_count = row_count + 1000 WHERE evidence_seq = ?", [seqs[0]])

    with remembering_verified():  # a command
        release_kept()  # its own connections only (the world kept the file open since before it)
        with warehouse.session() as held:  # one connection keeps the real file open throughout
            with held.transaction():
                seals.verify(held, "writes", seqs)
            assert ("writes", seqs[0]) in (warehouse.engine.verified_seals() or set())
            swap = path.with_name("swap.tmp")
            os.symlink(forged.name, swap)
            os.replace(swap, path)
            with warehouse.session() as session:
                assert session.scalar(f"SELECT max(row_count) FROM {CONTROL}.writes WHERE evidence_seq = ?",
                                      [seqs[0]]) >= 1000  # the command's next connection reads the forged copy
                with pytest.raises(ForgedRecord):
                    seals.verify(session, "writes", seqs)
