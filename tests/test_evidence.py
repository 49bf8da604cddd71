"""The evidence (issue 9): a keyed hash chain whose edits, re-chaining and cut-off ends are detected,
and a rendered release-gate file that summarises instead of listing every gate of every partition."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from pathlib import Path

import duckdb
import pytest
import yaml

from tests.conftest import Result
from tests.world import FIXED, keys

CHAIN = ("SELECT seq, recorded_at, plan_id, kind, actor, payload, prev_hash, row_hash "
         "FROM backfill_control.evidence ORDER BY seq")


def material(prev: str, seq: int, at: str, plan_id: str | None, kind: str, actor: str, payload: str) -> bytes:
    """What a row's hash covers (the code is public: an attacker knows this much)."""
    return json.dumps([prev, seq, at, plan_id, kind, actor, payload], separators=(",", ":")).encode()


def chain(world) -> list[tuple]:
    return world.sql(CHAIN)


def evidence_key(world) -> Path:
    return world.home / "keys" / "evidence.key"


def heads_log(world) -> Path:
    return world.home / "keys" / "evidence-heads.log"


def approved(world, name: str = "fix") -> Path:
    assert world.cli("init") == 0
    return world.approved_plan(name, start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))


def tamper(world, *statements: tuple[str, list]) -> None:
    """Edits made with a plain SQL client, outside backfill (no key, no head log): as another
    process makes them, once this one let go of the file (the `world` fixture's kept database)."""
    world.warehouse().engine.let_go()
    con = duckdb.connect(str(world.warehouse_path))
    try:
        for sql, params in statements:
            con.execute(sql, params)
    finally:
        con.close()


@pytest.fixture
def backfill(world, capsys, monkeypatch):
    """`backfill` in process on the world's home (a subprocess adds start-up time, not coverage)."""

    def run(*args: str, env: dict[str, str] | None = None) -> Result:
        with monkeypatch.context() as patched:
            for name, value in (env or {}).items():
                patched.setenv(name, value)
            capsys.readouterr()
            code = world.cli(*args)
            captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def test_init_creates_a_private_key_and_every_row_is_an_hmac_under_it(world, capsys):
    assert world.cli("init") == 0
    key_path = evidence_key(world)
    assert f"evidence key {key_path} (mode 0600" in capsys.readouterr().out
    assert key_path.stat().st_mode & 0o777 == 0o600
    assert key_path.parent.stat().st_mode & 0o077 == 0  # keys/ is private too
    key_text = key_path.read_text()
    assert re.fullmatch(r"[0-9a-f]{64}\n", key_text)
    assert world.cli("init") == 0 and key_path.read_text() == key_text  # never replaced
    approved(world)

    rows = chain(world)
    assert len(rows) >= 5 and rows[0][6] == "0" * 64
    key = bytes.fromhex(key_text.strip())
    prev = "0" * 64
    for seq, at, plan_id, kind, actor, payload, prev_hash, row_hash in rows:
        assert prev_hash == prev
        data = material(prev, seq, at, plan_id, kind, actor, payload)
        assert row_hash == hmac.new(key, data, hashlib.sha256).hexdigest()
        assert row_hash != hashlib.sha256(data).hexdigest()  # a keyless recomputation cannot match
        prev = row_hash
    last = heads_log(world).read_text().splitlines()[-1]
    assert last == f"{rows[-1][0]} {rows[-1][7]}"


def test_an_edited_row_rechained_with_plain_sha256_is_detected_naming_the_row(world, backfill, run_subprocess):
    approved(world)
    rows = chain(world)
    assert backfill("evidence", "verify").out.startswith(f"evidence chain verified: {len(rows)} chain row(s) intact")
    victim = next(r for r in rows if r[3] == "approval" and "bob" in r[5])
    forged_payload = victim[5].replace("bob", "carol")
    assert forged_payload != victim[5]
    # what someone with write access to the warehouse but not the key can do: edit, then re-chain
    statements, prev = [], victim[6]
    for seq, at, plan_id, kind, actor, payload, _prev, _hash in rows[victim[0] - 1:]:
        payload = forged_payload if seq == victim[0] else payload
        digest = hashlib.sha256(material(prev, seq, at, plan_id, kind, actor, payload)).hexdigest()
        statements.append(("UPDATE backfill_control.evidence SET payload = ?, prev_hash = ?, row_hash = ? "
                           "WHERE seq = ?", [payload, prev, digest, seq]))
        prev = digest
    tamper(world, *statements)
    assert all(a[6] == b[7] for a, b in zip(chain(world)[1:], chain(world), strict=False))  # linked again

    in_process = backfill("evidence", "verify")
    for result in (in_process, run_subprocess("--home", str(world.home), "evidence", "verify")):
        assert result.code == 1 and result.out == ""
        assert one_line(result.err).startswith(f"backfill: evidence row {victim[0]} does not verify (its "
                                               "content was changed after it was written)")


def test_rows_cut_off_the_end_or_an_emptied_chain_are_detected_without_against(world, backfill):
    approved(world)
    last = chain(world)[-1][0]
    tamper(world, ("DELETE FROM backfill_control.evidence WHERE seq > ?", [last - 2]))
    assert len(chain(world)) == last - 2
    cut = backfill("evidence", "verify")
    assert cut.code == 1
    assert one_line(cut.err).startswith(
        f"backfill: evidence row {last} does not verify (the head log recorded it, but it is missing or "
        "different now")

    tamper(world, ("DELETE FROM backfill_control.evidence", []))
    emptied = backfill("evidence", "verify")
    assert emptied.code == 1
    assert one_line(emptied.err).startswith(
        f"backfill: evidence row {last} does not verify (the chain is empty, but the head log "
        f"{heads_log(world)} recorded rows up to it)")


@pytest.mark.parametrize("number", [0, -5])
def test_rows_numbered_outside_the_chain_are_found_by_verify_the_render_and_every_decision(world, backfill, number):
    """An insider without the key added rows numbered 0 and below, copying row 1's hashes: verify
    walked rows numbered above 0 and the index digested no row count, so `evidence verify` passed
    and the rendered file said `published: {by: mallory, rows: 999}` under `verified: true`
    (found by an attack)."""
    approved(world)
    assert world.cli("run", "fix", "--proof") == 0
    first = chain(world)[0]
    forged = [("rollback", {"rows": 3}), ("published", {"rows": 999})]
    tamper(world, *[("INSERT INTO backfill_control.evidence VALUES (?, ?, 'fix', ?, 'mallory', ?, ?, ?)",
                     [number - i, first[1], kind, json.dumps(payload), first[6], first[7]])
                    for i, (kind, payload) in enumerate(forged)])
    last = max(r[0] for r in chain(world))
    why = f"evidence row {last} does not verify (the chain holds {last + 2} row(s) numbered up to {last}"
    verify = backfill("evidence", "verify")
    assert verify.code == 1 and one_line(verify.err).startswith(f"backfill: {why}"), verify.err
    rendered = backfill("evidence", "fix")  # reading the plan's state finds it: no document at all
    assert rendered.code == 1 and why in one_line(rendered.err) and "mallory" not in rendered.out
    window = backfill("run", "fix")  # a decision: the index's count of rows says it too
    assert window.code == 1 and why in one_line(window.err)
    assert world.sql("SELECT count(*) FROM backfill_control.writes WHERE partition_key <> '2026-01-02'") == [(0,)]


def test_approvals_deleted_from_their_table_are_found_by_verify(world, backfill):
    """An insider deleted the approvals: every run asked for the signatures again, and `evidence
    verify` said the record was intact (found by an attack). The chain's approval rows hold each
    signature, so verify names the one gone."""
    approved(world)
    seq = world.sql("SELECT min(seq) FROM backfill_control.evidence WHERE kind = 'approval'")[0][0]
    tamper(world, ("DELETE FROM backfill_control.approvals", []))
    verify = backfill("evidence", "verify")
    assert verify.code == 1
    assert f"is in the evidence chain (row {seq}), but gone from backfill_control.approvals" in one_line(verify.err)


def test_an_approval_row_planted_by_hand_is_not_listed_as_a_signer_in_the_evidence(world):
    """The evidence listed the approvals table as stored: alice's row copied under carol's name, with
    a key of their making, showed as a fourth signer (found by an attack; counting verifies each
    signature, so no decision changed). It lists the signatures the chain recorded."""
    approved(world)
    tamper(world, ("INSERT INTO backfill_control.approvals SELECT approval_id + 1000000, sha256, plan_id, 'carol', "
                   "statement, signature, 'SHA256:carols-key', trust_version, actor, approved_at, evidence_seq "
                   "FROM backfill_control.approvals WHERE principal = 'alice'", []))
    out = world.root / "evidence.yaml"
    assert world.cli("evidence", "fix", "--out", str(out)) == 0
    signed = yaml.safe_load(out.read_text())["approvals"]["signed"]
    assert sorted(line.split()[0] for line in signed) == ["alice", "bob", "olivia"], signed


def test_a_notice_deleted_from_the_outbox_is_found_by_verify(world, backfill):
    """Deleting an undelivered notice (the freeze told to downstream owners) dropped it silently;
    the chain's notification row names it, so verify says which is gone."""
    approved(world)
    assert world.cli("run", "fix", "--proof") == 0  # the freeze: downstream owners are told
    notice, seq = world.sql("SELECT CAST(json_extract_string(payload, '$.notice_id') AS BIGINT), seq FROM "
                            "backfill_control.evidence WHERE kind = 'notification' ORDER BY seq LIMIT 1")[0]
    tamper(world, ("DELETE FROM backfill_control.outbox WHERE notice_id = ?", [notice]))
    verify = backfill("evidence", "verify")
    assert verify.code == 1
    assert f"notice {notice} of plan fix is in the evidence chain (row {seq}), but gone from " \
           "backfill_control.outbox" in one_line(verify.err)


def test_evidence_render_exits_1_when_the_chain_does_not_verify_and_the_file_says_why(world, backfill):
    path = approved(world)
    good = world.root / "evidence" / "good.yaml"
    rendered = backfill("evidence", str(path), "--out", str(good))
    assert rendered.code == 0, rendered.err
    assert yaml.safe_load(good.read_text())["chain"]["verified"] is True

    victim = chain(world)[2][0]
    tamper(world, ("UPDATE backfill_control.evidence SET actor = 'someone-else' WHERE seq = ?", [victim]))
    bad = world.root / "evidence" / "bad.yaml"
    result = backfill("evidence", "fix", "--out", str(bad))
    assert result.code == 1
    assert result.out == f"wrote evidence for fix to {bad}\n"
    assert one_line(result.err).startswith(
        f"backfill: the evidence was written, but its chain does not verify: NO: evidence row {victim} does "
        "not verify (its content was changed after it was written)")
    verified = yaml.safe_load(bad.read_text())["chain"]["verified"]
    assert verified.startswith(f"NO: evidence row {victim} does not verify")
    printed = backfill("evidence", "fix")  # to stdout: the document, then the same refusal
    assert printed.code == 1 and "verified: 'NO: evidence row" in printed.out


def test_verify_against_a_rendered_file_finds_its_pinned_row(world, backfill):
    path = approved(world)
    out = world.root / "evidence.yaml"
    assert backfill("evidence", str(path), "--out", str(out)).code == 0
    pinned = yaml.safe_load(out.read_text())["chain"]["head_seq"]
    assert pinned == chain(world)[-1][0]
    ok = backfill("evidence", "verify", "--against", str(out))
    assert ok.code == 0 and ok.out.strip().endswith(f"row {pinned} pinned by {out} is there")

    assert world.cli("plan", "withdraw", "fix", "--note", "not needed") == 0  # the chain grows
    assert chain(world)[-1][0] > pinned
    assert backfill("evidence", "verify", "--against", str(out)).code == 0

    # the head log gone as well as the end of the chain: the rendered file still knows its row
    heads_log(world).unlink()
    tamper(world, ("DELETE FROM backfill_control.evidence WHERE seq >= ?", [pinned - 1]))
    cut = backfill("evidence", "verify", "--against", str(out))
    assert cut.code == 1
    assert one_line(cut.err).startswith(
        f"backfill: evidence row {pinned} does not verify (the rendered evidence recorded it, but it is "
        "missing or different now")

    not_evidence = world.root / "plans" / "fix.yaml"
    misuse = backfill("evidence", "verify", "--against", str(not_evidence))
    assert misuse.code == 2
    assert "is not a rendered evidence file with a chain head" in one_line(misuse.err)


def test_a_missing_key_is_one_line_naming_its_path_and_is_never_recreated(world, backfill):
    path = approved(world)
    key_path = evidence_key(world)
    moved = world.root / "vault" / "evidence.key"
    moved.parent.mkdir()
    key_path.rename(moved)  # say, into a vault, with the head log beside it
    heads_log(world).rename(moved.parent / heads_log(world).name)
    rows = len(chain(world))

    verify = backfill("evidence", "verify")
    assert verify.code == 1
    assert one_line(verify.err) == (f"backfill: the evidence key {key_path} is missing: restore it from "
                                    "backup (the chain cannot be verified or extended without it), or "
                                    "point BACKFILL_EVIDENCE_KEY_FILE at it")
    out = world.root / "evidence.yaml"
    render = backfill("evidence", str(path), "--out", str(out))
    assert render.code == 1 and f"the evidence key {key_path} is missing" in one_line(render.err)
    assert f"the evidence key {key_path} is missing" in yaml.safe_load(out.read_text())["chain"]["verified"]

    before = path.read_text()
    more = backfill("plan", "approve", str(path), "--by", "carol", "--key", str(world.keys["carol"]))
    assert more.code == 1 and f"the evidence key {key_path} is missing" in one_line(more.err)
    assert not key_path.exists(), "a new key would start a second, unverifiable chain"
    assert len(chain(world)) == rows and path.read_text() == before

    found = backfill("evidence", "verify", env={"BACKFILL_EVIDENCE_KEY_FILE": str(moved)})
    assert found.code == 0 and f"{rows} chain row(s) intact" in found.out, found.err


def test_rendered_evidence_is_a_summary_with_every_failure_in_full(world, backfill):
    assert world.cli("init") == 0
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-08", proof=("2026-01-01",), per_run=8)
    assert world.cli("run", str(path), "--proof") == 0
    broken = ["2026-01-04", "2026-01-06"]
    for day in broken:  # two source rows without a region: the contract gate fails on those days only
        world.run_sql("INSERT INTO orders SELECT order_id + 1000000, customer_id, NULL, order_ts, "
                      "order_date, amount, status FROM orders WHERE order_date = ? LIMIT 2", [day])
    assert world.cli("run", str(path)) == 1
    out = world.root / "evidence.yaml"
    assert world.cli("evidence", str(path), "--out", str(out)) == 0
    text = out.read_text()
    document = yaml.safe_load(text)

    gates = document["gates"]
    assert (gates["partitions"], gates["written"], gates["passed"]) == (8, 8, 6)
    assert gates["failed"] == {day: {"contract_holds": "region: 1 NULL(s) in a non-nullable column"}
                               for day in broken}
    assert re.fullmatch(r"[0-9a-f]{64}", gates["results_sha256"])
    assert document["snapshots"]["partitions"] == 8
    assert re.fullmatch(r"[0-9a-f]{64}", document["snapshots"]["sha256"])
    assert document["plan"]["window"] == {"start": "2026-01-01", "end": "2026-01-08", "partitions": 8}
    assert document["chain"]["verified"] is True and document["chain"]["rows"] == len(
        [r for r in chain(world) if r[2] == "fix"])
    # a summary: no line per partition or per gate, so passing days are not even named
    for day in keys(2, 3) + ["2026-01-05", "2026-01-07"]:
        assert day not in text, day
    # (its size grows with the signatures, each with its verdict and the quorum's, never with the partitions)
    assert len(text) < 2800 and text.count("\n") < 80, text

    # the digest stands for every result: fixing the two days changes it, and empties `failed`
    world.run_sql("DELETE FROM orders WHERE region IS NULL")
    assert world.cli("run", str(path), "--partitions", ",".join(broken)) == 0
    again = backfill("evidence", "fix")
    assert again.code == 0
    fixed = yaml.safe_load(again.out)["gates"]
    assert (fixed["passed"], fixed["failed"]) == (8, {})
    assert fixed["results_sha256"] != gates["results_sha256"]
    # the failures stay in the file an auditor reads, with their figures and time, beside their repairs
    history = yaml.safe_load(again.out)["history"]
    assert [" ".join(line.split()[:3]) for line in history["failures"]] == [
        f"daily_revenue {day} contract_holds" for day in broken]
    assert all(re.search(r"difference=1 \(region: 1 NULL\(s\) in a non-nullable column\) at 20\d\d-", line)
               for line in history["failures"]), history["failures"]
    assert [line.split(" failed on write")[0] for line in history["repairs"]] == [f"daily_revenue {d}" for d in broken]
    assert all(re.search(r"passed on write \d+ \(code 2\) at ", line) for line in history["repairs"])
    assert [line.split(" (")[0] for line in history["code_versions"]] == ["daily_revenue code 2"]
    assert "8 partition(s) written" in history["code_versions"][0]
    assert document["history"]["repairs"] == [] and len(document["history"]["failures"]) == 2

    # a release signed for and deployed mid-window: the file names both code versions written
    from dataclasses import replace

    newer = replace(FIXED, code_version="3")
    world.approve_for(path, newer)
    assert not world.plan_run("fix", ["2026-01-08"], spec=newer).success  # single_code_version fails it
    versions = yaml.safe_load(backfill("evidence", "fix").out)["history"]["code_versions"]
    assert [line.split(" (")[0] for line in versions] == ["daily_revenue code 2", "daily_revenue code 3"], versions
    assert "1 partition(s) written" in versions[1]


@pytest.mark.separate_processes
def test_a_key_folder_mounted_read_only_is_one_line_before_anything_commits(world):
    """A Kubernetes secret: the key readable, its folder read-only. The head log cannot be written
    there, which is said before the command commits, not after; elsewhere it works."""
    import subprocess

    from tests.conftest import BIN

    path = world.plan("fix")
    keys_folder = evidence_key(world).parent
    rows = len(chain(world))
    env = {**os.environ, "BACKFILL_HOME": str(world.home), "PYTHONWARNINGS": "ignore",
           "BACKFILL_DEFS": "backfill_assets.demo.daily"}
    approve = [str(BIN / "backfill"), "--home", str(world.home), "plan", "approve", str(path), "--by", "olivia",
               "--key", str(world.keys["olivia"])]
    mounted = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,ro,bind "$0" "$0" '
               '&& exec "$@"', str(keys_folder), *approve]
    refused = subprocess.run(mounted, capture_output=True, text=True, env=env, cwd=world.root, timeout=120)
    assert refused.returncode == 1, refused
    assert "cannot append to the evidence head log" in refused.stderr and "BACKFILL_EVIDENCE_HEADS_FILE" in \
        refused.stderr and refused.stderr.count("\n") == 1, refused.stderr
    assert len(chain(world)) == rows and "plan_sha256" not in path.read_text()  # nothing committed
    heads = world.root / "writable" / "heads.log"
    heads.parent.mkdir()
    done = subprocess.run(mounted, capture_output=True, text=True, timeout=120, cwd=world.root,
                          env={**env, "BACKFILL_EVIDENCE_HEADS_FILE": str(heads)})
    assert done.returncode == 0, done
    assert heads.read_text().split()[-1] == chain(world)[-1][7]


def test_a_process_given_another_evidence_key_is_refused_before_it_appends(world, backfill, tmp_path):
    path = world.plan("fix")
    assert world.cli("plan", "approve", str(path), "--by", "olivia", "--key", str(world.keys["olivia"])) == 0
    rows = len(chain(world))
    other = tmp_path / "other.key"
    other.write_text(os.urandom(32).hex() + "\n")
    refused = backfill("plan", "approve", str(path), "--by", "alice", "--key", str(world.keys["alice"]),
                       env={"BACKFILL_EVIDENCE_KEY_FILE": str(other)})
    assert refused.code == 1 and "is not the key this warehouse's chain was made with" in refused.err, refused
    assert one_line(refused.err)
    assert len(chain(world)) == rows  # the chain is not broken for good: nothing was appended
    assert backfill("evidence", "verify").code == 0


def test_another_homes_evidence_key_is_named_as_the_wrong_key_not_as_an_edited_chain(world, backfill, run_subprocess,
                                                                                     tmp_path):
    """Another home's key, with its head log beside it (the head log goes where the key is): the
    command said the head log's row was cut off the chain and the control record edited outside
    backfill (restore it from backup), about an intact chain (found by a review)."""
    path = world.plan("fix")
    assert world.cli("plan", "approve", str(path), "--by", "olivia", "--key", str(world.keys["olivia"])) == 0
    rows = len(chain(world))
    other = tmp_path / "other-home" / "keys"
    other.mkdir(parents=True, mode=0o700)
    (other / "evidence.key").write_text(os.urandom(32).hex() + "\n")
    (other / "evidence.key").chmod(0o600)
    (other / "evidence-heads.log").write_text(f"{rows} {os.urandom(32).hex()}\n")  # that chain's head
    for command in (("pause", "fix"), ("plan", "withdraw", "fix"),
                    ("plan", "approve", str(path), "--by", "alice", "--key", str(world.keys["alice"]))):
        # a process of its own: one that held the file since a check compares only the chain's last row
        refused = run_subprocess(*command, env={"BACKFILL_EVIDENCE_KEY_FILE": str(other / "evidence.key")})
        assert refused.code == 1 and "is not the key this warehouse's chain was made with" in refused.err, refused
        assert one_line(refused.err) and "edited outside backfill" not in refused.err
    assert len(chain(world)) == rows
    assert backfill("evidence", "verify").code == 0


def test_a_head_log_turned_into_a_pipe_after_its_check_is_a_warning_after_the_commit(world, capfd):
    """The head log is checked once per session; should it stop being a regular file before a later
    commit of that session, the commit stands and the missing head is one warning line."""
    from backfill_assets.control import evidence_log

    assert world.cli("init") == 0
    with world.warehouse().session() as session:
        evidence_log.append(session, plan_id=None, kind="note", actor="test", payload={"n": 1})  # checks it
        heads_log(world).unlink()
        os.mkfifo(heads_log(world))  # no reader: opening it to write fails (ENXIO), said as a pipe
        capfd.readouterr()
        row = evidence_log.append(session, plan_id=None, kind="note", actor="test", payload={"n": 2})
    err = capfd.readouterr().err
    assert f"evidence row {row.seq} committed but its head could not be logged" in err and "(a named pipe)" in err, err
    assert chain(world)[-1][0] == row.seq


def _cut_back_past_a_withdrawal(world):
    """Plan fix approved, its row and the chain's top noted; withdrawn; then an insider (SQL, no key)
    deletes the chain's rows after the noted top and puts the plan's row back as it was."""
    from backfill_assets.control import record
    from backfill_assets.plan.phases import Phase

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    before = world.sql("SELECT * FROM backfill_control.plans WHERE plan_id = 'fix'")[0]
    columns = [r[0] for r in world.sql("SELECT column_name FROM duckdb_columns() WHERE schema_name = "
                                       "'backfill_control' AND table_name = 'plans' ORDER BY column_index")]
    top = world.sql("SELECT max(seq) FROM backfill_control.evidence")[0][0]
    warehouse = world.warehouse()
    with warehouse.session() as session:
        assert record.transition(session, "fix", Phase.WITHDRAWN, "alice").phase == Phase.WITHDRAWN
    world.run_sql("DELETE FROM backfill_control.evidence WHERE seq > ?", [top])
    world.run_sql(f"UPDATE backfill_control.plans SET {', '.join(f'{c} = ?' for c in columns)} "
                  "WHERE plan_id = 'fix'", list(before))
    return warehouse


@pytest.mark.parametrize("append_first", [False, True])
def test_a_chain_cut_off_its_end_is_refused_even_after_an_append_in_the_same_transaction(world, append_first):
    """The chain index check is remembered within a DuckDB transaction; an append kept it current
    even where no check of that transaction had read the head log, and a decision after it obeyed a
    chain cut back past a withdrawal: the plan read approved again (found by an attack)."""
    from backfill_assets.control import evidence_log, record
    from backfill_assets.errors import EvidenceChainBroken

    warehouse = _cut_back_past_a_withdrawal(world)
    with warehouse.session() as session, session.transaction():
        if append_first:
            evidence_log.append(session, plan_id=None, kind="note", actor="relay", payload={})
        with pytest.raises(EvidenceChainBroken, match="cut off the chain's end"):
            record.require(session, "fix")


@pytest.mark.parametrize("name", ["warehouse.duckdb", "keys/evidence.key", "keys/evidence-heads.log"])
def test_evidence_out_onto_a_file_of_the_home_is_refused_and_changes_nothing(world, cli, name):
    """A hurried user tab-completes `--out` onto a file of the home (`backfill evidence fix --out
    .backfill/warehouse.duckdb`, the evidence key, the head log): the command wrote the YAML over it
    with exit 0, and the warehouse (every table, the whole record) or the chain's key was gone for
    good (found by an attack). Only a file `backfill evidence` wrote is written over; anything else
    is one line, a non-zero exit, and stays as it was."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    target = world.home / name
    before = hashlib.sha256(target.read_bytes()).hexdigest()
    result = cli("evidence", "fix", "--out", str(target))
    assert result.code != 0, result.out
    assert result.err.count("\n") == 1 and result.err.startswith("backfill: ") and "evidence" in result.err, result.err
    assert hashlib.sha256(target.read_bytes()).hexdigest() == before
    assert cli("status", "fix").code == 0
    assert cli("evidence", "verify").code == 0


def test_evidence_out_writes_over_an_evidence_file_it_wrote_before(world, cli, tmp_path):
    """Rendering the evidence again to the same path (each release gate) replaces the old file."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    out = tmp_path / "gate" / "fix-evidence.yaml"
    assert cli("evidence", "fix", "--out", str(out)).code == 0
    first = out.read_text()
    assert world.cli("run", "fix", "--proof") == 0
    assert cli("evidence", "fix", "--out", str(out)).code == 0
    assert out.read_text() != first and yaml.safe_load(out.read_text())["chain"]["head_seq"] > \
        yaml.safe_load(first)["chain"]["head_seq"]
    assert not [p for p in out.parent.iterdir() if p != out]  # no temporary file left beside it


def test_evidence_out_never_writes_over_a_link(world, cli, tmp_path):
    """`--out reports`, a link to the team's reports folder (tab-completed without a file name): the
    check for an evidence file followed the link to the folder and skipped, and the rename replaced
    the link itself with the file (found by an attack). A link is one line and stays as it was."""
    world.approve(world.plan("fix"))
    shared = tmp_path / "team-reports"
    shared.mkdir()
    link = tmp_path / "reports"
    link.symlink_to(shared, target_is_directory=True)
    result = cli("evidence", "fix", "--out", str(link))
    assert result.code != 0 and result.err.count("\n") == 1 and "symbolic link" in result.err, result.err
    assert link.is_symlink() and os.readlink(link) == str(shared) and not any(shared.iterdir())


def test_the_evidence_names_the_plan_file_the_chain_recorded_never_an_insiders(world, capsys):
    """Insider, no evidence key. The rendered evidence says which file the approved version came
    from (`plan.file`), read from plan_versions.source_file, a column nothing compared with the chain
    row that recorded the version (its payload holds the file): an UPDATE put another file in the
    document, and `evidence verify` passed."""
    path = approved(world)
    tamper(world, ("UPDATE backfill_control.plan_versions SET source_file = '/plans/harmless-typo-fix.yaml'", []))
    out = world.root / "evidence.yaml"
    rendered = world.cli("evidence", "fix", "--out", str(out))
    verified = world.cli("evidence", "verify")
    capsys.readouterr()
    shown = yaml.safe_load(out.read_text())["plan"]["file"] if out.exists() else None
    assert rendered != 0 or verified != 0 or shown == str(path), (
        f"the evidence names {shown} as the plan's file, which the chain recorded as {path}, and verify passed")
