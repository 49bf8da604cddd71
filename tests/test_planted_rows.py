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


def test_a_partition_rewritten_without_a_plan_behind_hidden_history_is_never_published(world, run_cli):
    """The insider hid a written day (its rows, its ledger rows) so a plan-free Materialize passed
    for a never-written partition, put the ledger back, and published: consumers read unplanned data
    and `evidence verify` passed (found by an attack). The permission never lets a plan-free write
    follow another write of its partition, so the ledger holding one is the sign of the edit."""
    day = "2026-01-02"
    assert world.materialize([day], publish=True).success
    published = world.fingerprints("published_revenue", [day])
    for table in ("writes", "gate_results", "publications"):
        world.run_sql(f"CREATE TABLE main.saved_{table} AS SELECT * FROM {CONTROL}.{table} WHERE partition_key = ?",
                      [day])
    world.run_sql("CREATE TABLE main.saved_published AS SELECT * FROM published_revenue WHERE order_date = ?", [day])
    world.run_sql("UPDATE orders SET amount = amount * 10 WHERE order_date = ?", [day])  # needs a plan
    world.run_sql("DELETE FROM daily_revenue WHERE order_date = ?", [day])
    world.run_sql("DELETE FROM published_revenue WHERE order_date = ?", [day])
    for table in ("gate_results", "writes", "publications"):
        world.run_sql(f"DELETE FROM {CONTROL}.{table} WHERE partition_key = ?", [day])
    assert world.materialize([day]).success  # a plan-free write of a partition that looks new
    for table in ("writes", "gate_results", "publications"):
        world.run_sql(f"INSERT INTO {CONTROL}.{table} SELECT * FROM main.saved_{table}")
    world.run_sql("INSERT INTO published_revenue SELECT * FROM main.saved_published")
    [(first, second)] = world.sql(f"SELECT min(write_id), max(write_id) FROM {CONTROL}.writes WHERE partition_key = ?",
                                  [day])
    why = f"{day}: written without a plan (write {second}) over a partition written before (write {first})"
    verify = run_cli("evidence", "verify")
    assert verify.code == 1 and why in verify.err, verify.err
    refused = world.publish([day])
    assert not refused.success and why in failure_text(refused)
    assert world.fingerprints("published_revenue", [day]) == published  # consumers keep the last good data
