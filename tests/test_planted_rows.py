"""An insider (warehouse write access, no evidence key) plants ledger rows that carry the number of a
chain row not yet written: the writer that appends that chain row must not seal them.

Each ledger row is sealed by the digest in the chain row that recorded it; the digest is computed by
reading back every row that carries the chain row's number (`seals.of_seq`). A row inserted before
that chain row existed, carrying its (predictable) number, was read back with the writer's own rows
and sealed with them: a gate result forged to `passed` then verified, and publish copied a
partition whose gates had failed.

The insider's other edits, found by an attack (2026-12-07), each failing first: rows typed over with
no word or JSON of ours are refused in one line by readers with the key and without it (the guard
in CI), and an unplanned rewrite whose history is hidden between two reads of the whole-record check
is still found.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.loading import load_plan
from tests.plans import complete_plan, edited, write_plan
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


# --- rows typed over, and a rewrite's history hidden mid-check (found by an attack) ------------------

def _fix_version(world, name: str, end: str, reason: str, **changes) -> Path:
    return write_plan(world.root / "plans" / f"{name}.yaml", edited(
        complete_plan(plan_id="fix", start="2026-01-01", end=end, proof=("2026-01-02",)), reason=reason, **changes))


def _sha(path: Path) -> str:
    return plan_sha256(load_plan(path))


def test_keyed_guard_refuses_plan_row_and_chain_cut_together_in_one_line(world, capsys):
    """v2 replaced v1; an insider cuts the chain back to v1's adoption and puts v1 back in the plan's
    row. Beside the key the guard refuses v1 in one line (the head log finds the cut): what held."""
    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    cut = world.sql("SELECT max(seq) FROM backfill_control.evidence")[0][0]
    world.approve_replacing(_fix_version(world, "v2", "2026-01-03", "v2: three days"))
    world.run_sql("DELETE FROM backfill_control.evidence WHERE seq > ?", [cut])
    world.run_sql("UPDATE backfill_control.plans SET approved_sha256 = ? WHERE plan_id = 'fix'", [_sha(v1)])
    capsys.readouterr()
    code = world.cli("guard", str(v1))
    said = capsys.readouterr()
    assert code == 1 and "ALLOWED" not in said.out and said.err.count("\n") <= 1, (code, said.out[-600:], said.err)


@pytest.mark.parametrize("column", ["phase", "hold"])
def test_keyless_readers_refuse_in_one_line_on_a_plan_row_of_no_phase_or_hold(world, capsys, monkeypatch, column):
    """An insider sets the plan's phase (or hold) to a word that is no phase; a CI job without the
    evidence key runs the guard beside the record: it ended in an internal error (exit 3), where
    rows read unverified can only make it refuse, in one line."""
    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    world.run_sql(f"UPDATE backfill_control.plans SET {column} = 'sideways' WHERE plan_id = 'fix'")
    monkeypatch.setenv("BACKFILL_EVIDENCE_KEY_FILE", str(world.root / "no-such-key"))
    signers = str(world.root / "approvers" / "allowed_signers")
    found = {}
    for args in (("guard", str(v1), "--allowed-signers", signers), ("status", "fix"),
                 ("plan", "show", str(v1), "--allowed-signers", signers)):
        capsys.readouterr()
        code = world.cli(*args)
        said = capsys.readouterr()
        found[args[0] + " " + args[1]] = (code, said.err[-300:], "ALLOWED" in said.out)
    bad = {k: v for k, v in found.items() if v[0] not in (0, 1, 2) or "internal error" in v[1] or v[2]}
    assert not bad, found


@pytest.mark.parametrize("edit", [
    "UPDATE backfill_control.trust_roots SET signatures = 'not json' WHERE version = 2",
    "UPDATE backfill_control.trust_roots SET signatures = '[1]' WHERE version = 2",
    "UPDATE backfill_control.trust_roots SET signatures = '[{}]' WHERE version = 2",
    "UPDATE backfill_control.trust_roots SET pinned_at = 'yesterday' WHERE version = 2",
])
def test_keyless_guard_refuses_in_one_line_on_a_re_pins_row_typed_over(world, capsys, monkeypatch, edit):
    """The team re-pinned its root once (v2, signed by alice and bob); an insider types over v2's row
    (its signatures, or its time). A CI job without the evidence key runs the guard beside the record:
    it re-verifies the root's signatures, read unverified, and ended in an internal error (exit 3:
    JSONDecodeError, TypeError, KeyError, ValueError), where a row read so can only make it refuse."""
    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    same = world.root / "same" / "allowed_signers"
    same.parent.mkdir()
    same.write_text((world.root / "approvers" / "allowed_signers").read_text() + "# re-pinned\n")
    assert world.cli("approvers", "pin", str(same), "--sign", f"alice={world.keys['alice']}",
                     "--sign", f"bob={world.keys['bob']}") == 0
    world.run_sql(edit)
    monkeypatch.setenv("BACKFILL_EVIDENCE_KEY_FILE", str(world.root / "no-such-key"))
    capsys.readouterr()
    code = world.cli("guard", str(v1), "--allowed-signers", str(same))
    said = capsys.readouterr()
    assert code == 1 and "internal error" not in said.err and "ALLOWED" not in said.out, (code, said.err[-300:])
    assert said.err.count("\n") == 1 and "v2" in said.err, said.err


@pytest.mark.parametrize("row", ["the last", "an approval"])
def test_an_evidence_row_typed_over_with_no_json_is_refused_in_one_line_with_the_key(world, capsys, row):
    """An insider types `not json` over an evidence row's payload (the chain's last, or an approval's).
    `backfill status` and the guard, run beside the key, parsed the payload before checking its hash
    and ended in an internal error (exit 3, JSONDecodeError), where a forged row is one line."""
    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    which = "(SELECT max(seq) FROM backfill_control.evidence)" if row == "the last" else \
        "(SELECT min(seq) FROM backfill_control.evidence WHERE kind = 'approval')"
    world.run_sql(f"UPDATE backfill_control.evidence SET payload = 'not json' WHERE seq = {which}")
    found = {}
    for args in (("status", "fix"), ("guard", str(v1)), ("evidence", "verify"), ("run", "fix", "--proof")):
        capsys.readouterr()
        code = world.cli(*args)
        said = capsys.readouterr()
        found[args[0]] = (code, said.err[-240:], "ALLOWED" in said.out)
    bad = {k: v for k, v in found.items() if v[0] != 1 or "internal error" in v[1] or v[2] or v[1].count("\n") > 1}
    assert not bad, found


@pytest.mark.parametrize("edit", [
    "UPDATE backfill_control.plan_versions SET partition_keys = '[1'",
    "UPDATE backfill_control.plan_versions SET partition_keys = '{\"a\": 1}'",
    "UPDATE backfill_control.plan_versions SET partition_keys = '{\"members\": []}'",
])
def test_keyless_guard_refuses_in_one_line_on_a_versions_partitions_typed_over(world, capsys, monkeypatch, edit):
    """An insider types over the plan of record's partitions in plan_versions. A CI job without the
    evidence key runs the guard beside the record on that very version: it counted by the rows
    (refusing, as it should) and then read its execution state from them, ending in an internal error
    (exit 3: JSONDecodeError, KeyError), where a row read unverified can only make it refuse."""
    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    world.run_sql(edit)
    monkeypatch.setenv("BACKFILL_EVIDENCE_KEY_FILE", str(world.root / "no-such-key"))
    capsys.readouterr()
    code = world.cli("guard", str(v1), "--allowed-signers", str(world.root / "approvers" / "allowed_signers"))
    said = capsys.readouterr()
    assert code == 1 and "internal error" not in said.err and "ALLOWED" not in said.out, (code, said.err[-300:])


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_an_unplanned_rewrite_whose_history_is_hidden_between_two_reads_of_the_whole_check_is_found(
        engine_world, monkeypatch):
    """Insider on PostgreSQL, no key. 2026-01-02 was written without a plan; the insider hides that
    write's group and the partition's rows, triples the source and lets a Materialize write it again
    as a new partition, then puts the group back: the ledger holds an unplanned rewrite, which the
    whole-record check (publish's and rollback's first step, `evidence verify`) refuses. But it read
    the seals, then asked the ledger alone for rewrites: the group hidden again between the two had
    it pass (a table computed from the day, whose own publish asks only of its own partitions, is
    then published over unplanned data). It asks the chain's writes too."""
    import psycopg

    from tests.test_trust import _verified_while

    world = engine_world
    one = "order_date = '2026-01-02'"
    assert world.materialize(["2026-01-01", "2026-01-02"]).success
    with psycopg.connect(world.url, autocommit=True) as insider:
        seq = insider.execute(f"SELECT evidence_seq FROM {CONTROL}.writes WHERE partition_key = '2026-01-02'"
                              ).fetchone()[0]
        insider.execute(f"CREATE TABLE public.stash_w AS SELECT * FROM {CONTROL}.writes WHERE evidence_seq = {seq}")
        insider.execute(f"DELETE FROM {CONTROL}.writes WHERE evidence_seq = {seq}")
        insider.execute(f"DELETE FROM public.daily_revenue WHERE {one}")
        insider.execute(f"UPDATE public.orders SET amount = amount * 3 WHERE {one}")  # the unplanned data
        assert world.materialize(["2026-01-02"]).success  # plan-free: the partition looks new
        insider.execute(f"INSERT INTO {CONTROL}.writes SELECT * FROM public.stash_w")

        def hide() -> None:
            insider.execute(f"DELETE FROM {CONTROL}.writes WHERE evidence_seq = {seq}")

        outcome = _verified_while(world, monkeypatch, "seals.verify_all.after_ledger", hide)
        insider.execute(f"INSERT INTO {CONTROL}.writes SELECT * FROM public.stash_w")
    assert "verified" not in outcome, outcome
    assert "2026-01-02: written without a plan (evidence row" in str(outcome.get("error")), outcome
