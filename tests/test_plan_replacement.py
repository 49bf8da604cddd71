"""Replacing a plan of record: `plan replacement` statements naming the adoption they replace, what
a replacement needs at least, and what the guard and `plan show` count beside the record (each
hole found by an attack on 2026-12-06 and 2026-12-07 has its test here)."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest

from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.loading import load_plan
from backfill_assets.signing.sshsig import sign
from backfill_assets.signing.statements import PLAN_REPLACEMENT, Statement
from tests.plans import complete_plan, edited, write_plan

CONTROL = "backfill_control"


def _fix_version(world, name: str, end: str, reason: str) -> Path:
    return write_plan(world.root / "plans" / f"{name}.yaml", edited(
        complete_plan(plan_id="fix", start="2026-01-01", end=end, proof=("2026-01-02",)), reason=reason))


def _of_record(world) -> str:
    return world.sql("SELECT approved_sha256 FROM backfill_control.plans WHERE plan_id = 'fix'")[0][0]


def _alice_copied_from(path: Path, out: Path) -> tuple[Path, Path]:
    """alice's statement and signature as the plan file mirrors them: whoever reads the file has both."""
    from backfill_assets.signing.statements import PLAN_APPROVAL, Statement

    entry = next(g for g in load_plan(path).approvals.granted if g.by == "alice")
    statement = Statement.make(PLAN_APPROVAL, signed=entry.at, expires=entry.expires,
                               plan=entry.plan_sha256, code=entry.code, warehouse=entry.warehouse)
    out.mkdir(parents=True, exist_ok=True)
    (out / "statement.txt").write_text(statement.text)
    (out / "alice.sig").write_text(entry.signature)
    return out / "statement.txt", out / "alice.sig"


@pytest.mark.parametrize("how", ["alice's signature copied from v1's file", "the owner's key"])
def test_a_superseded_version_never_comes_back_on_its_old_signatures(world, capsys, how):
    """v1 (six days) approved, then v2 (three: v1 was too wide) approved and adopted. An operator
    with no approver's key approved v1 again, re-submitting alice's signature from v1's file or
    signing as the owner: v1's old signatures still verified, so v1 became the plan of record again
    and `backfill run` wrote 2026-01-04..06, which v2's approvers had taken out (found by an attack).
    Only `plan replacement` statements naming v2's adoption replace it: the owner's alone does not."""
    assert world.cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-08") == 0
    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    v2 = world.approve_replacing(_fix_version(world, "v2", "2026-01-03", "v2: three days, v1 was too wide"))
    assert _of_record(world) == plan_sha256(load_plan(v2))
    capsys.readouterr()
    if how.startswith("alice"):
        statement, signature = _alice_copied_from(v1, world.root / "copied")
        world.cli("plan", "approve", str(v1), "--by", "alice", "--signature", str(signature),
                  "--statement", str(statement))
    else:
        assert world.cli("plan", "approve", str(v1), "--by", "olivia", "--key", str(world.keys["olivia"])) == 0
    said = capsys.readouterr().out
    assert _of_record(world) == plan_sha256(load_plan(v2)), said
    if how.startswith("alice"):
        assert "does not count: this version replaces the plan of record" in said, said
    else:
        assert "not approved yet" in said, said
    world.cli("run", "fix", "--proof")
    world.cli("run", "fix")
    assert world.sql("SELECT count(*) FROM backfill_control.writes WHERE plan_id = 'fix' "
                     "AND partition_key > '2026-01-03'")[0][0] == 0


def test_a_superseded_version_comes_back_when_its_approvers_sign_it_again(world, capsys):
    """Going back is the approvers' call: the statement `backfill plan statement` prints for v1 now
    is a `plan replacement` naming v2's adoption; the owner and both approvers signing it make v1
    the plan of record again, at once (no wait for a clock that may run ahead)."""
    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    v2 = world.approve_replacing(_fix_version(world, "v2", "2026-01-03", "v2: three days"))
    capsys.readouterr()
    assert world.cli("plan", "statement", str(v1)) == 0
    printed = capsys.readouterr().out
    with world.warehouse().session() as session:
        from backfill_assets.control import record

        mark = record.adoption(session, "fix", plan_sha256(load_plan(v2))).mark
    assert printed.startswith("backfill-assets plan replacement\n") and f"\nreplaces: {mark}\n" in printed, printed
    for name in ("olivia", "alice"):
        assert world.cli("plan", "approve", str(v1), "--by", name, "--key", str(world.keys[name])) == 0
    assert _of_record(world) == plan_sha256(load_plan(v2))
    assert world.cli("plan", "approve", str(v1), "--by", "bob", "--key", str(world.keys["bob"])) == 0
    said = capsys.readouterr().out
    assert _of_record(world) == plan_sha256(load_plan(v1)), said
    assert "approved: it is the plan of record" in said and "does not count" not in said, said
    entries = load_plan(v1).approvals.granted  # the file mirrors what each statement names
    assert sorted(e.by for e in entries if e.replaces == mark) == ["alice", "bob", "olivia"]


def _signed_ahead(world, capsys, path: Path, who: str, ahead: dt.timedelta) -> tuple[Path, Path]:
    """`who` signs `path`'s statement on a machine whose clock runs `ahead` of the warehouse's (the
    product accepts statements up to CLOCK_SKEW = 10 minutes in the future): the statement
    `backfill plan statement` prints there, signed with `ssh-keygen -Y sign` (byte-compatible)."""
    capsys.readouterr()
    assert world.cli("plan", "statement", str(path)) == 0
    printed = Statement.parse(capsys.readouterr().out)
    statement = Statement.make(printed.kind, signed=printed.signed + ahead, expires=printed.expires + ahead,
                               **dict(printed.values))
    out = world.root / "given" / f"{path.stem}-{who}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "statement.txt").write_text(statement.text)
    (out / "sig").write_text(sign(statement.message, world.keys[who]))
    return out / "statement.txt", out / "sig"


def test_signatures_given_before_the_adoption_by_a_fast_clock_do_not_replace_it(world, capsys):
    """alice and bob sign v1 (six days) on laptops whose clocks run 4 minutes ahead (inside the
    10 minutes the product allows); the owner holds their signatures. They change their minds: v2
    (three days) is signed and adopted. The owner (only the owner's key) then submitted v1 with the
    signatures held since before v2's adoption: recorded after it, and saying they were signed after
    it, they replaced v2 although no approver had signed since (found by an attack)."""
    assert world.cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-08") == 0
    v1 = _fix_version(world, "v1", "2026-01-06", "v1: six days")
    held = {who: _signed_ahead(world, capsys, v1, who, dt.timedelta(minutes=4)) for who in ("alice", "bob")}
    v2 = world.approve(_fix_version(world, "v2", "2026-01-03", "v2: three days, v1 was too wide"))
    assert _of_record(world) == plan_sha256(load_plan(v2))
    assert world.cli("plan", "approve", str(v1), "--by", "olivia", "--key", str(world.keys["olivia"])) == 0
    for who, (statement, signature) in held.items():
        world.cli("plan", "approve", str(v1), "--by", who, "--signature", str(signature),
                  "--statement", str(statement))
    said = capsys.readouterr().out
    assert _of_record(world) == plan_sha256(load_plan(v2)), said


def test_signatures_held_back_with_statements_dated_ahead_never_replace_it(world, capsys):
    """alice and bob sign v1 over statements dated 10 min 12 s ahead (a laptop clock running 12 s
    past the 10 minutes the product allows, or a statement the owner prepared for them); submitted
    now they would be refused as signed in the future, so the owner holds them. v2 is approved and
    adopted. Once the held statements no longer lie ahead, the owner signs v1 and submits them: they
    said a signing time after v2's adoption plus the skew, and v1 became the plan of record again
    with no approver's signature given since (found by an attack). A statement's `signed:` line is
    the signer's claim; only a statement naming v2's adoption, which did not exist when these were
    made, replaces it."""
    from backfill_assets.signing.statements import CLOCK_SKEW

    assert world.cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-08") == 0
    v1 = _fix_version(world, "v1", "2026-01-06", "v1: six days")
    margin = 12  # more than approving v2 takes: the statements say a time after its adoption plus the skew
    started = time.time()
    held = {who: _signed_ahead(world, capsys, v1, who, CLOCK_SKEW + dt.timedelta(seconds=margin))
            for who in ("alice", "bob")}
    v2 = world.approve(_fix_version(world, "v2", "2026-01-03", "v2: three days, v1 was too wide"))
    assert _of_record(world) == plan_sha256(load_plan(v2))
    assert world.cli("plan", "approve", str(v1), "--by", "olivia", "--key", str(world.keys["olivia"])) == 0
    time.sleep(max(0.0, started + margin + 1.5 - time.time()))  # the held statements no longer lie ahead
    capsys.readouterr()
    for who, (statement, signature) in held.items():
        assert world.cli("plan", "approve", str(v1), "--by", who, "--signature", str(signature),
                         "--statement", str(statement)) == 0
    said = capsys.readouterr().out
    assert _of_record(world) == plan_sha256(load_plan(v2)), said
    assert said.count("does not count: this version replaces the plan of record") == 2, said


def test_a_replacement_statement_counts_only_for_the_adoption_it_names(world, capsys):
    """v1, then v2 replacing it, then v1 again: each adoption is named by the keyed hash of its own
    chain row, so statements replacing v1's first adoption, signed and held back, do not bring v2
    back over v1's second one, though they name the same plan of record and are recorded after it."""
    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    v2 = _fix_version(world, "v2", "2026-01-03", "v2: three days")
    capsys.readouterr()
    assert world.cli("plan", "statement", str(v2)) == 0
    first = Statement.parse(capsys.readouterr().out)
    time.sleep(1.05)  # another second: another statement, signed and held back
    world.approve_replacing(v2)
    world.approve_replacing(v1)
    assert _of_record(world) == plan_sha256(load_plan(v1))
    out = world.root / "held"
    out.mkdir()
    (out / "statement.txt").write_text(first.text)
    capsys.readouterr()
    for who in ("olivia", "alice", "bob"):
        (out / f"{who}.sig").write_text(sign(first.message, world.keys[who]))
        assert world.cli("plan", "approve", str(v2), "--by", who, "--statement", str(out / "statement.txt"),
                         "--signature", str(out / f"{who}.sig")) == 0
    said = capsys.readouterr().out
    assert _of_record(world) == plan_sha256(load_plan(v1)), said
    assert said.count("does not count: this version replaces the plan of record") == 3, said


# --- replacement statements, attacked (2026-12-07) -------------------------------------------

def _printed_statement(world, capsys, path: Path) -> Statement:
    capsys.readouterr()
    assert world.cli("plan", "statement", str(path)) == 0
    return Statement.parse(capsys.readouterr().out)


def _submit_signed(world, path: Path, who: str, statement: Statement, tag: str = "") -> int:
    out = world.root / "given" / f"{path.stem}-{who}{tag}"
    out.mkdir(parents=True, exist_ok=True)
    (out / "statement.txt").write_text(statement.text)
    (out / "sig").write_text(sign(statement.message, world.keys[who]))
    return world.cli("plan", "approve", str(path), "--by", who, "--signature", str(out / "sig"),
                     "--statement", str(out / "statement.txt"))


def test_a_replacement_naming_a_malformed_adoption_does_not_break_the_plan_file(world, capsys):
    """One approver signs v2's `plan replacement` statement with a `replaces:` line in another
    spelling (the mark in upper case). It was verified (the field is not compared on the way in) and
    recorded, then could not be mirrored into the plan file, and every later `plan approve` of v2
    failed with an internal error (found by an attack). The statement is refused as it is read."""
    world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    v2 = _fix_version(world, "v2", "2026-01-03", "v2: three days")
    now = _printed_statement(world, capsys, v2)
    assert now.kind == PLAN_REPLACEMENT
    bad = now.text.replace(now["replaces"], now["replaces"].upper())  # signed as text: no Statement makes it
    out = world.root / "given" / "bad"
    out.mkdir(parents=True)
    (out / "statement.txt").write_text(bad)
    (out / "sig").write_text(sign(bad.encode("ascii"), world.keys["alice"]))
    code = world.cli("plan", "approve", str(v2), "--by", "alice", "--signature", str(out / "sig"),
                     "--statement", str(out / "statement.txt"))
    said = capsys.readouterr()
    assert code == 1 and "is not the plan of record's sha256 and its adoption row's hash" in said.err, said
    # then the owner, alice and bob sign the statement printed now, as they should
    later = {}
    for who in ("olivia", "alice", "bob"):
        later[who] = _submit_signed(world, v2, who, _printed_statement(world, capsys, v2), tag="-good")
    after = capsys.readouterr()
    # safe: the bad statement refused with a message (nothing recorded), or recorded and mirrored;
    # never an internal error, and the legitimate approvals land and say so
    assert later == {"olivia": 0, "alice": 0, "bob": 0}, (later, after)
    assert code in (0, 1, 2), (code, said)
    load_plan(v2)  # the file still loads
    assert _of_record(world) == plan_sha256(load_plan(v2))


def test_the_guard_beside_the_warehouse_does_not_allow_a_superseded_version(world, capsys):
    """v1 approved, then v2 replacing it: v1's file still holds v1's plain approvals. Beside the
    warehouse whose record says v2 is the plan of record, the guard answered ALLOWED and `plan show`
    "(approved)", counting them (found by an attack); where the record can be read, a version that
    would replace the plan of record counts only statements naming its adoption."""
    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    v2 = world.approve_replacing(_fix_version(world, "v2", "2026-01-03", "v2: three days"))
    assert _of_record(world) == plan_sha256(load_plan(v2))
    capsys.readouterr()
    guard = world.cli("guard", str(v1))
    guarded = capsys.readouterr().out
    assert world.cli("plan", "show", str(v1)) == 0
    shown = capsys.readouterr().out
    assert guard != 0 and "ALLOWED" not in guarded, guarded
    assert "(approved)" not in shown, shown


def test_a_replacement_that_changes_the_owner_needs_the_plan_of_records_owner(world, capsys):
    """v2, the same plan with `owner: alice`, signed by alice as its owner and by bob and carol,
    replaced olivia's plan of record without a signature of olivia's (found by an attack): a
    version keeps its plan's owner and target."""
    world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    v2 = write_plan(world.root / "plans" / "v2.yaml", edited(
        complete_plan(plan_id="fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",)),
        reason="v2: three days", owner="alice"))
    capsys.readouterr()
    for who in ("alice", "bob", "carol"):
        world.cli("plan", "approve", str(v2), "--by", who, "--key", str(world.keys[who]))
    said = capsys.readouterr()
    assert _of_record(world) != plan_sha256(load_plan(v2)), said


def test_a_replacement_needs_at_least_the_approvers_the_plan_of_record_asked_for(world, capsys):
    """v1 asks for three approvers; v2 lowered `required` to 2 and replaced v1 on two (found by an
    attack): a replacement needs at least what the plan of record it replaces needed."""
    v1 = write_plan(world.root / "plans" / "v1.yaml", edited(
        complete_plan(plan_id="fix", start="2026-01-01", end="2026-01-06", proof=("2026-01-02",)),
        reason="v1: six days", approvals__required=3))
    world.approve(v1, "alice", "bob", "carol")
    assert _of_record(world) == plan_sha256(load_plan(v1))
    v2 = write_plan(world.root / "plans" / "v2.yaml", edited(
        complete_plan(plan_id="fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",)),
        reason="v2: three days", approvals__required=2))
    capsys.readouterr()
    for who in ("olivia", "alice", "bob"):
        world.cli("plan", "approve", str(v2), "--by", who, "--key", str(world.keys[who]))
    said = capsys.readouterr()
    assert _of_record(world) == plan_sha256(load_plan(v1)), said


def test_a_superseded_version_made_plan_of_record_by_the_chain_alone_does_not_run(world, capsys):
    """Whoever holds the evidence key and can write the warehouse appends a row making v1 the plan
    of record again, with no signature given since v2 replaced it: every run re-counted v1's old
    approvals, still unexpired, and wrote v1's days outside v2's window (found by an attack). A
    plan of record adopted over another counts, at every decision, only statements naming the
    adoption it replaced, as its own adoption did."""
    assert world.cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-08") == 0
    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    v2 = world.approve_replacing(_fix_version(world, "v2", "2026-01-03", "v2: three days"))
    assert _of_record(world) == plan_sha256(load_plan(v2))
    from backfill_assets.control import record

    with world.warehouse().session() as session, session.transaction():
        record.adopt(session, "fix", plan_sha256(load_plan(v1)), "operator@host")
    assert _of_record(world) == plan_sha256(load_plan(v1))
    capsys.readouterr()
    world.cli("run", "fix", "--proof")
    world.cli("run", "fix")
    said = capsys.readouterr()
    assert world.sql("SELECT count(*) FROM backfill_control.writes WHERE plan_id = 'fix' "
                     "AND partition_key > '2026-01-03'")[0][0] == 0, said


def test_a_replacements_approvals_renewed_name_the_adoption_it_replaced(world, capsys):
    """v2 replaced v1; while v2 is the plan of record, the statement `backfill plan statement`
    prints for it still names v1's adoption, so approvals given later (a renewal before they
    expire, another approver) count as its adoption's did."""
    from backfill_assets.control import record

    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    with world.warehouse().session() as session:
        first = record.adoption(session, "fix", plan_sha256(load_plan(v1))).mark
    v2 = world.approve_replacing(_fix_version(world, "v2", "2026-01-03", "v2: three days"))
    assert _printed_statement(world, capsys, v2)["replaces"] == first
    assert world.cli("plan", "approve", str(v2), "--by", "carol", "--key", str(world.keys["carol"])) == 0
    said = capsys.readouterr().out
    assert "(alice, bob, carol)" in said and "does not count" not in said, said

def _fix_edit(world, name: str, end: str, reason: str, **changes) -> Path:
    return write_plan(world.root / "plans" / f"{name}.yaml", edited(
        complete_plan(plan_id="fix", start="2026-01-01", end=end, proof=("2026-01-02",)), reason=reason,
        **changes))


def _sha_of_file(path: Path) -> str:
    return plan_sha256(load_plan(path))


# --- the stricter-requirement rule, by a third version ------------------------------------------

def test_a_third_version_cannot_drop_below_what_the_version_it_replaces_needed(world, capsys):
    """v1 asks for three approvers; v2 (asking two) replaced it on three; v3 (asking two) replaced v2
    on two, the stricter of v3's and v2's own requirements (found by an attack): a replacement needs
    what every version made the plan of record before it needed."""
    v1 = _fix_edit(world, "v1", "2026-01-06", "v1: six days", approvals__required=3)
    world.approve(v1, "alice", "bob", "carol")
    assert _of_record(world) == _sha_of_file(v1)
    v2 = world.approve_replacing(_fix_edit(world, "v2", "2026-01-05", "v2: five days", approvals__required=2),
                                 "alice", "bob", "carol")
    assert _of_record(world) == _sha_of_file(v2)
    v3 = _fix_edit(world, "v3", "2026-01-04", "v3: four days", approvals__required=2)
    capsys.readouterr()
    world.approve_replacing(v3, "alice", "bob")
    said = capsys.readouterr().out
    assert _of_record(world) == _sha_of_file(v2), said


# --- the guard and plan show beside the record ----------------------------------------------------

def test_plan_show_and_the_guard_count_the_stricter_requirement_as_the_record_does(world, capsys):
    """v1 asks for three approvers; v2 asks for two and carries the owner's and two approvers'
    replacement statements: the record refuses to adopt it, and `plan show` and the guard beside
    the record said "(approved)" and ALLOWED, counting v2's own requirement (found by an attack)."""
    v1 = _fix_edit(world, "v1", "2026-01-06", "v1: six days", approvals__required=3)
    world.approve(v1, "alice", "bob", "carol")
    v2 = world.approve_replacing(_fix_edit(world, "v2", "2026-01-03", "v2: three days", approvals__required=2),
                                 "alice", "bob")
    assert _of_record(world) == _sha_of_file(v1)  # the record: not enough
    _shown_and_guarded_unapproved(world, capsys, v2)


# --- PostgreSQL: a decision reads the plan's adoptions apart from the chain index ----------------

@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
@pytest.mark.parametrize("decision", [("status", "fix"), ("run", "fix", "--proof")])
def test_a_pause_committed_while_a_decision_reads_the_adoptions_is_not_called_a_forgery(
        engine_world, capsys, monkeypatch, decision):
    """Every decision counts the plan of record through `record.replaced`, which reads the chain index,
    then the plan's state and approval rows. PostgreSQL reads each statement afresh: a `backfill
    pause` committed between the two reads had `backfill status` call the record forged (found by an
    attack); they are read again, as the plan's row and its chain record are (`_read_again`)."""
    from backfill_assets.control import evidence_log

    world = engine_world
    assert world.cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-08") == 0
    world.approve(_fix_edit(world, "v1", "2026-01-06", "v1: six days"))
    real = evidence_log.rows
    fired: list[int] = []

    def rows(session, plan_id=None, kind=None):
        if plan_id == "fix" and isinstance(kind, tuple) and "approval" in kind and not fired:
            fired.append(1)
            assert world.cli("pause", "fix") == 0  # another session's commit, between the two reads
        return real(session, plan_id, kind)

    monkeypatch.setattr(evidence_log, "rows", rows)
    capsys.readouterr()
    code = world.cli(*decision)
    said = capsys.readouterr()
    # (at cc87444 no decision but `plan approve` read the adoptions: the hook never fires there)
    assert "forged" not in (said.out + said.err).lower() and "index" not in said.err.lower(), said
    if decision[0] == "status":
        assert code == 0, said


# --- an insider lowers the bar of a plan of record adopted over another -----------------------------

def test_an_insider_deleting_the_replaced_versions_row_does_not_lower_the_plan_of_records_bar(world, capsys):
    """v1 asks for three approvers; v2 (asking two) replaced it on three, one of which expires, and
    runs are refused. An insider (no evidence key) deletes v1's version row: the replaced version's
    requirement was then skipped and v2 ran on two (found by an attack). A version the chain adopted
    whose row is gone is a forged record."""
    v1, v2 = _replaced_on_three_of_which_one_expires(world, capsys)
    capsys.readouterr()
    assert world.cli("run", "fix", "--proof") != 0  # two of three: refused
    refused = capsys.readouterr()
    assert "approvals do not hold" in refused.err, refused
    world.run_sql("DELETE FROM backfill_control.plan_versions WHERE sha256 = ?", [_sha_of_file(v1)])
    code = world.cli("run", "fix", "--proof")
    said = capsys.readouterr()
    written = world.sql("SELECT count(*) FROM backfill_control.writes WHERE plan_id = 'fix'")[0][0]
    assert code != 0 and written == 0, (code, written, said)


# --- messages -------------------------------------------------------------------------------------

def test_a_replacement_short_of_the_plan_of_records_bar_is_told_why(world, capsys):
    """v2 asks for two approvers and has two, but replaces v1, which asked for three: `plan approve`
    said only "needs 1 more", which v2's own file (`required: 2`) does not explain; it names the
    plan of record that asks for them."""
    v1 = _fix_edit(world, "v1", "2026-01-06", "v1: six days", approvals__required=3)
    world.approve(v1, "alice", "bob", "carol")
    capsys.readouterr()
    world.approve_replacing(_fix_edit(world, "v2", "2026-01-03", "v2: three days", approvals__required=2),
                            "alice", "bob")
    said = capsys.readouterr().out.strip().splitlines()[-1]
    assert "plan of record" in said and _sha_of_file(v1)[:12] in said, said


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_plan_replaced_twice_is_signed_again_run_published_and_rolled_back_on_postgresql(engine_world, capsys):
    """v1, v2 replacing it, v3 replacing v2: every decision after counts v3 as its adoption did
    (statements naming v2's adoption), on PostgreSQL too, and the plan goes the whole way: another
    approver, a pause, the proof, the window published in one command, status, rollback."""
    world = engine_world
    assert world.cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-08") == 0
    world.approve(_fix_edit(world, "v1", "2026-01-06", "v1"))
    world.approve_replacing(_fix_edit(world, "v2", "2026-01-05", "v2"))
    v3 = world.approve_replacing(_fix_edit(world, "v3", "2026-01-04", "v3"))
    assert _of_record(world) == _sha_of_file(v3)
    assert world.cli("plan", "approve", str(v3), "--by", "carol", "--key", str(world.keys["carol"])) == 0
    assert world.cli("pause", "fix") == 0
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix", "--and-publish") == 0, capsys.readouterr()
    assert world.cli("status", "fix") == 0
    assert world.cli("plan", "show", str(v3)) == 0
    assert world.cli("rollback", "fix") == 0, capsys.readouterr()


def test_a_replacement_approved_under_an_earlier_release_is_signed_again_and_then_runs(world, capsys):
    """Before 2026-12-07 a version replaced the plan of record on `plan approval` statements said to
    be signed 10 minutes after its adoption. Such a plan of record (its adoption made as that release
    made it) counts them no more: its runs are refused, saying what to sign; once its owner and
    approvers sign the `plan replacement` statement `backfill plan statement` prints, it runs."""
    from backfill_assets import lifecycle

    assert world.cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-08") == 0
    world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    v2 = _fix_version(world, "v2", "2026-01-03", "v2: three days")
    printed = _printed_statement(world, capsys, v2)
    plain = Statement.make("plan approval", signed=printed.signed, expires=printed.expires, plan=printed["plan"],
                           code=printed["code"], warehouse=printed["warehouse"])
    for who in ("olivia", "alice", "bob"):  # recorded, as the earlier release recorded them
        assert _submit_signed(world, v2, who, plain) == 0
    with world.warehouse().session() as session, session.transaction():  # and adopted, as it adopted them
        lifecycle.approvals_complete(session, "fix", _sha_of_file(v2), "earlier-release")
    capsys.readouterr()
    assert world.cli("run", "fix", "--proof") != 0
    refused = capsys.readouterr().err
    assert "a replacement approved under an earlier release is signed again" in refused, refused
    world.approve_replacing(v2)
    assert world.cli("run", "fix", "--proof") == 0, capsys.readouterr()


def test_a_reader_without_the_evidence_key_prints_statements_status_and_the_guard(world, capsys, monkeypatch):
    """A reader of the warehouse without the evidence key (an approver's machine, a CI job) decides
    nothing and reports what it reads: `plan statement`, `backfill status` and the guard stopped on
    "the evidence key ... is missing" once every count read the plan's adoptions verified (found by
    an attack); they read them unverified there (a mark forged in the table only makes a statement
    count for nothing)."""
    v1 = world.approve(_fix_edit(world, "v1", "2026-01-06", "v1"))
    v2 = _fix_edit(world, "v2", "2026-01-03", "v2")
    monkeypatch.setenv("BACKFILL_EVIDENCE_KEY_FILE", str(world.root / "no-such-key"))
    signers = str(world.root / "approvers" / "allowed_signers")
    capsys.readouterr()
    results = {}
    for args in (("plan", "statement", str(v2)), ("plan", "statement", str(v1)), ("status", "fix"),
                 ("guard", str(v1), "--allowed-signers", signers)):
        code = world.cli(*args)
        said = capsys.readouterr()
        results[" ".join(a[-12:] for a in args)] = (code, said.out[-400:], said.err[-300:])
    failed = {k: v for k, v in results.items() if "is missing" in v[2] or (k.startswith("guard") and not v[1])}
    assert not failed, failed
    assert all(c == 0 for k, (c, _, _) in results.items() if not k.startswith("guard")), results
    # each statement names its warehouse, which a keyless read cannot check: stderr says so
    warehouse = world.sql("SELECT warehouse_id FROM backfill_control.trust_roots")[0][0]
    for key, (_, out, err) in results.items():
        if key.startswith("plan statement"):
            assert f"warehouse: {warehouse}" in out and f"warehouse ({warehouse}) is unchecked" in err, (key, err)


def test_a_statement_read_without_the_key_says_its_warehouse_is_unchecked(world, capsys, monkeypatch):
    """An insider of staging types production's warehouse id into staging's trust root; an approver
    without the evidence key prints the plan's statement there to sign it for staging, as they
    think: it named production, where the signature counts (found by an attack). The statement is
    printed as read (approvers sign offline from such readers), and stderr says its warehouse is
    unchecked and where to compare it; `approvers statement` too. With the key nothing is said."""
    path = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    capsys.readouterr()
    assert world.cli("plan", "statement", str(path)) == 0
    assert "unchecked" not in capsys.readouterr().err
    world.run_sql("UPDATE backfill_control.trust_roots SET warehouse_id = 'wh-0000000000000000'")
    monkeypatch.setenv("BACKFILL_EVIDENCE_KEY_FILE", str(world.root / "no-such-key"))
    signers = str(world.root / "approvers" / "allowed_signers")
    for args in (("plan", "statement", str(path)), ("approvers", "statement", signers)):
        assert world.cli(*args) == 0
        said = capsys.readouterr()
        assert "wh-0000000000000000" in said.out, (args, said.out)
        assert said.err.count("\n") == 1 and "backfill approvers show" in said.err, (args, said.err)
        assert "warehouse (wh-0000000000000000) is unchecked" in said.err


def test_the_guard_and_plan_show_beside_the_record_refuse_a_replacement_that_changes_the_owner(world, capsys):
    """v2 names another owner and carries replacement statements naming v1's adoption, signed by its
    owner and two approvers: the record never adopts it, but `plan show` and the guard beside the
    record counted its file "(approved)" and ALLOWED (found by an attack). They refuse what `plan
    approve` refuses (`approving.takeover_refusal`), each signature void saying why."""
    world.approve(_fix_edit(world, "v1", "2026-01-06", "v1: six days"))
    v2 = _fix_edit(world, "v2", "2026-01-03", "v2: three days", owner="alice")
    from backfill_assets.plan.approvals import entry_of, mirror_into_file
    from backfill_assets.signing.sshsig import sign
    from backfill_assets.signing.statements import Statement

    capsys.readouterr()
    assert world.cli("plan", "statement", str(v2)) == 0
    printed = Statement.parse(capsys.readouterr().out)
    # signed offline, pasted into the file (what `plan approve` would have mirrored)
    mirror_into_file(v2, [entry_of(who, printed, sign(printed.message, world.keys[who]))
                          for who in ("alice", "bob", "carol")])
    for who in ("alice", "bob", "carol"):  # the record refuses each
        assert world.cli("plan", "approve", str(v2), "--by", who, "--key", str(world.keys[who])) != 0
    with world.warehouse().session() as session:
        of_record = session.rows("SELECT approved_sha256 FROM backfill_control.plans WHERE plan_id = 'fix'")[0][0]
    assert of_record != plan_sha256(load_plan(v2))  # the record: never
    guarded = _shown_and_guarded_unapproved(world, capsys, v2)
    assert "cannot replace it" in guarded, guarded


def test_a_run_refused_for_the_replaced_versions_bar_says_why_more_are_needed(world, capsys):
    """v1 asks for three approvers; v2 (`required: 2`) replaced it on three, one of which expires: runs
    are refused "needs 1 more", which v2's file does not explain (found by an attack); the refusal
    names the plan of record that asks for more."""
    v1, v2 = _replaced_on_three_of_which_one_expires(world, capsys)
    capsys.readouterr()
    assert world.cli("run", "fix", "--proof") != 0
    refused = capsys.readouterr().err
    assert "approvals do not hold" in refused, refused
    assert plan_sha256(load_plan(v1))[:12] in refused and "never lowers the bar" in refused, refused


def test_the_guard_allows_a_closed_plan_of_record_that_replaced_another(world, capsys):
    """v1 approved, v2 replaced it, ran, was published and closed: the guard over every plan (the
    README's `backfill guard plans/*.yaml`) refused v2's own file as a takeover of an ended plan, and
    `plan show` dropped "(approved)" (found by a review): the plan of record is never a takeover."""
    assert world.cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-08") == 0
    world.approve(_fix_edit(world, "v1", "2026-01-06", "v1: six days"))
    v2 = world.approve_replacing(_fix_edit(world, "v2", "2026-01-04", "v2: four days"))
    assert _of_record(world) == plan_sha256(load_plan(v2))
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix", "--and-publish") == 0, capsys.readouterr()
    assert world.cli("plan", "close", "fix") == 0, capsys.readouterr()
    capsys.readouterr()
    assert world.cli("plan", "show", str(v2)) == 0
    shown = capsys.readouterr().out
    guard = world.cli("guard", str(v2))
    guarded = capsys.readouterr().out
    assert "has ended" not in guarded and guard == 0, guarded
    assert "(approved)" in shown, shown


@pytest.mark.parametrize("forged", [
    "UPDATE backfill_control.evidence SET recorded_at = 'yesterday' WHERE plan_id = 'fix' AND kind = 'plan_of_record'",
    "UPDATE backfill_control.evidence SET payload = '{\"sha256\": 1, \"state\": \"x\"}' "
    "WHERE plan_id = 'fix' AND kind = 'transition'",
])
def test_a_reader_without_the_key_is_told_one_line_when_an_unverified_row_is_malformed(world, capsys, monkeypatch,
                                                                                       forged):
    """An insider (writes the warehouse, no key) edits the plan's chain rows; a writer refuses them as
    forged, and a reader without the key, reading them unverified, ended in an internal error (found
    by a review): it reads them as data of any shape."""
    world.approve(_fix_edit(world, "v1", "2026-01-06", "v1"))
    v2 = _fix_edit(world, "v2", "2026-01-03", "v2")
    world.run_sql(forged)
    monkeypatch.setenv("BACKFILL_EVIDENCE_KEY_FILE", str(world.root / "no-such-key"))
    capsys.readouterr()
    code = world.cli("plan", "statement", str(v2))
    said = capsys.readouterr()
    assert "internal error" not in said.err, said.err
    assert code in (0, 1, 2), (code, said.err)


def _replaced_on_three_of_which_one_expires(world, capsys) -> tuple[Path, Path]:
    """v1 asks for three approvers; v2 (asking two) replaces it on alice's, bob's and carol's
    signatures, carol's over a statement that expires 12 s after it is printed; returns (v1, v2)
    once it has (v2 then needs three and has two)."""
    import datetime as dt
    import time

    from backfill_assets.signing.sshsig import sign
    from backfill_assets.signing.statements import Statement

    assert world.cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-08") == 0
    v1 = _fix_edit(world, "v1", "2026-01-06", "v1: six days", approvals__required=3)
    world.approve(v1, "alice", "bob", "carol")
    v2 = _fix_edit(world, "v2", "2026-01-05", "v2: five days", approvals__required=2)
    capsys.readouterr()
    assert world.cli("plan", "statement", str(v2)) == 0
    printed = Statement.parse(capsys.readouterr().out)
    signed = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(days=14) + dt.timedelta(seconds=12)
    short = Statement.make(printed.kind, signed=signed, expires=signed + dt.timedelta(days=14),
                           **dict(printed.values))
    out = world.root / "short"
    out.mkdir()
    (out / "statement.txt").write_text(short.text)
    (out / "carol.sig").write_text(sign(short.message, world.keys["carol"]))
    assert world.cli("plan", "approve", str(v2), "--by", "carol", "--statement", str(out / "statement.txt"),
                     "--signature", str(out / "carol.sig")) == 0
    world.approve_replacing(v2, "alice", "bob")
    assert _of_record(world) == _sha_of_file(v2), capsys.readouterr()
    time.sleep(max(0.0, (short.expires - dt.datetime.now(dt.UTC)).total_seconds() + 1))
    return v1, v2


def _shown_and_guarded_unapproved(world, capsys, path: Path) -> str:
    """`plan show` beside the record does not say "(approved)" and the guard refuses; its output."""
    capsys.readouterr()
    assert world.cli("plan", "show", str(path)) == 0
    shown = capsys.readouterr().out
    guard = world.cli("guard", str(path))
    guarded = capsys.readouterr().out
    assert guard != 0 and "ALLOWED" not in guarded, guarded
    assert "(approved)" not in shown, shown
    return guarded


def test_a_rollback_of_a_replacement_needs_the_bar_of_the_plan_of_record_it_replaced(world, capsys):
    """v1 asks three approvers; v2 (asking two) replaced it on three, ran and was published. The team
    then drops carol's key (a re-pin signed by alice and bob), so v2's approvals no longer hold and
    rolling back what consumers see needs rollback signatures: alice's and bob's alone rolled it back
    (the rollback counted v2's own two, not the three of the plan of record it replaced: found by
    an attack). A replacement never lowers the bar, for a rollback either."""
    from tests.world import signers_text

    assert world.cli("load", "daily_revenue", "--start", "2026-01-01", "--end", "2026-01-08") == 0
    world.approve(_fix_edit(world, "v1", "2026-01-03", "v1: three days", approvals__required=3),
                  "alice", "bob", "carol")
    v2 = _fix_edit(world, "v2", "2026-01-02", "v2: two days", approvals__required=2)
    world.approve_replacing(v2, "alice", "bob", "carol")
    assert _of_record(world) == _sha_of_file(v2)
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix", "--and-publish") == 0
    without_carol = world.root / "without-carol" / "allowed_signers"
    without_carol.parent.mkdir()
    without_carol.write_text(signers_text(world.keys, ("alice", "bob", "olivia")))
    assert world.cli("approvers", "pin", str(without_carol), "--sign", f"alice={world.keys['alice']}",
                     "--sign", f"bob={world.keys['bob']}") == 0
    published = world.fingerprints("published_revenue", ["2026-01-01", "2026-01-02"])
    capsys.readouterr()
    assert world.cli("rollback", "fix") != 0
    assert "changes what consumers see" in capsys.readouterr().err
    code = world.cli("rollback", "fix", "--sign", f"alice={world.keys['alice']}", "--sign", f"bob={world.keys['bob']}")
    said = capsys.readouterr().err
    assert code != 0 and world.phase() == "published", said
    assert "3 approver" in said and said.count("\n") == 1, said
    assert world.fingerprints("published_revenue", ["2026-01-01", "2026-01-02"]) == published


def test_a_keyless_guard_beside_the_record_never_allows_a_superseded_version(world, capsys, monkeypatch):
    """A pull request reverts the plan file to v1, which v2 replaced, with v1's old signatures from
    git history. The CI job may read the warehouse but not the evidence key: the guard, given the
    team's allowed_signers, counted v1's plain approvals and answered ALLOWED, while every run
    refuses v1 (found by an attack). Read unverified, the record still says what v1 would have to
    name; the guard counts by it (rows it cannot verify can only make it refuse)."""
    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    v2 = world.approve_replacing(_fix_version(world, "v2", "2026-01-03", "v2: three days"))
    assert _of_record(world) == _sha_of_file(v2)
    monkeypatch.setenv("BACKFILL_EVIDENCE_KEY_FILE", str(world.root / "no-such-key"))
    signers = str(world.root / "approvers" / "allowed_signers")
    capsys.readouterr()
    assert world.cli("guard", str(v1), "--allowed-signers", signers) != 0
    guarded = capsys.readouterr().out
    assert "ALLOWED" not in guarded, guarded
    assert world.cli("guard", str(v2), "--allowed-signers", signers) == 0  # the plan of record still is
    assert "ALLOWED" in capsys.readouterr().out


def _plant_adoption_of(world, content: str) -> None:
    """An insider's SQL (no evidence key): a plan_versions row whose content hashes to its sha256 but
    is no plan, and a chain row making it plan fix's plan of record; neither verifies."""
    import hashlib
    import json

    sha = hashlib.sha256(content.encode("ascii")).hexdigest()
    world.run_sql("INSERT INTO backfill_control.plan_versions VALUES (?, 'fix', ?, '[]', NULL, "
                  "'2026-12-07T00:00:00Z', NULL)", [sha, content])
    seq = world.sql("SELECT max(seq) FROM backfill_control.evidence")[0][0] + 1
    world.run_sql("INSERT INTO backfill_control.evidence VALUES (?, '2026-12-07T00:00:00Z', 'fix', 'plan_of_record', "
                  "'mallory', ?, 'x', 'y')", [seq, json.dumps({"sha256": sha})])


@pytest.mark.parametrize("content", ["not json", "[]"])
@pytest.mark.parametrize("command", ["guard", "show"])
def test_a_keyless_guard_refuses_in_one_line_on_rows_no_plan_wrote(world, capsys, monkeypatch, content, command):
    """An insider plants a version whose content is no plan and a chain row adopting it; a CI job
    without the evidence key runs the guard or `plan show` beside the record: both stopped with an
    internal error (found by an attack). Rows read unverified can only make them refuse."""
    world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    v2 = _fix_version(world, "v2", "2026-01-03", "v2: three days")
    _plant_adoption_of(world, content)
    monkeypatch.setenv("BACKFILL_EVIDENCE_KEY_FILE", str(world.root / "no-such-key"))
    capsys.readouterr()
    args = ["guard", str(v2)] if command == "guard" else ["plan", "show", str(v2)]
    code = world.cli(*args, "--allowed-signers", str(world.root / "approvers" / "allowed_signers"))
    said = capsys.readouterr()
    assert code in (0, 1) and "internal error" not in said.err and "ALLOWED" not in said.out, (code, said)
    assert "(approved)" not in said.out


def test_a_keyless_guard_is_not_brought_to_allow_a_superseded_version_by_rows_cut_off_the_chain(world, capsys,
                                                                                                monkeypatch):
    """v2 replaced v1; a pull request reverts the file to v1 with its old signatures; an insider
    deletes the chain rows recorded since v1 was adopted (only the head log beside the key shows a
    cut end). The guard without the key read v1 as the first plan of record and answered ALLOWED,
    while the plan's row still names v2 and every run refuses v1 (found by an attack)."""
    v1 = world.approve(_fix_version(world, "v1", "2026-01-06", "v1: six days"))
    cut = world.sql("SELECT max(seq) FROM backfill_control.evidence")[0][0]
    world.approve_replacing(_fix_version(world, "v2", "2026-01-03", "v2: three days"))
    world.run_sql("DELETE FROM backfill_control.evidence WHERE seq > ?", [cut])
    monkeypatch.setenv("BACKFILL_EVIDENCE_KEY_FILE", str(world.root / "no-such-key"))
    capsys.readouterr()
    assert world.cli("guard", str(v1), "--allowed-signers", str(world.root / "approvers" / "allowed_signers")) != 0
    guarded = capsys.readouterr().out
    assert "ALLOWED" not in guarded and "shows no adoption of it" in guarded, guarded
