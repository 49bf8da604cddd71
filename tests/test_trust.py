"""Issue 20: trust that holds against the people it constrains.

Each test is one attack from the threat model, reproduced through the product's own doors (the CLI
in-process and as a subprocess, the guard hook, Dagster runs) against a real warehouse: an operator
with the CLI but no approver key, an insider who writes the warehouse but cannot read the evidence
key, a pull-request author in CI, an approver with one key (RSA and ECDSA too).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from backfill_assets.cli.approvers_cmd import load_files
from backfill_assets.control import trust_record
from backfill_assets.plan.approvals import entry_of, plan_statement
from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.loading import load_plan
from backfill_assets.signing import sshsig
from backfill_assets.signing.statements import PLAN_APPROVAL, Statement
from tests.conftest import BIN, ROOT
from tests.plans import complete_plan, edited, write_plan
from tests.world import FIXED, OWNER, failure_text, keys, signers_text

CONTROL = "backfill_control"
HOOK = ROOT / "hooks" / "backfill-guard.sh"


def pub(world, name: str) -> str:
    return " ".join((world.keys[name].parent / f"{name}.pub").read_text().split()[:2])


def root_of(world):
    with world.warehouse().session() as session:
        return trust_record.require(session)


def sign_file(world, who: str, statement: Statement, tmp: Path) -> tuple[Path, Path]:
    """`who` signs `statement` offline with OpenSSH, as an approver on their laptop would."""
    import tempfile

    text = Path(tempfile.mkstemp(dir=tmp, prefix=f"{who}-", suffix=".txt")[1])
    text.write_text(statement.text)
    subprocess.run(["ssh-keygen", "-Y", "sign", "-f", str(world.keys[who]), "-n", "backfill-plan", str(text)],
                   check=True, capture_output=True, timeout=60)
    return text, Path(f"{text}.sig")


def approve_offline(world, path: Path, who: str, statement: Statement) -> int:
    text, sig = sign_file(world, who, statement, world.root)
    return world.cli("plan", "approve", str(path), "--by", who, "--signature", str(sig), "--statement", str(text))


def phase_and_sha(world, plan_id: str = "fix"):
    return world.sql(f"SELECT phase, approved_sha256 FROM {CONTROL}.plans WHERE plan_id = ?", [plan_id])


# --- who may change the trust root ----------------------------------------------------------------

def test_an_operator_without_approver_keys_cannot_re_pin_the_approvers(world, capsys):
    # mallory lists her own key as alice and bob and signs the change with it: the pinned root's
    # quorum (the real alice and bob) never signed, so nothing changes
    mine = world.root / "mine" / "allowed_signers"
    mine.parent.mkdir()
    mine.write_text(f"alice {pub(world, 'mallory')}\nbob {pub(world, 'mallory')}\nolivia {pub(world, 'mallory')}\n")
    before = root_of(world)
    code = world.cli("approvers", "pin", str(mine), "--sign", f"alice={world.keys['mallory']}",
                     "--sign", f"bob={world.keys['mallory']}")
    err = capsys.readouterr().err
    assert code == 1 and "needs 2 signature(s)" in err and err.count("\n") == 1, err
    assert root_of(world) == before
    # nor can she approve with her file: approve counts under the pinned root only
    path = world.plan("fix")
    assert world.cli("plan", "approve", str(path), "--by", "alice", "--key", str(world.keys["mallory"]),
                     "--allowed-signers", str(mine)) == 1
    assert world.sql(f"SELECT count(*) FROM {CONTROL}.approvals") == [(0,)]


def test_a_re_pin_statement_valid_longer_than_the_policy_allows_is_refused_as_it_is_printed(world, capsys):
    """`approvers statement --valid-days 30` under a policy whose signatures authorise 14 days
    printed a statement no signature of which could ever count: approvers signed it, and the pin
    was refused only then (found by an attack). It is refused as it is printed, naming the limit."""
    new = world.root / "next" / "allowed_signers"
    new.parent.mkdir()
    new.write_text(signers_text(world.keys, ("alice", "bob", "olivia")))
    capsys.readouterr()
    for days in ("30", "0"):
        assert world.cli("approvers", "statement", str(new), "--valid-days", days) == 2
        said = capsys.readouterr()
        assert said.out == "" and said.err.count("\n") == 1 and "1 to 14" in said.err, said.err
    assert world.cli("approvers", "statement", str(new), "--valid-days", "14") == 0


def test_the_pinned_quorum_re_pins_and_the_change_is_a_chain_row(world, capsys):
    new = world.root / "next" / "allowed_signers"
    new.parent.mkdir()
    new.write_text(signers_text(world.keys, ("alice", "bob", "olivia")))  # carol leaves the team
    assert world.cli("approvers", "statement", str(new)) == 0
    statement = Statement.parse(capsys.readouterr().out)
    text, alice_sig = sign_file(world, "alice", statement, world.root)
    assert world.cli("approvers", "pin", str(new), "--statement", str(text), "--signature", f"alice={alice_sig}",
                     "--sign", f"bob={world.keys['bob']}") == 0
    root = root_of(world)
    assert root.version == 2 and root.signers.sha256 == statement["signers"]
    row = world.sql(f"SELECT payload FROM {CONTROL}.evidence WHERE kind = 'trust_root' ORDER BY seq DESC LIMIT 1")
    assert sorted(json.loads(row[0][0])["signed_by"]) == ["alice", "bob"]
    # carol's key no longer counts
    path = world.plan("fix")
    assert world.cli("plan", "approve", str(path), "--by", "carol", "--key", str(world.keys["carol"])) == 1
    # the same signatures cannot pin anything else: they name this change and the root it replaced
    other = world.root / "next" / "other_signers"
    other.write_text(signers_text(world.keys, ("alice", "bob", "carol", "olivia", "mallory")))
    assert world.cli("approvers", "pin", str(other), "--statement", str(text), "--signature",
                     f"alice={alice_sig}", "--sign", f"bob={world.keys['bob']}") == 1
    assert world.cli("evidence", "verify") == 0


def test_init_never_replaces_a_pinned_root(world, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.write_text(f"alice {pub(world, 'mallory')}\nbob {pub(world, 'mallory')}\n")
    assert world.cli("init", "--allowed-signers", str(mine)) == 1
    assert "is pinned" in capsys.readouterr().err
    assert root_of(world).version == 1


def test_a_trust_root_row_written_into_the_warehouse_is_refused(engine_world, capsys):
    world = engine_world
    mine = f"alice {pub(world, 'mallory')}\nbob {pub(world, 'mallory')}\nolivia {pub(world, 'mallory')}\n"
    world.run_sql(f"INSERT INTO {CONTROL}.trust_roots SELECT 2, warehouse_id, ?, ?, policy_text, policy_sha256, "
                  f"'[]', 'insider', pinned_at, evidence_seq FROM {CONTROL}.trust_roots WHERE version = 1",
                  [mine, hashlib.sha256(mine.encode()).hexdigest()])
    path = world.plan("fix")
    assert world.cli("plan", "approve", str(path), "--by", "alice", "--key", str(world.keys["mallory"])) == 1
    assert "trust root v2" in capsys.readouterr().err
    assert world.cli("evidence", "verify") == 1


# --- the guard in CI --------------------------------------------------------------------------------

def _planted(world) -> Path:
    """A pull request's plan with its own approvers/allowed_signers beside it, signed by mallory
    as alice, bob and olivia."""
    folder = world.root / "pr" / "plans" / "other"
    (folder / "approvers").mkdir(parents=True)
    fake = f"olivia {pub(world, 'mallory')}\nalice {pub(world, 'mallory')}\nbob {pub(world, 'mallory')}\n"
    (folder / "approvers" / "allowed_signers").write_text(fake)
    path = write_plan(folder / "other.yaml", complete_plan(plan_id="other"))
    plan = load_plan(path)
    root = dataclasses.replace(root_of(world), warehouse_id="wh-anything")
    for who in ("olivia", "alice", "bob"):
        statement = plan_statement(plan, root, FIXED.code_identity)
        entry = entry_of(who, statement, sshsig.one_line(sshsig.sign(statement.message, world.keys["mallory"])))
        from backfill_assets.plan.approvals import append_approval_text

        path.write_text(append_approval_text(path.read_text(), entry))
    return path


def test_the_ci_guard_never_trusts_a_signers_file_planted_next_to_the_plan(world, run_subprocess, tmp_path):
    path = _planted(world)
    env = {"BACKFILL_HOME": str(tmp_path / "ci-no-warehouse")}
    alone = run_subprocess(command=[str(HOOK), str(path)], env=env)
    assert alone.code == 1 and "ALLOWED" not in alone.out, alone.out
    assert "never trusted" in alone.out
    # CI names the default branch's file: the planted signatures are void under it
    named = run_subprocess(command=[str(HOOK), str(path), "--allowed-signers",
                                    str(world.root / "approvers" / "allowed_signers")], env=env)
    assert named.code == 1 and "does not list" in named.out, named.out
    # where the control record can be read, its pinned root is used, and a different file is refused
    pinned = run_subprocess(command=[str(HOOK), str(path), "--allowed-signers",
                                     str(path.parent / "approvers" / "allowed_signers")],
                            env={"BACKFILL_HOME": str(world.home)})
    assert pinned.code == 1 and "differ from the pinned trust root" in pinned.out, pinned.out



def test_the_ci_guard_never_trusts_a_control_record_committed_beside_the_plan(world, run_subprocess, tmp_path):
    # the pull request commits a whole home (warehouse and key) where the hook looks by default,
    # `./.backfill`, pinning three keys of its author as olivia, alice and bob
    from tests.world import make_keys

    repo = tmp_path / "checkout"
    repo.mkdir()
    theirs = make_keys(tmp_path / "theirs")
    (repo / "signers").write_text(signers_text(theirs, ("olivia", "alice", "bob")))
    from backfill_assets.cli import main as cli_main

    planted = repo / ".backfill"
    assert cli_main(["--home", str(planted), "init", "--allowed-signers", str(repo / "signers")]) == 0
    path = write_plan(repo / "plans" / "other.yaml", complete_plan(plan_id="other"))
    for who in (OWNER, "alice", "bob"):
        assert cli_main(["--home", str(planted), "plan", "approve", str(path), "--by", who, "--key",
                         str(theirs[who])]) == 0

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=pr", "-c", "user.email=pr@example.com", *args], cwd=repo,
                       check=True, capture_output=True, timeout=60)

    git("init", "-q")
    (repo / ".gitignore").write_text(".backfill/\n")
    env = {"BACKFILL_HOME": ""}  # unset: the hook's default home, ./.backfill of the checkout
    # a developer's own home inside their clone (ignored, untracked) is theirs: its pinned root counts
    mine = run_subprocess(command=[str(HOOK), "plans/other.yaml"], env=env, cwd=repo)
    assert mine.code == 0 and "ALLOWED" in mine.out, mine.out
    git("add", "-f", ".backfill", "plans", ".gitignore")
    git("commit", "-q", "-m", "a plan and its approvals")
    shown = run_subprocess(command=[str(HOOK), "plans/other.yaml"], env=env, cwd=repo)
    assert shown.code == 1 and "ALLOWED" not in shown.out, shown.out
    assert "tracked by git" in shown.out, shown.out

# --- who may approve ----------------------------------------------------------------------------------

def test_the_policy_sets_the_minimum_a_plan_may_only_raise(world, capsys):
    path = write_plan(world.root / "plans" / "fix.yaml", edited(complete_plan(plan_id="fix"), approvals__required=1))
    world.approve(path, "alice")
    assert phase_and_sha(world) == [("drafted", None)]
    assert "1/2 approver signature(s)" in capsys.readouterr().out
    world.approve(path, "bob", owner=False)
    assert phase_and_sha(world)[0][0] == "approved"
    more = write_plan(world.root / "plans" / "more.yaml", edited(complete_plan(plan_id="more", start="2026-01-07",
                                                                             end="2026-01-08", proof=("2026-01-07",)),
                                                                 approvals__required=3))
    world.approve(more)
    assert phase_and_sha(world, "more") == [("drafted", None)]
    world.approve(more, "carol", owner=False)
    assert phase_and_sha(world, "more")[0][0] == "approved"


def test_the_owner_must_sign_and_never_counts_as_an_approver_under_another_name(world, tmp_path, capsys):
    # the team lists olivia's key a second time, as oli
    signers = world.root / "approvers" / "allowed_signers"
    text = signers.read_text() + f"oli {pub(world, OWNER)}\n"
    new = tmp_path / "allowed_signers"
    new.write_text(text)
    root = root_of(world)
    statement = trust_record.change_statement(root, *load_files(str(new), None, root.policy))
    text_file, sig = sign_file(world, "alice", statement, tmp_path)
    assert world.cli("approvers", "pin", str(new), "--statement", str(text_file), "--signature", f"alice={sig}",
                     "--sign", f"carol={world.keys['carol']}") == 0
    path = world.plan("fix")
    world.approve(path, "alice", owner=False)
    assert world.cli("plan", "approve", str(path), "--by", "oli", "--key", str(world.keys[OWNER])) == 1
    assert "listed for the owner" in capsys.readouterr().err
    world.approve(path, "bob", owner=False)
    assert phase_and_sha(world) == [("drafted", None)]  # two approvers, but the owner has not signed
    assert world.cli("plan", "approve", str(path), "--by", OWNER, "--key", str(world.keys[OWNER])) == 0
    assert phase_and_sha(world)[0][0] == "approved"


def _reencoded_rsa(signature: str) -> str:
    """bob's signature with a spare leading zero in his RSA modulus: the same key, other bytes."""
    import struct

    raw = sshsig.dearmor(signature)
    def fields(data: bytes) -> list[bytes]:
        out, i = [], 0
        while i < len(data):
            n = struct.unpack(">I", data[i:i + 4])[0]
            out.append(data[i + 4:i + 4 + n])
            i += 4 + n
        return out

    parts = fields(raw[10:])
    kind, e, n = fields(parts[0])
    parts[0] = b"".join(struct.pack(">I", len(x)) + x for x in (kind, e, b"\x00" + n))
    return sshsig.one_line(sshsig.armor(raw[:10] + b"".join(struct.pack(">I", len(x)) + x for x in parts)))


def test_one_rsa_key_counts_once_however_its_signature_encodes_it(world, tmp_path, capsys):
    path = world.plan("fix")
    world.approve(path, "alice")
    plan = load_plan(path)
    root = root_of(world)
    statement = plan_statement(plan, root, FIXED.code_identity)
    text, sig = sign_file(world, "bob", statement, tmp_path)
    twin = _reencoded_rsa(sig.read_text())
    # OpenSSH itself accepts the re-encoded signature for bob, and its fingerprint is bob's
    allowed = tmp_path / "bob_signers"
    allowed.write_text(f"bob {pub(world, 'bob')}\nbobby {pub(world, 'bob')}\n")
    (tmp_path / "twin.sig").write_text(sshsig.armor(sshsig.dearmor(twin)))
    ok = subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I", "bobby", "-n", "backfill-plan",
                         "-s", str(tmp_path / "twin.sig")], input=statement.message, capture_output=True)
    assert ok.returncode == 0
    ssh_fp = subprocess.run(["ssh-keygen", "-lf", str(world.keys["bob"].parent / "bob.pub")], capture_output=True,
                            text=True, check=True).stdout.split()[1]
    assert sshsig.verify(statement.message, twin).fingerprint == ssh_fp
    # the team lists bob's key twice (bob, bobby): one key is one person
    new = tmp_path / "allowed_signers"
    new.write_text((world.root / "approvers" / "allowed_signers").read_text() + f"bobby {pub(world, 'bob')}\n")
    change = trust_record.change_statement(root, *load_files(str(new), None, root.policy))
    ctext, csig = sign_file(world, "alice", change, tmp_path)
    assert world.cli("approvers", "pin", str(new), "--statement", str(ctext), "--signature", f"alice={csig}",
                     "--sign", f"carol={world.keys['carol']}") == 0
    assert world.cli("plan", "approve", str(path), "--by", "bob", "--signature", str(sig),
                     "--statement", str(text)) == 0
    (tmp_path / "twin-line.sig").write_text(twin)
    capsys.readouterr()
    assert world.cli("plan", "approve", str(path), "--by", "bobby", "--signature", str(tmp_path / "twin-line.sig"),
                     "--statement", str(text)) == 1
    assert "a key counts once" in capsys.readouterr().err
    recorded = world.sql(f"SELECT principal, key_fingerprint FROM {CONTROL}.approvals WHERE principal LIKE 'bob%'")
    assert recorded == [("bob", ssh_fp)]
    # written into the file by hand, the twin is void there too
    from backfill_assets.plan.approvals import append_approval_text

    path.write_text(append_approval_text(path.read_text(), entry_of("bobby", statement, twin)))
    assert world.cli("plan", "show", str(path)) == 0
    shown = capsys.readouterr().out
    assert "2/2 approver signature(s) counted (alice, bob)" in shown and "a key counts once" in shown, shown


# --- what a signature binds --------------------------------------------------------------------------

def test_a_staging_signature_does_not_approve_in_production(world, tmp_path, run_cli):
    path = world.approved_plan("fix")
    assert phase_and_sha(world)[0][0] == "approved"
    # production: another warehouse, the same reviewed files pinned; the plan file carries staging's signatures
    prod = tmp_path / "prod"
    assert run_cli("--home", str(prod), "init", "--allowed-signers",
                   str(world.root / "approvers" / "allowed_signers")).code == 0
    from backfill_assets.demo.sample import generate_orders
    from backfill_assets.home import Home
    from backfill_assets.warehouse import open_warehouse

    with open_warehouse(Home(prod)).session() as session:
        generate_orders(session, start=dt.date(2026, 1, 1), days=8, rows_per_day=50, seed=3)
    shown = run_cli("--home", str(prod), "plan", "show", str(path))
    assert "signed for warehouse" in shown.out and "(approved)" not in shown.out, shown.out
    carol = run_cli("--home", str(prod), "plan", "approve", str(path), "--by", "carol", "--key",
                    str(world.keys["carol"]))
    assert carol.code == 0 and "not approved yet" in carol.out, carol.out
    guard = run_cli("--home", str(prod), "guard", str(path))
    assert guard.code == 1 and "signed for warehouse" in guard.out


def test_an_expired_approval_stops_authorising_runs(world, capfd):
    import time

    path = world.plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    plan = load_plan(path)
    root = root_of(world)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    old = Statement.make(PLAN_APPROVAL, signed=now - dt.timedelta(days=20), expires=now - dt.timedelta(days=6),
                         plan=plan_sha256(plan), code=FIXED.code_identity, warehouse=root.warehouse_id)
    assert approve_offline(world, path, "alice", old) == 1
    assert "expired" in capfd.readouterr().err
    # three signatures (ssh-keygen) then three approvals (~0.1 s each, ~2 s in all on a loaded
    # machine) within 6-7 s (the stamps are whole seconds); each approval signed between two
    # approvals needed 12 (4 s expired under `pytest -n 4`)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    soon = Statement.make(PLAN_APPROVAL, signed=now, expires=now + dt.timedelta(seconds=7),
                          plan=plan_sha256(plan), code=FIXED.code_identity, warehouse=root.warehouse_id)
    signed = {who: sign_file(world, who, soon, world.root) for who in (OWNER, "alice", "bob")}
    for who, (text, sig) in signed.items():
        assert world.cli("plan", "approve", str(path), "--by", who, "--signature", str(sig),
                         "--statement", str(text)) == 0
    assert phase_and_sha(world)[0][0] == "approved"
    time.sleep(max(0.0, (soon.expires - dt.datetime.now(dt.UTC)).total_seconds()) + 0.5)
    capfd.readouterr()
    assert world.cli("run", "fix", "--proof") == 1
    refused = capfd.readouterr()
    assert "expired" in refused.err and refused.err.count("\n") == 1, refused.err
    assert world.rows("daily_revenue", "2026-01-02") == 0
    result = world.plan_run("fix", "2026-01-02")
    assert not result.success and "expired" in failure_text(result)
    # signing again (a fresh statement) lets it go on
    world.approve(path, "alice", "bob")
    assert world.cli("run", "fix", "--proof") == 0


def test_an_approval_stops_counting_when_its_keys_line_in_allowed_signers_ends(world, tmp_path, capfd):
    """OpenSSH's `valid-before` on an approver's line ends what the key may sign. A verdict is cached
    per process until the approval "stops holding" (a code server, the sensor, the in-process
    executor), and that moment was read from the statements' expiry alone: a run was authorised by
    alice's key after its end (found by an attack on the trust root)."""
    from backfill_assets.control import authority, record

    def public(name: str) -> str:
        return " ".join((world.keys[name].parent / f"{name}.pub").read_text().split()[:2])

    end = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).replace(microsecond=0)
    lines = [f'alice valid-before="{end:%Y%m%d%H%M%S}Z" {public("alice")}', f"bob {public('bob')}",
             f"carol {public('carol')}", f"{OWNER} {public(OWNER)}"]
    signers = tmp_path / "next" / "allowed_signers"
    signers.parent.mkdir()
    signers.write_text("\n".join(lines) + "\n")
    assert world.cli("approvers", "pin", str(signers), "--sign", f"alice={world.keys['alice']}",
                     "--sign", f"bob={world.keys['bob']}") == 0
    path = world.plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    capfd.readouterr()
    world.approve(path)  # olivia, alice (her key valid for an hour more), bob
    assert f"valid until {end:%Y-%m-%dT%H:%M:%SZ}" in capfd.readouterr().out
    with world.warehouse().session() as session:
        version = record.require(session, "fix").approved
        assert authority.refusal(session, version, code=FIXED.code_identity) is None  # counted, and cached
        later = authority.refusal(session, version, code=FIXED.code_identity, now=end + dt.timedelta(seconds=1))
    assert later is not None and "expired at" in later, later


def test_a_run_with_other_code_than_the_approved_is_refused(world):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    other = dataclasses.replace(FIXED, code_version="3")
    result = world.plan_run("fix", "2026-01-02", spec=other)
    assert not result.success
    assert "signed for code 2/" in failure_text(result) and "now 3/" in failure_text(result)
    assert world.rows("daily_revenue", "2026-01-02") == 0
    assert world.plan_run("fix", "2026-01-02").success


# --- decisions re-verify what they read (both engines) -------------------------------------------

def test_an_inserted_approvals_row_never_makes_a_plan_of_record(engine_world, capsys):
    world = engine_world
    path = world.plan("fix")
    world.approve(path, "alice")
    sha = plan_sha256(load_plan(path))
    # the insider copies alice's row as bob's, and types a third
    world.run_sql(f"INSERT INTO {CONTROL}.approvals SELECT approval_id + 1000, sha256, plan_id, 'bob', statement, "
                  "signature, key_fingerprint, trust_version, actor, approved_at, evidence_seq "
                  f"FROM {CONTROL}.approvals WHERE principal = 'alice'")
    world.run_sql(f"INSERT INTO {CONTROL}.approvals SELECT approval_id + 2000, sha256, plan_id, 'carol', statement, "
                  f"'U1NIU0lHAAAAAQ==', key_fingerprint, trust_version, actor, approved_at, evidence_seq "
                  f"FROM {CONTROL}.approvals WHERE principal = 'alice'")
    assert world.cli("plan", "approve", str(path), "--by", "alice", "--key", str(world.keys["alice"])) == 0
    assert phase_and_sha(world) == [("drafted", None)]
    # making it a plan of record by hand is refused by every decision
    world.run_sql(f"UPDATE {CONTROL}.plans SET phase = 'approved', approved_sha256 = ? WHERE plan_id = 'fix'", [sha])
    capsys.readouterr()
    assert world.cli("run", "fix", "--proof") == 1
    assert "evidence chain's last record" in capsys.readouterr().err
    result = world.plan_run("fix", "2026-01-02")
    assert not result.success and "evidence chain" in failure_text(result)
    assert world.cli("evidence", "verify") == 1


def test_gate_results_set_to_passed_by_hand_are_refused_by_publish(engine_world, capsys):
    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    world.run_sql("INSERT INTO orders SELECT * FROM orders WHERE order_date = '2026-01-03' LIMIT 2")  # loaded twice
    assert world.cli("run", "fix") == 1
    world.run_sql(f"UPDATE {CONTROL}.gate_results SET passed = true")
    capsys.readouterr()
    assert world.cli("publish", "fix") == 1
    err = capsys.readouterr().err
    assert "gate_results" in err and "differ from what that row sealed" in err, err
    assert world.rows("published_revenue", "2026-01-03") == 0
    assert world.phase() != "reconciled"
    assert world.cli("evidence", "verify") == 1


def test_plan_content_edited_in_the_warehouse_is_refused(engine_world, capsys):
    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    keys_text = json.dumps(keys(1, 8))
    world.run_sql(f"UPDATE {CONTROL}.plan_versions SET partition_keys = ?, "
                  "content = replace(content, '\"end\":\"2026-01-03\"', '\"end\":\"2026-01-08\"')", [keys_text])
    assert world.cli("run", "fix", "--proof") == 1
    assert "plan_versions" in capsys.readouterr().err
    result = world.plan_run("fix", "2026-01-07")
    assert not result.success and "plan_versions" in failure_text(result)
    assert world.rows("daily_revenue", "2026-01-07") == 0
    assert world.cli("evidence", "verify") == 1


# --- rollback of what consumers saw -------------------------------------------------------------------

def test_rolling_back_a_closed_plan_needs_approval_and_tells_the_consumers(world, tmp_path, capsys):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    assert world.cli("plan", "close", "fix") == 0
    # bob leaves the team: the plan's own approvals (olivia, alice, bob) no longer hold
    _drop_bob(world, tmp_path)
    capsys.readouterr()
    assert world.cli("rollback", "fix") == 1  # its approvals no longer hold: consumers' data is not anyone's to flip
    assert "changes what consumers see" in capsys.readouterr().err
    assert world.phase() == "closed"
    assert world.cli("rollback", "fix", "--sign", f"mallory={world.keys['mallory']}",
                     "--sign", f"olivia={world.keys[OWNER]}", "--sign", f"alice={world.keys['alice']}") == 1
    assert world.phase() == "closed"
    assert world.cli("rollback", "fix", "--print-statement") == 0
    statement = Statement.parse(capsys.readouterr().out)
    text, sig = sign_file(world, "carol", statement, tmp_path)
    assert world.cli("rollback", "fix", "--statement", str(text), "--signature", f"carol={sig}",
                     "--sign", f"alice={world.keys['alice']}") == 0
    assert world.phase() == "rolled_back"
    told = world.sql(f"SELECT event FROM {CONTROL}.outbox WHERE plan_id = 'fix' ORDER BY notice_id")
    assert told[-1] == ("rolled_back",)
    row = world.sql(f"SELECT payload FROM {CONTROL}.evidence WHERE kind = 'rollback'")
    assert sorted(json.loads(row[0][0])["authorised"]["approvers"]) == ["alice", "carol"]


@pytest.mark.parametrize("kind", ["rsa", "ecdsa"])
def test_rsa_and_ecdsa_approvers_are_counted_by_their_canonical_keys(world, kind, capsys):
    who = {"rsa": "bob", "ecdsa": "carol"}[kind]
    path = world.plan("fix")
    world.approve(path, "alice", who)
    assert phase_and_sha(world)[0][0] == "approved"
    recorded = world.sql(f"SELECT key_fingerprint FROM {CONTROL}.approvals WHERE principal = ?", [who])
    ssh_fp = subprocess.run(["ssh-keygen", "-lf", str(world.keys[who].parent / f"{who}.pub")], capture_output=True,
                            text=True, check=True).stdout.split()[1]
    assert recorded == [(ssh_fp,)]


# --- rows removed outright (the audit of issue 20) ------------------------------------------------------

def _drop_bob(world, tmp_path: Path) -> None:
    """The team re-pins allowed_signers without bob (his key leaked), signed by alice and carol."""
    new = tmp_path / "without-bob" / "allowed_signers"
    new.parent.mkdir()
    new.write_text(signers_text(world.keys, ("alice", "carol", "olivia")))
    root = root_of(world)
    change = trust_record.change_statement(root, *load_files(str(new), None, root.policy))
    ctext, csig = sign_file(world, "alice", change, tmp_path)
    assert world.cli("approvers", "pin", str(new), "--statement", str(ctext), "--signature", f"alice={csig}",
                     "--sign", f"carol={world.keys['carol']}") == 0


def test_a_trust_root_row_deleted_from_the_warehouse_is_refused(engine_world, tmp_path, capsys):
    # the insider deletes the pin that removed bob: the root before it would let his key count again
    world = engine_world
    _drop_bob(world, tmp_path)
    world.run_sql(f"DELETE FROM {CONTROL}.trust_roots WHERE version = 2")
    path = world.plan("fix")
    capsys.readouterr()
    assert world.cli("plan", "approve", str(path), "--by", "bob", "--key", str(world.keys["bob"])) == 1
    err = capsys.readouterr().err
    assert "trust root v2" in err and "trust_roots" in err and err.count("\n") == 1, err
    assert world.sql(f"SELECT count(*) FROM {CONTROL}.approvals") == [(0,)]
    assert world.cli("evidence", "verify") == 1
    # with every row gone, `init` does not pin a first root again: the chain recorded one
    world.run_sql(f"DELETE FROM {CONTROL}.trust_roots")
    mine = tmp_path / "mine"
    mine.write_text(f"alice {pub(world, 'mallory')}\nbob {pub(world, 'mallory')}\nolivia {pub(world, 'mallory')}\n")
    capsys.readouterr()
    assert world.cli("init", "--allowed-signers", str(mine)) == 1
    assert "trust_roots" in capsys.readouterr().err
    assert world.sql(f"SELECT count(*) FROM {CONTROL}.trust_roots") == [(0,)]


@pytest.mark.parametrize("table", ["plans", "plan_versions"])
def test_a_plan_row_deleted_from_the_warehouse_never_lifts_its_pause(engine_world, table, capsys):
    # a proven plan pauses its window; with its row (or its version) gone, nothing would hold the
    # proof partition back from consumers before the window reconciled
    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    world.run_sql(f"DELETE FROM {CONTROL}.{table}")
    result = world.publish(["2026-01-02"])
    assert not result.success and table in failure_text(result), failure_text(result)
    assert world.rows("published_revenue", "2026-01-02") == 0
    capsys.readouterr()
    assert world.cli("evidence", "verify") == 1
    assert table in capsys.readouterr().err


def test_rolling_back_a_plan_consumers_saw_needs_approval_in_every_later_phase(world, tmp_path, capsys):
    # published, then its published partition edited: the plan goes back to repairing and then
    # reconciled, and the consumers still see its data; a rollback then changes what they see
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    _drop_bob(world, tmp_path)  # the plan's own approvals no longer hold
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = '2026-01-01'")
    world.cli("reconcile", "fix")
    world.cli("reconcile", "fix")
    assert world.phase() == "reconciled"
    published = world.fingerprints("published_revenue", ["2026-01-02"])
    capsys.readouterr()
    assert world.cli("rollback", "fix") == 1
    assert "changes what consumers see" in capsys.readouterr().err
    assert world.phase() == "reconciled"
    assert world.fingerprints("published_revenue", ["2026-01-02"]) == published
    assert world.cli("rollback", "fix", "--sign", f"alice={world.keys['alice']}",
                     "--sign", f"carol={world.keys['carol']}") == 0
    assert world.phase() == "rolled_back"


def test_withdraw_is_refused_when_the_plans_writes_were_deleted(world, capsys):
    # a plan that wrote may only be rolled back; deleting its ledger rows must not make it look unwritten
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.plan_run("fix", "2026-01-02").success
    assert world.phase() == "proving"
    for table in ("gate_results", "snapshots", "writes"):
        world.run_sql(f"DELETE FROM {CONTROL}.{table} WHERE plan_id = 'fix'")
    capsys.readouterr()
    assert world.cli("plan", "withdraw", "fix") == 1
    err = capsys.readouterr().err
    assert "sealed are gone" in err and err.count("\n") == 1, err
    assert world.phase() == "proving"


def test_a_required_groups_signature_expiring_first_ends_the_approval(world, tmp_path):
    # the policy requires a controller (carol) for daily_revenue; her signature expires in an hour,
    # the others' in 14 days: the approval holds for that hour, not 14 days
    from backfill_assets.control import authority, record

    policy = tmp_path / "policy.yaml"
    policy.write_text("targets:\n  - {match: daily_revenue, require: [controllers]}\n"
                      "groups:\n  controllers: [carol]\n")
    assert world.cli("approvers", "pin", str(world.root / "approvers" / "allowed_signers"), "--policy", str(policy),
                     "--sign", f"alice={world.keys['alice']}", "--sign", f"bob={world.keys['bob']}") == 0
    path = world.approve(world.plan("fix"))
    assert phase_and_sha(world) == [("drafted", None)]
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    statement = Statement.make(PLAN_APPROVAL, signed=now, expires=now + dt.timedelta(hours=1),
                               plan=plan_sha256(load_plan(path)), code=FIXED.code_identity,
                               warehouse=root_of(world).warehouse_id)
    assert approve_offline(world, path, "carol", statement) == 0
    assert phase_and_sha(world)[0][0] == "approved"
    with world.warehouse().session() as session:
        version = record.require(session, "fix").approved
        counted = authority.plan_tally(session, version, code=FIXED.code_identity)
        assert counted.approved and counted.expires == statement.expires
        later = statement.expires + dt.timedelta(minutes=1)
        assert authority.refusal(session, version, code=FIXED.code_identity, now=later) is not None
        assert not authority.plan_tally(session, version, code=FIXED.code_identity, now=later).approved


def test_a_plan_signed_for_new_code_never_publishes_what_old_code_wrote(world):
    # the window was written and reconciled by code version 2; version 3 is deployed and the plan
    # signed for it too: its publish still copies only what the code it is approved for wrote
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.phase() == "reconciled"
    newer = dataclasses.replace(FIXED, code_version="3")
    unsigned = world.publish(["2026-01-01", "2026-01-02"], spec=newer)
    assert not unsigned.success and "signed for code 2/" in failure_text(unsigned), failure_text(unsigned)
    world.approve_for(world.root / "plans" / "fix.yaml", newer)
    signed = world.publish(["2026-01-01", "2026-01-02"], spec=newer)
    assert not signed.success and "written by code 2/" in failure_text(signed), failure_text(signed)
    assert world.rows("published_revenue", "2026-01-01") == 0
    assert world.publish(["2026-01-01", "2026-01-02"]).success


def test_the_guard_reading_the_warehouse_without_the_key_never_counts_under_a_rewritten_root(
        world, run_subprocess, tmp_path):
    """A reader without the evidence key "reports what it reads unverified, and never decides": the
    guard counted a plan file's signatures under the trust root read from the warehouse, which an
    insider had rewritten to keys of their own (found by an attack). Without the key, only the
    team's reviewed files named on the command line count, and the pin must agree with them."""
    import hashlib

    from backfill_assets.plan.approvals import append_approval_text
    from tests.world import make_keys

    real = root_of(world)
    signers_file = world.root / "approvers" / "allowed_signers"
    # the insider (writes the warehouse, cannot read the evidence key) rewrites the first root: keys of
    # their own listed as olivia, alice and bob, the sha256 column to match
    theirs = make_keys(tmp_path / "theirs")
    mine = signers_text(theirs, (OWNER, "alice", "bob"))
    world.run_sql(f"UPDATE {CONTROL}.trust_roots SET signers_text = ?, signers_sha256 = ? WHERE version = 1",
                  [mine, hashlib.sha256(mine.encode()).hexdigest()])
    # and signs a plan as the three of them, for this warehouse and the table's code
    path = world.plan("sneaky")
    plan = load_plan(path)
    for who in (OWNER, "alice", "bob"):
        statement = plan_statement(plan, real, FIXED.code_identity)
        entry = entry_of(who, statement, sshsig.one_line(sshsig.sign(statement.message, theirs[who])))
        path.write_text(append_approval_text(path.read_text(), entry))
    # a decision (with the key) refuses the rewritten root
    with_key = run_subprocess(command=[str(HOOK), str(path)], env={"BACKFILL_HOME": str(world.home)})
    assert with_key.code == 1 and "ALLOWED" not in with_key.out, with_key.out
    # the guard in a CI job that may read the warehouse but not the key (README: such a reader
    # "reports what it reads unverified, and never decides anything")
    no_key = {"BACKFILL_HOME": str(world.home), "BACKFILL_EVIDENCE_KEY_FILE": str(tmp_path / "no-key")}
    shown = run_subprocess(command=[str(HOOK), str(path)], env=no_key)
    assert shown.code == 1 and "ALLOWED" not in shown.out, (
        "forged signatures counted under a trust root typed into the warehouse:\n" + shown.out)
    assert "cannot be verified here" in shown.out, shown.out
    # the team's reviewed files named (the README's CI recipe): the rewritten pin disagrees with them
    named = run_subprocess(command=[str(HOOK), str(path), "--allowed-signers", str(signers_file)], env=no_key)
    assert named.code == 1 and "differ from the trust root pinned in the warehouse" in named.out, named.out


def pull_request_checkout(world, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A CI checkout of a pull request: an unsigned plan, and the PR's workspace.yaml and definitions
    module (the team's definitions, plus a patch making every tally approved); beside it, the
    default branch's reviewed allowed_signers and policy. Returns (checkout, plan, default branch)."""
    from backfill_assets.trust.policy import DEFAULT_TEXT

    repo = tmp_path / "checkout"
    (repo / "plans").mkdir(parents=True)
    path = write_plan(repo / "plans" / "sneaky.yaml", complete_plan(plan_id="sneaky"))
    (repo / "workspace.yaml").write_text("load_from:\n  - python_file: team_defs.py\n")
    (repo / "team_defs.py").write_text(
        "from backfill_assets.demo import daily as _d\n"
        "defs = _d.defs\n"
        "# the pull request's addition, imported wherever the definitions load\n"
        "import backfill_assets.trust.root as _r\n"
        "_r.Tally.approved = property(lambda self: True)\n"
        "_r.Tally.missing = lambda self: []\n")
    main = tmp_path / "main-branch"
    main.mkdir()
    (main / "allowed_signers").write_text((world.root / "approvers" / "allowed_signers").read_text())
    (main / "policy.yaml").write_text(DEFAULT_TEXT)
    return repo, path, main


def test_a_pull_request_cannot_get_allowed_from_the_ci_guard_by_changing_its_definitions(
        world, run_subprocess, tmp_path):
    """The guard imported the pull request's definitions (to fit the plan to its table) into the
    process that counts the signatures, and a definitions module that patched the tally got ALLOWED
    for an unsigned plan (found by an attack). The definitions load in a child process now."""
    # CI: no warehouse, the default branch's reviewed files named explicitly, as the README says
    repo, path, main = pull_request_checkout(world, tmp_path)
    # baseline: with the team's definitions (--defs), the unsigned plan is refused
    honest = run_subprocess(command=[str(HOOK), str(path), "--allowed-signers", str(main / "allowed_signers"),
                                     "--policy", str(main / "policy.yaml"), "--defs", "backfill_assets.demo.daily"],
                            env={"BACKFILL_HOME": str(tmp_path / "ci-home"), "BACKFILL_DEFS": ""}, cwd=repo)
    assert honest.code == 1 and "0/2 approver signature(s)" in honest.out, honest.out
    # the hook as CI runs it (definitions found as `backfill run` finds them: workspace.yaml)
    shown = run_subprocess(command=[str(HOOK), str(path), "--allowed-signers", str(main / "allowed_signers"),
                                    "--policy", str(main / "policy.yaml")],
                           env={"BACKFILL_HOME": str(tmp_path / "ci-home"), "BACKFILL_DEFS": ""}, cwd=repo)
    assert shown.code == 1 and "ALLOWED" not in shown.out, (
        "an unsigned plan got ALLOWED from the CI guard:\n" + shown.out)


def test_a_pull_requests_definitions_never_make_plan_show_count_an_unsigned_plan_approved(
        world, run_subprocess, tmp_path):
    """Pull-request author. Fix 6 moved the guard's definitions into a child process because a
    definitions module that patched the tally made an unsigned plan count as approved. `plan show`
    ("signatures counted and void", README) still loads the definitions (workspace.yaml) in the process
    that counts the signatures, after it resolved the root: a reviewer running it on the pull request's
    checkout, with the default branch's files named, read "(approved)" for a plan nobody signed (found
    by an attack). They load in a child now, as the guard's do."""
    from tests.conftest import BIN

    repo, path, main = pull_request_checkout(world, tmp_path)
    args = [str(BIN / "backfill"), "plan", "show", str(path), "--allowed-signers", str(main / "allowed_signers"),
            "--policy", str(main / "policy.yaml")]
    env = {"BACKFILL_HOME": str(tmp_path / "ci-home"), "BACKFILL_DEFS": ""}
    honest = run_subprocess(command=[*args, "--defs", "backfill_assets.demo.daily"], env=env, cwd=repo)
    assert honest.code == 0 and "(approved)" not in honest.out, honest.out
    shown = run_subprocess(command=args, env=env, cwd=repo)
    assert "(approved)" not in shown.out, "plan show calls an unsigned plan approved:\n" + shown.out


def test_a_pull_request_cannot_run_code_in_the_guard_through_the_in_process_fit(world, run_subprocess, tmp_path):
    """Pull-request author. 5fd5e1d fits definitions named backfill_assets.* (--defs
    backfill_assets.demo.daily, as test_trust's honest baseline passes) in the guard's own process:
    `loaded_defs._import_module` puts the current folder (the pull request's checkout) first on
    sys.path there, and the demo's definitions then import the stdlib's `_strptime` for the first
    time, so a `_strptime.py` the pull request adds to its checkout runs in the process that counts
    the signatures, after the trust root was read. It patched the tally: an unsigned plan, ALLOWED
    (found by an attack). Every definitions module loads in a child now."""
    from tests.conftest import BIN

    repo, path, main = pull_request_checkout(world, tmp_path)
    (repo / "_strptime.py").write_text(
        "import sysconfig as _s\n"
        "exec(open(_s.get_paths()['stdlib'] + '/_strptime.py').read())  # the real module's names\n"
        "import backfill_assets.trust.root as _r\n"
        "_r.Tally.approved = property(lambda self: True)\n"
        "_r.Tally.missing = lambda self: []\n")
    shown = run_subprocess(command=[str(BIN / "backfill"), "guard", str(path), "--allowed-signers",
                                    str(main / "allowed_signers"), "--policy", str(main / "policy.yaml"),
                                    "--defs", "backfill_assets.demo.daily"],
                           env={"BACKFILL_HOME": str(tmp_path / "ci-home"), "BACKFILL_DEFS": ""}, cwd=repo)
    assert "ALLOWED" not in shown.out and "0/2 approver signature(s)" in shown.out, (
        "an unsigned plan got ALLOWED from the CI guard:\n" + shown.out + shown.err)


def _guard_in_ci(run_subprocess, tmp_path: Path, repo: Path, main: Path, *plans: Path):
    return run_subprocess(command=[str(HOOK), *map(str, plans), "--allowed-signers", str(main / "allowed_signers"),
                                   "--policy", str(main / "policy.yaml")],
                          env={"BACKFILL_HOME": str(tmp_path / "ci-home"), "BACKFILL_DEFS": ""}, cwd=repo)


def test_the_ci_guard_loads_a_pull_requests_definitions_only_once_every_plan_given_is_signed(
        world, run_subprocess, tmp_path):
    """Pull-request author. The definitions' child runs with the CI job's rights: it rewrote the
    default branch's allowed_signers for the job's next guard run, patched the guard's memory through
    /proc/PID/mem (ptrace, root in CI) and stopped it with SIGSTOP; an unsigned plan got ALLOWED
    (found by an attack). Now a plan whose signatures do not count never loads the pull request's
    code, and one run checks every plan, all counted before any child starts."""
    repo, sneaky, main = pull_request_checkout(world, tmp_path)
    loaded = tmp_path / "definitions-loaded"
    with (repo / "team_defs.py").open("a") as defs:
        defs.write(f"open({str(loaded)!r}, 'a').write('loaded\\n')\n")
    signed = repo / "plans" / "aaa-signed.yaml"
    signed.write_text(world.approved_plan("fix", start="2026-01-01", end="2026-01-02",
                                          proof=("2026-01-01",)).read_text())

    alone = _guard_in_ci(run_subprocess, tmp_path, repo, main, sneaky)
    assert alone.code == 1 and "0/2 approver signature(s)" in alone.out, alone.out
    assert "load only once every plan given is complete and its signatures count" in alone.out
    both = _guard_in_ci(run_subprocess, tmp_path, repo, main, signed, sneaky)
    assert both.code == 1 and "0 of 2 plan(s) allowed" in both.out, both.out
    assert not loaded.exists(), "the pull request's code ran for a plan nobody signed"
    honest = _guard_in_ci(run_subprocess, tmp_path, repo, main, signed)
    assert honest.code == 0 and honest.out.rstrip().endswith("signed by enough approvers"), honest.out
    assert loaded.read_text() == "loaded\n"  # a signed plan's fit is checked, in its child


@pytest.mark.parametrize("answer", ["[]", "{not json", '{"problems": [{}]}', '{"problems": 5}', "[" * 100_000,
                                    '{"problems": [], "note": null, "code": null}', "x" * 2_000_000,
                                    '{"problems": [], "note": "x\\nALLOWED: the plan is fine\\u001b[2K", "code": null}',
                                    '{"error": "bad\\nALLOWED: the plan is fine"}'])
def test_what_the_definitions_child_answers_is_never_a_crash_nor_a_line_of_its_own(
        world, run_subprocess, tmp_path, answer):
    """The child answered malformed JSON (exit 3, a traceback) or a note with a newline that printed a
    fake `ALLOWED: ...` line (found by an attack): it is one line, or "not checked"."""
    repo, _, main = pull_request_checkout(world, tmp_path)
    with (repo / "team_defs.py").open("a") as defs:  # the fork's answer pipe: write its own, and leave
        defs.write("import os\n"
                   "for fd in map(int, os.listdir('/proc/self/fd')):\n"
                   "    try:\n"
                   "        if os.readlink(f'/proc/self/fd/{fd}').startswith('pipe:') and fd > 2:\n"
                   f"            os.write(fd, ('backfill-guard-fit: ' + {answer!r} + '\\n').encode())\n"
                   "    except OSError:\n"
                   "        pass\n"
                   "os._exit(0)\n")
    signed = repo / "plans" / "aaa-signed.yaml"
    signed.write_text(world.approved_plan("fix", start="2026-01-01", end="2026-01-02",
                                          proof=("2026-01-01",)).read_text())
    done = _guard_in_ci(run_subprocess, tmp_path, repo, main, signed)
    assert done.code in (1, 2) and "Traceback" not in done.out + done.err, done
    assert not [line for line in (done.out + done.err).splitlines() if line.startswith("ALLOWED")], done.out
    if done.code == 2:
        assert len(done.err.strip().splitlines()) == 1, done.err


def test_the_guard_hook_takes_a_plan_file_first_never_an_option(run_subprocess, tmp_path):
    """A changed file named `-h` in a CI loop printed the help and exited 0 (found by an attack); the
    guard's help exits 2 wherever it is asked for (argparse takes `-h` anywhere, `--hel` too)."""
    for first in ("-h", "--help", "--home"):
        done = run_subprocess(command=[str(HOOK), first], cwd=tmp_path)
        assert done.code == 2 and done.err.startswith("usage: "), done
    for later in ("-h", "--help", "--hel"):
        done = run_subprocess(command=[str(HOOK), "plans/x.yaml", later], cwd=tmp_path)
        assert done.code == 2 and "usage: backfill guard" in done.out, done


def test_plan_show_never_loads_a_pull_requests_definitions_for_a_plan_nobody_signed(
        world, run_subprocess, tmp_path):
    """Reviewer. `plan show` loaded the definitions for an unsigned plan: the pull request's code
    ran with the reviewer's rights and printed a fake `(approved)` line on their terminal through
    /proc/PPID/fd/1 (found by an attack). It loads them as the guard does: once signatures count."""
    from tests.conftest import BIN

    repo, path, main = pull_request_checkout(world, tmp_path)
    loaded = tmp_path / "definitions-loaded"
    with (repo / "team_defs.py").open("a") as defs:
        defs.write(f"open({str(loaded)!r}, 'a').write('loaded\n')\n")
    shown = run_subprocess(command=[str(BIN / "backfill"), "plan", "show", str(path), "--allowed-signers",
                                    str(main / "allowed_signers"), "--policy", str(main / "policy.yaml")],
                           env={"BACKFILL_HOME": str(tmp_path / "ci-home"), "BACKFILL_DEFS": ""}, cwd=repo)
    assert shown.code == 0 and "code (not loaded: " in shown.out, shown
    assert not loaded.exists()


@pytest.mark.parametrize("how", ["relabel", "cut"])
def test_an_insider_cannot_roll_the_trust_root_back_past_a_signed_pin(engine_world, tmp_path, capsys, how):
    """Insider, no evidence key: the pins were counted by the chain's unkeyed `kind` column, so
    deleting v2's row and relabelling (or deleting) its chain row brought back v1, with the key v2
    removed; that key then approved a plan whose proof wrote (found by an attack)."""
    world = engine_world
    _drop_bob(world, tmp_path)
    assert root_of(world).version == 2
    seq = world.sql(f"SELECT evidence_seq FROM {CONTROL}.trust_roots WHERE version = 2")[0][0]
    world.run_sql(f"DELETE FROM {CONTROL}.trust_roots WHERE version = 2")
    if how == "relabel":
        world.run_sql(f"UPDATE {CONTROL}.evidence SET kind = 'trust_root_' WHERE seq = ?", [seq])
    else:  # and every row after it: the chain's end cut off, so its numbers stay dense
        world.run_sql(f"DELETE FROM {CONTROL}.evidence WHERE seq >= ?", [seq])
    path = world.plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    capsys.readouterr()
    codes = [world.cli("plan", "approve", str(path), "--by", who, "--key", str(world.keys[who]))
             for who in ("olivia", "alice", "bob")]
    said = capsys.readouterr().err
    assert codes[-1] != 0 and ("relabelled or removed" in said or "cut off the chain's end" in said), (codes, said)
    before = world.rows("daily_revenue", "2026-01-02")
    assert world.cli("run", "fix", "--proof") != 0
    assert world.rows("daily_revenue", "2026-01-02") == before


@pytest.mark.parametrize("which", ["every row of the cancel", "its state row only"])
def test_an_insider_cannot_uncancel_a_plan_by_relabelling_its_last_state_rows(world, capsys, which):
    """Insider, no evidence key: a plan's state was checked against its last chain row found by the
    unkeyed `kind`; relabelling the cancel's rows and restoring the plan's row made it approved
    again, and its proof wrote (found by an attack)."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    before = world.sql(f"SELECT * FROM {CONTROL}.plans WHERE plan_id = 'fix'")
    columns = [c[0] for c in world.sql(f"DESCRIBE {CONTROL}.plans")]
    top = world.sql(f"SELECT max(seq) FROM {CONTROL}.evidence")[0][0]
    assert world.cli("cancel", "fix") == 0
    hidden = "" if which.startswith("every") else " AND kind = 'transition'"
    world.run_sql(f"UPDATE {CONTROL}.evidence SET kind = kind || '_' WHERE seq > ?{hidden}", [top])
    world.run_sql(f"UPDATE {CONTROL}.plans SET {', '.join(f'{c} = ?' for c in columns[1:])} WHERE plan_id = 'fix'",
                  list(before[0][1:]))
    rows = world.rows("daily_revenue", "2026-01-02")
    capsys.readouterr()
    assert world.cli("run", "fix", "--proof") != 0
    said = capsys.readouterr().err  # the head's own keyed hash, or the index it carries
    assert "relabelled or removed" in said or "(notification_ of plan fix) does not match its keyed hash" in said
    assert world.rows("daily_revenue", "2026-01-02") == rows


def _plan_version(world, name: str, end: str, reason: str) -> Path:
    return write_plan(world.root / "plans" / f"{name}.yaml", edited(
        complete_plan(plan_id="fix", start="2026-01-01", end=end, proof=("2026-01-02",)), reason=reason))


def test_a_superseded_plan_of_record_never_comes_back_by_swapping_two_rows_kinds(engine_world, capsys):
    """Insider, no key. A new version's first signature appends a state-kind row that carried no
    state, and the decision skipped over it to the newest row with one; swapping an older row's kind
    with the v2 plan of record's (each plan's newest number and count unchanged, so the index held)
    brought v1's window back, and its days outside v2 were written (found by an attack)."""
    world = engine_world
    world.approve(_plan_version(world, "v1", "2026-01-06", "v1: six days"))
    v2 = world.approve_replacing(_plan_version(world, "v2", "2026-01-03", "v2: three days, v1 was too wide"))
    assert world.sql(f"SELECT approved_sha256 FROM {CONTROL}.plans WHERE plan_id = 'fix'")[0][0] == \
        plan_sha256(load_plan(v2))
    v3 = _plan_version(world, "v3", "2026-01-03", "v3: a wording change")
    assert world.cli("plan", "approve", str(v3), "--by", "alice", "--key", str(world.keys["alice"])) == 0
    chain = world.sql(f"SELECT seq, kind, plan_id, payload FROM {CONTROL}.evidence ORDER BY seq")
    records = [(s, json.loads(p)) for s, k, pid, p in chain if k == "plan_of_record" and pid == "fix"]
    v1_sha, v2_seq = records[0][1]["sha256"], records[-1][0]
    newest = max(s for s, k, pid, _ in chain if pid == "fix" and k in ("plan_version", "plan_of_record",
                                                                       "transition", "hold", "plan_state"))
    other = max(s for s, k, pid, _ in chain if pid == "fix" and s < newest and k == "notification")
    world.run_sql(f"UPDATE {CONTROL}.evidence SET kind = 'notification' WHERE seq = ?", [v2_seq])
    world.run_sql(f"UPDATE {CONTROL}.evidence SET kind = 'plan_version' WHERE seq = ?", [other])
    world.run_sql(f"UPDATE {CONTROL}.plans SET approved_sha256 = ? WHERE plan_id = 'fix'", [v1_sha])
    rows = world.rows("daily_revenue", "2026-01-05")
    capsys.readouterr()
    assert world.cli("run", "fix", "--proof") != 0
    said = capsys.readouterr().err
    assert "the control record was edited outside backfill" in said, said  # whichever check names it first
    assert world.rows("daily_revenue", "2026-01-05") == rows


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
@pytest.mark.parametrize("how", ["view", "row security"])
def test_a_control_table_that_answers_each_statement_differently_is_refused(engine_world, capsys, how):
    """Insider, no key, PostgreSQL: `evidence` renamed and replaced by an (auto-updatable) view that
    hides a cancel's rows only from the statement a decision reads the plan with (`current_query()`):
    the check saw the whole record, the decision the past; the cancelled plan ran, published, and
    `evidence verify` passed (found by an attack). Row security can do the same."""
    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    before = world.sql(f"SELECT * FROM {CONTROL}.plans WHERE plan_id = 'fix'")
    columns = [r[0] for r in world.sql("SELECT column_name FROM information_schema.columns WHERE table_schema = "
                                       "'backfill_control' AND table_name = 'plans' ORDER BY ordinal_position")]
    top = world.sql(f"SELECT max(seq) FROM {CONTROL}.evidence")[0][0]
    assert world.cli("cancel", "fix") == 0
    hidden = " OR ".join(f"seq = {s}" for (s,) in world.sql(
        f"SELECT seq FROM {CONTROL}.evidence WHERE seq > {top} AND plan_id = 'fix' AND kind IN ('transition', 'hold')"))
    only_there = f"(({hidden}) AND pg_catalog.strpos(pg_catalog.current_query(), 'ORDER BY plan_id, seq DESC') > 0)"
    import psycopg  # the insider's own connection: the product's sessions refuse this warehouse once it is done

    with psycopg.connect(world.url, autocommit=True) as insider:
        if how == "view":
            insider.execute(f"ALTER TABLE {CONTROL}.evidence RENAME TO evidence_real")
            insider.execute(f"CREATE VIEW {CONTROL}.evidence AS SELECT * FROM {CONTROL}.evidence_real "
                            f"WHERE NOT {only_there}")
        else:
            insider.execute(f"ALTER TABLE {CONTROL}.evidence ENABLE ROW LEVEL SECURITY")
            insider.execute(f"ALTER TABLE {CONTROL}.evidence FORCE ROW LEVEL SECURITY")
            insider.execute(f"CREATE POLICY hide ON {CONTROL}.evidence USING (NOT {only_there})")
        insider.execute(f"UPDATE {CONTROL}.plans SET {', '.join(f'{c} = %s' for c in columns[1:])} "
                        "WHERE plan_id = 'fix'", list(before[0][1:]))
    capsys.readouterr()
    assert world.cli("run", "fix", "--proof") != 0
    said = capsys.readouterr().err
    assert ("backfill_control.evidence is a view, not a plain table" if how == "view" else
            "backfill_control.evidence has row security, not a plain table") in said, said
    assert world.cli("evidence", "verify") != 0  # refused as the session opened: nothing ran


def test_a_rolled_back_append_is_never_obeyed_in_place_of_the_row_that_takes_its_number(world):
    """A process remembers verified chain rows by number; a row its own transaction appended and
    then rolled back was remembered too, and the next row given that number (another plan's state)
    would be read as the remembered one: each plan's newest state row is read by number since the
    chain index (a reviewer's find)."""
    from backfill_assets import lifecycle
    from backfill_assets.control import record

    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    world.approved_plan("other", start="2026-01-05", end="2026-01-06", proof=("2026-01-05",))
    warehouse = world.warehouse()
    with warehouse.session() as session:
        with pytest.raises(RuntimeError), session.transaction():
            lifecycle.paused(session, record.require(session, "fix"), "tester")
            assert record.require(session, "fix").hold is not None  # read back, by number, in the transaction
            raise RuntimeError("the step after it failed")
        with session.transaction():
            lifecycle.paused(session, record.require(session, "other"), "tester")  # takes the same number
        assert record.require(session, "fix").hold is None and record.require(session, "other").hold is not None
    assert world.cli("status", "fix") == 0


_DOMAIN_EQUALITY = """
CREATE DOMAIN public.kind_t AS text;
CREATE FUNCTION public.kind_eq(a public.kind_t, b public.kind_t) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF a::text = 'plan_version' AND b::text = 'published'
     AND pg_catalog.strpos(pg_catalog.current_query(), 'AND kind = ') > 0 THEN
    RETURN true;
  END IF;
  RETURN a::text = b::text;
END $$;
CREATE FUNCTION public.kind_eq_t(a public.kind_t, b text) RETURNS boolean LANGUAGE sql AS
  'SELECT public.kind_eq(a, b::public.kind_t)';
CREATE OPERATOR public.= (LEFTARG = public.kind_t, RIGHTARG = public.kind_t, FUNCTION = public.kind_eq);
CREATE OPERATOR public.= (LEFTARG = public.kind_t, RIGHTARG = text, FUNCTION = public.kind_eq_t);
ALTER TABLE backfill_control.evidence ALTER COLUMN kind TYPE public.kind_t;
"""
_VARCHAR_EQUALITY = """
CREATE FUNCTION public.vc_eq(a varchar, b varchar) RETURNS boolean LANGUAGE sql AS 'SELECT a::text = b::text';
CREATE OPERATOR public.= (LEFTARG = varchar, RIGHTARG = varchar, FUNCTION = public.vc_eq);
"""


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
@pytest.mark.parametrize("how", ["a domain with its own =", "an = over varchar", "an inheriting table"])
def test_a_plain_control_table_read_through_code_of_ones_own_is_refused(engine_world, capsys, how):
    """Insider, no key, PostgreSQL: `evidence` stayed a plain table, but its `kind` became a domain
    whose `=` (plpgsql reading current_query()) let a plan's own plan_version row pass for its
    `published` one: a cutover its dual-run streak refused published, and `evidence verify` passed
    (found by an attack). An `=` of one's own over varchar, or a table inheriting the rows, reads
    the same way."""
    import psycopg

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    with psycopg.connect(world.url, autocommit=True) as insider:
        if how.startswith("a domain"):
            insider.execute(_DOMAIN_EQUALITY)
        elif how.startswith("an ="):
            insider.execute(_VARCHAR_EQUALITY)
        else:
            insider.execute("CREATE TABLE public.more () INHERITS (backfill_control.evidence)")
    capsys.readouterr()
    assert world.cli("run", "fix", "--proof") != 0
    said = capsys.readouterr().err
    assert "read backfill_control and the gates' tables through the " in said and "drop or rename it" in said, said
    assert world.cli("evidence", "verify") != 0


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
@pytest.mark.parametrize("shadow", ["count(varchar)", "count(bigint)", "nextval(text)"])
def test_a_function_named_like_pg_catalogs_over_its_types_is_refused(engine_world, capsys, shadow):
    """Insider, no key, CREATE on public only, PostgreSQL: `public.count(varchar)` is an exact match
    where pg_catalog's `count("any")` is not, so the product's `count(DISTINCT partition_key)` was
    theirs: a plan that wrote was withdrawn, its writes never rolled back; `count(bigint)` turned a
    duplicates gate over a doubled source into a pass; `nextval(text)` chose the record's ids (found
    by an attack). Any such function is refused as the session opens."""
    import psycopg

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0  # it wrote: a withdraw must be refused, a rollback named
    name, argument = shadow.rstrip(")").split("(")
    with psycopg.connect(world.url, autocommit=True) as insider:
        if name == "count":
            insider.execute(f"CREATE FUNCTION public.zero_step(bigint, {argument}) RETURNS bigint LANGUAGE sql "
                            "IMMUTABLE AS 'SELECT 0::bigint'")
            insider.execute(f"CREATE AGGREGATE public.count({argument}) (SFUNC = public.zero_step, STYPE = bigint, "
                            "INITCOND = '0')")
        else:
            insider.execute("CREATE FUNCTION public.nextval(text) RETURNS bigint LANGUAGE sql AS 'SELECT 7::bigint'")
    capsys.readouterr()
    assert world.cli("plan", "withdraw", "fix") != 0
    said = capsys.readouterr().err
    assert f"read backfill_control and the gates' tables through the function public.{name}(" in said, said
    assert world.cli("evidence", "verify") != 0


def _insider_duckdb(world, *statements: str) -> None:
    """Statements as an insider runs them on the DuckDB file with their own duckdb, while no command
    holds it (the product's sessions refuse the file once they are done)."""
    import duckdb

    world.warehouse().engine.let_go()
    with duckdb.connect(str(world.warehouse_path)) as con:
        for statement in statements:
            con.execute(statement)


def _published_rows(world, day: str) -> int:
    import duckdb

    world.warehouse().engine.let_go()
    with duckdb.connect(str(world.warehouse_path), read_only=True) as con:
        return con.execute("SELECT count(*) FROM published_revenue WHERE order_date = ?", [day]).fetchone()[0]


@pytest.mark.parametrize("how", ["a view", "an enum column", "a struct of an enum", "a collation"])
def test_a_duckdb_control_table_that_answers_each_statement_differently_is_refused(world, capsys, how):
    """Insider, no key, DuckDB (while no command holds the file): `gate_results` copied, dropped and
    replaced by a view that says `passed = true` only to the statement a decision reads the latest
    results with (`current_query()`), the sealed rows to the seal check's: a partition whose gates
    failed was published, and `evidence verify` passed; a `snapshots` view the same way had a
    rollback restore edited rows (found by an attack). A column of a type the schema does not make
    (an enum, or a struct of one, which no type's name shows), or a collation (`partition_key =
    '2026-01-03'` then reads other partitions' rows too when keys differ only in case; only the table's
    statement shows it) is refused the same way, before any seal is read (leads of an attack)."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    world.run_sql("INSERT INTO orders SELECT * FROM orders WHERE order_date = '2026-01-03' LIMIT 2")  # loaded twice
    assert world.cli("run", "fix") == 1
    before = _published_rows(world, "2026-01-03")
    if how == "a view":
        mark = "PARTITION BY write_id, gate"
        _insider_duckdb(
            world, f"CREATE TABLE {CONTROL}.gate_results_real AS SELECT * FROM {CONTROL}.gate_results",
            f"DROP TABLE {CONTROL}.gate_results",
            f"CREATE VIEW {CONTROL}.gate_results AS SELECT * REPLACE (true AS passed) FROM {CONTROL}.gate_results_real "
            f"WHERE strpos(current_query(), '{mark}') > 0 UNION ALL SELECT * FROM {CONTROL}.gate_results_real "
            f"WHERE strpos(current_query(), '{mark}') = 0")
    elif how == "an enum column":
        _insider_duckdb(world, f"DROP INDEX {CONTROL}.results_by_write",
                        f"CREATE TYPE {CONTROL}.verdict AS ENUM ('false', 'true')",
                        f"ALTER TABLE {CONTROL}.gate_results ALTER COLUMN passed TYPE {CONTROL}.verdict "
                        "USING CAST(CAST(passed AS VARCHAR) AS backfill_control.verdict)")
    elif how == "a struct of an enum":  # shows as STRUCT(v ENUM('false', 'true')) (a lead of an attack)
        _insider_duckdb(world, f"DROP INDEX {CONTROL}.results_by_write",
                        f"CREATE TYPE {CONTROL}.verdict AS ENUM ('false', 'true')",
                        f"ALTER TABLE {CONTROL}.gate_results ALTER COLUMN passed TYPE STRUCT(v {CONTROL}.verdict) "
                        "USING {'v': CAST(CAST(passed AS VARCHAR) AS backfill_control.verdict)}")
    else:  # shows as VARCHAR: only the table's statement says COLLATE (a lead of an attack)
        _insider_duckdb(world, f"DROP INDEX {CONTROL}.results_by_write",
                        f"ALTER TABLE {CONTROL}.gate_results ALTER COLUMN partition_key TYPE VARCHAR COLLATE NOCASE")
    capsys.readouterr()
    assert world.cli("publish", "fix") != 0
    said = capsys.readouterr().err
    expected = {"a view": "holds the view gate_results", "a collation": "holds the table gate_results with a collation"
                }.get(how, "holds the column gate_results.passed (of type")
    assert expected in said, said
    assert _published_rows(world, "2026-01-03") == before
    assert world.cli("evidence", "verify") != 0


@pytest.mark.parametrize("engine_world", ["duckdb", "postgresql"], indirect=True)
def test_a_control_column_altered_to_another_type_is_refused(engine_world, capsys):
    """Insider, no key (found by an attack, DuckDB): `gate_results.evidence_seq`, which names the
    chain row sealing a result and orders "the latest", altered to text. '0123' sorts after '99', so
    with a '0' put before the number of the results that failed, the older passing ones read as the
    latest; the seals still verified ('0123' = 123 in an IN list, `int('0123')` in Python), so publish
    copied the failed partition and `evidence verify` passed. A column of another type than the
    schema makes it with is refused as each session opens, before anything is read."""
    import psycopg

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix") == 0
    world.run_sql("INSERT INTO orders SELECT * FROM orders WHERE order_date = '2026-01-03' LIMIT 2")  # loaded twice
    assert world.cli("reconcile", "fix") == 1
    published = ("SELECT count(*) FROM published_revenue WHERE order_date = '2026-01-03'")
    latest = f"(SELECT max(CAST(evidence_seq AS BIGINT)) FROM {CONTROL}.gate_results)"
    if world.url is None:
        before = _published_rows(world, "2026-01-03")
        _insider_duckdb(world, f"DROP INDEX {CONTROL}.results_by_write",
                        f"ALTER TABLE {CONTROL}.gate_results ALTER COLUMN evidence_seq TYPE VARCHAR",
                        f"UPDATE {CONTROL}.gate_results SET evidence_seq = '0' || evidence_seq "
                        f"WHERE CAST(evidence_seq AS BIGINT) = {latest}",
                        f"CREATE INDEX results_by_write ON {CONTROL}.gate_results (write_id)")
    else:
        with psycopg.connect(world.url, autocommit=True) as insider:
            before = insider.execute(published).fetchone()[0]
            insider.execute(f"ALTER TABLE {CONTROL}.gate_results ALTER COLUMN evidence_seq TYPE text")
            insider.execute(f"UPDATE {CONTROL}.gate_results SET evidence_seq = '0' || evidence_seq "
                            f"WHERE CAST(evidence_seq AS BIGINT) = {latest}")
    capsys.readouterr()
    assert world.cli("publish", "fix") != 0
    said = capsys.readouterr().err
    expected = "holds the column gate_results.evidence_seq (of type VARCHAR, made BIGINT)" if world.url is None \
        else "holds the column gate_results.evidence_seq of type text, made bigint"
    assert expected in said and said.count("\n") == 1, said
    assert world.cli("evidence", "verify") != 0
    if world.url is None:
        assert _published_rows(world, "2026-01-03") == before
    else:
        with psycopg.connect(world.url) as con:
            assert con.execute(published).fetchone()[0] == before


def _failed_reconcile(world) -> int:
    """A window whose reconcile found 2026-01-03's source loaded twice: the plan back to running.
    Returns the chain row of that reconcile's gate results (they failed)."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix") == 0
    world.run_sql("INSERT INTO orders SELECT * FROM orders WHERE order_date = '2026-01-03' LIMIT 2")  # loaded twice
    assert world.cli("reconcile", "fix") == 1
    return int(world.sql(f"SELECT max(evidence_seq) FROM {CONTROL}.gate_results")[0][0])


_PUBLISHED_0103 = "SELECT count(*) FROM published_revenue WHERE order_date = '2026-01-03'"


@pytest.mark.parametrize("engine_world", ["duckdb", "postgresql"], indirect=True)
def test_a_sealed_group_of_failing_gate_results_hidden_is_refused(engine_world, capsys):
    """Insider, no key (found by an attack): every row of the reconcile's gate results deleted, a
    whole sealed group, so no row is left to mismatch its seal and the older passing results read as
    the latest. `backfill publish` first moved the plan to reconciled on them (a chain row saying
    every gate passed), and only its check of the whole record refused; with the rows put back,
    `evidence verify` passed over a reconciled plan whose latest gates failed. Every read of "the
    latest" now checks the chain rows after it for a newer write or newer results."""
    import psycopg

    world = engine_world
    seq = _failed_reconcile(world)
    hide = [f"CREATE TABLE {CONTROL}_stash AS SELECT * FROM {CONTROL}.gate_results WHERE evidence_seq = {seq}",
            f"DELETE FROM {CONTROL}.gate_results WHERE evidence_seq = {seq}"]
    if world.url is None:
        _insider_duckdb(world, *hide)
    else:
        with psycopg.connect(world.url, autocommit=True) as insider:
            for statement in hide:
                insider.execute(statement)
    capsys.readouterr()
    assert world.cli("publish", "fix") != 0
    said = capsys.readouterr().err
    assert f"the gate results that evidence row {seq} recorded are gone" in said and said.count("\n") == 1, said
    assert world.phase("fix") == "running"
    assert world.cli("reconcile", "fix") != 0 and world.phase("fix") == "running"


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_failing_gate_results_hidden_while_publish_waits_for_its_lock_are_found(engine_world):
    """Insider on PostgreSQL, no key (found by an attack): publish checked the whole record before
    its lock, then only the rows it read; the insider held the publish lock, hid the failing group
    once the check had passed, let go, and put the rows back after: the failed partition was copied
    and `evidence verify` passed. The rows read under the lock are now checked against the chain."""

    import psycopg


    world = engine_world
    seq = _failed_reconcile(world)
    window = ["2026-01-01", "2026-01-02", "2026-01-03", "2026-01-04"]
    outcome: dict[str, object] = {}
    with psycopg.connect(world.url, autocommit=True) as insider:
        before = insider.execute(_PUBLISHED_0103).fetchone()[0]
        insider.execute(f"CREATE TABLE public.stash AS SELECT * FROM {CONTROL}.gate_results WHERE evidence_seq = {seq}")
    # the state the attack's first half left (now refused, test above): the plan reconciled, its
    # latest gates failing; made here as the product would record it, with its key
    with world.warehouse().session() as session:
        from backfill_assets.control import record
        from backfill_assets.plan.phases import Phase

        record.transition(session, "fix", Phase.RECONCILED, "mallory", note="as the first half of the attack left it")
    with psycopg.connect(world.url, autocommit=True) as insider:
        _while_publish_waits(world, insider, window, outcome, lambda: insider.execute(
            f"DELETE FROM {CONTROL}.gate_results WHERE evidence_seq = {seq}"))
        insider.execute(f"INSERT INTO {CONTROL}.gate_results SELECT * FROM public.stash")
        after = insider.execute(_PUBLISHED_0103).fetchone()[0]
    assert "done" not in outcome and after == before, outcome
    assert f"the gate results that evidence row {seq} recorded are gone" in str(outcome.get("error")), outcome


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_write_committed_while_the_latest_is_read_is_not_taken_for_a_hidden_one(engine_world, monkeypatch):
    """PostgreSQL reads each statement afresh: a run of the plan that commits a new write of a
    partition after another session read its latest write, but before that session checked the
    chain rows after it, is the newer write of a healthy record, not one hidden from the ledger.
    Only the chain rows committed before the ledger was read are asked of it."""
    import threading

    from backfill_assets.control import ledger, record
    from backfill_assets.warehouse.fingerprints import Fingerprint

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    monkeypatch.setenv("BACKFILL_STALL_AT", "ledger.latest.after_read=10")
    outcome: dict[str, object] = {}

    def read() -> None:
        try:
            with world.warehouse().session() as session:
                outcome["latest"] = ledger.latest(session, "daily_revenue", ["2026-01-02"], "fix")
        except Exception as exc:  # noqa: BLE001 - what it raised is the outcome
            outcome["error"] = exc

    import time

    from backfill_assets import faults

    held = faults.reached("ledger.latest.after_read")
    thread = threading.Thread(target=read)
    thread.start()
    while faults.reached("ledger.latest.after_read") == held and thread.is_alive():
        time.sleep(0.05)  # until the reader has read the ledger and stalls before its check of the chain
    monkeypatch.delenv("BACKFILL_STALL_AT")
    with world.warehouse().session() as session, session.transaction():
        record.require(session, "fix")
        ledger.record_writes(session, plan_id="fix", asset="daily_revenue", mode="overwrite", run_id=None,
                             code_version="1", code_identity="x",
                             written={"2026-01-02": Fingerprint(5, "sha256:" + "0" * 64)}, actor="a run of the plan")
    assert thread.is_alive(), "the reader went on before the write committed: the test proves nothing"
    monkeypatch.setenv("BACKFILL_STALL_RELEASE", "ledger.latest.after_read")  # it goes on now
    thread.join(60)
    assert "error" not in outcome, outcome
    assert outcome["latest"]["2026-01-02"] is not None  # type: ignore[index]


def _waits(insider, what: str, thread) -> None:
    """Until a session of this database waits as `what` says (a condition on pg_stat_activity); the
    test fails when the command ended or never waited, since it then proves nothing."""
    import time

    for _ in range(600):
        waiting = insider.execute(f"SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                  f"AND {what}").fetchone()[0]
        if waiting:
            return
        assert thread.is_alive(), "the command ended without waiting where the test holds it"
        time.sleep(0.1)
    raise AssertionError(f"no session waited ({what}) within 60 s")


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_plans_writes_hidden_while_withdraw_waits_for_its_row_are_found(engine_world, capsys):
    """Insider on PostgreSQL, no key (found by an attack): withdraw checks the whole record, then
    waits for the plan's row and counts the plan's writes in the ledger. Holding the row, the insider
    deleted the writes of a plan whose proof had written (its gates failed, so it was still proving):
    the plan was withdrawn with its proof partition still written, and with the rows put back
    `evidence verify` passed. What the chain recorded the plan wrote is read too."""
    import threading

    import psycopg

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    world.run_sql("INSERT INTO orders SELECT * FROM orders WHERE order_date = '2026-01-02' LIMIT 2")  # loaded twice
    assert world.cli("run", "fix", "--proof") == 1 and world.phase("fix") == "proving"  # written, gates failed
    outcome: dict[str, object] = {}
    with psycopg.connect(world.url, autocommit=True) as insider:
        insider.execute(f"CREATE TABLE public.stash AS SELECT * FROM {CONTROL}.writes WHERE plan_id = 'fix'")
        with psycopg.connect(world.url) as holder:
            holder.execute(f"SELECT 1 FROM {CONTROL}.plans WHERE plan_id = 'fix' FOR UPDATE")
            capsys.readouterr()
            thread = threading.Thread(target=lambda: outcome.update(code=world.cli("plan", "withdraw", "fix")))
            thread.start()
            _waits(insider, "wait_event_type = 'Lock'", thread)
            holder.execute(f"DELETE FROM {CONTROL}.writes WHERE plan_id = 'fix'")
            holder.commit()
            thread.join(120)
        insider.execute(f"INSERT INTO {CONTROL}.writes SELECT * FROM public.stash")
    said = capsys.readouterr().err
    assert outcome["code"] != 0 and world.phase("fix") == "proving", (outcome, said)
    assert "plan fix wrote daily_revenue 2026-01-02 (evidence row" in said and "no longer holds" in said, said


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_plans_writes_and_snapshots_hidden_while_rollback_waits_for_its_lock_are_found(engine_world, capsys):
    """Insider on PostgreSQL, no key (found by an attack): rollback checks the whole record, waits
    for the publish lock, then lists from the ledger what the plan wrote and snapshotted. The insider
    held the lock and deleted the window run's writes and snapshot records: three partitions kept the
    plan's bytes, the plan was marked rolled back, and with the rows put back `evidence verify`
    passed. What the chain recorded the plan wrote and snapshotted is read too."""
    import threading

    import psycopg

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    rows = "SELECT order_date, count(*) FROM public.daily_revenue GROUP BY 1 ORDER BY 1"
    outcome: dict[str, object] = {}
    with psycopg.connect(world.url, autocommit=True) as insider:
        before = insider.execute(rows).fetchall()
        hidden = ("partition_key <> '2026-01-02'")
        insider.execute(f"CREATE TABLE public.stash_w AS SELECT * FROM {CONTROL}.writes WHERE {hidden}")
        insider.execute(f"CREATE TABLE public.stash_s AS SELECT * FROM {CONTROL}.snapshots WHERE {hidden}")
        insider.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", ["publish:published_revenue"])
        capsys.readouterr()
        thread = threading.Thread(target=lambda: outcome.update(code=world.cli("rollback", "fix")))
        thread.start()
        _waits(insider, "wait_event = 'advisory'", thread)
        insider.execute(f"DELETE FROM {CONTROL}.writes WHERE plan_id = 'fix' AND {hidden}")
        insider.execute(f"DELETE FROM {CONTROL}.snapshots WHERE {hidden}")
        insider.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", ["publish:published_revenue"])
        thread.join(120)
        insider.execute(f"INSERT INTO {CONTROL}.writes SELECT * FROM public.stash_w")
        insider.execute(f"INSERT INTO {CONTROL}.snapshots SELECT * FROM public.stash_s")
        after = insider.execute(rows).fetchall()
    said = capsys.readouterr().err
    assert outcome["code"] != 0 and world.phase("fix") != "rolled_back" and after == before, (outcome, said)
    assert "is gone from backfill_control.snapshots: a rollback would leave it" in said, said


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_snapshot_records_hidden_while_rollback_waits_for_a_partitions_lock_are_found(engine_world, capsys):
    """Insider on PostgreSQL, no key (found by an attack on the check above): rollback compared the
    ledger with the chain, then waited for each partition's write lock, then read the snapshot
    records again to restore them, leaving out any gone. Holding one partition's lock, the insider
    deleted the window run's snapshot records: three partitions kept the plan's bytes and the plan
    was marked rolled back. The comparison now runs once every lock is held, and a record gone
    when it is restored is refused."""
    import threading

    import psycopg

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    rows = "SELECT order_date, count(*) FROM public.daily_revenue GROUP BY 1 ORDER BY 1"
    lock = "write:daily_revenue:2026-01-03"
    outcome: dict[str, object] = {}
    with psycopg.connect(world.url, autocommit=True) as insider:
        before = insider.execute(rows).fetchall()
        hidden = "partition_key <> '2026-01-02'"
        insider.execute(f"CREATE TABLE public.stash_s AS SELECT * FROM {CONTROL}.snapshots WHERE {hidden}")
        insider.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", [lock])
        capsys.readouterr()
        thread = threading.Thread(target=lambda: outcome.update(code=world.cli("rollback", "fix")))
        thread.start()
        _waits(insider, "wait_event = 'advisory'", thread)
        insider.execute(f"DELETE FROM {CONTROL}.snapshots WHERE {hidden}")
        insider.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [lock])
        thread.join(120)
        insider.execute(f"INSERT INTO {CONTROL}.snapshots SELECT * FROM public.stash_s")
        after = insider.execute(rows).fetchall()
    said = capsys.readouterr().err
    assert outcome["code"] != 0 and world.phase("fix") != "rolled_back" and after == before, (outcome, said)
    assert "is gone from backfill_control.snapshots since the rollback listed it" in said, said


def test_a_rollback_dry_run_over_a_ledger_with_whole_groups_hidden_is_refused(world, capsys):
    """Insider, no key (a lead of an attack): a dry run read the ledger alone, so with the window
    run's writes and snapshot records deleted it said it would restore 1 partition of 4, while the
    rollback itself refused. It now checks the ledger against the chain as the rollback does."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    hidden = "partition_key <> '2026-01-02'"
    _insider_duckdb(world, f"DELETE FROM {CONTROL}.writes WHERE {hidden}",
                    f"DELETE FROM {CONTROL}.snapshots WHERE {hidden}")
    capsys.readouterr()
    assert world.cli("rollback", "fix", "--dry-run") != 0
    said = capsys.readouterr().err
    assert "is gone from backfill_control.snapshots: a rollback would leave it" in said and said.count("\n") == 1, said


def _publish_in_thread(world, keys: list[str], outcome: dict[str, object]):
    """The publish rule as the publish asset runs it, in a thread: what it returned or raised."""
    import threading

    from backfill_assets.publish import rule
    from tests.world import DAILY_REVENUE

    def publish() -> None:
        try:
            with world.warehouse().session() as session:
                outcome["done"] = rule.publish(session, DAILY_REVENUE, world.scheme, keys, actor="x")
        except Exception as exc:  # noqa: BLE001 - what the rule raised is the outcome
            outcome["error"] = exc

    thread = threading.Thread(target=publish)
    thread.start()
    return thread


def _while_publish_waits(world, insider, keys: list[str], outcome: dict[str, object], hide) -> None:
    """The publish rule over `keys` started while `insider` holds its lock; once it waits there,
    `hide()` runs, then the lock is let go and the publish ends (what it did is in `outcome`)."""
    lock = ["publish:published_revenue"]
    insider.execute("SELECT pg_advisory_lock(hashtextextended(%s, 0))", lock)
    thread = _publish_in_thread(world, keys, outcome)
    _waits(insider, "wait_event = 'advisory'", thread)
    hide()
    insider.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", lock)
    thread.join(120)


_PUBLISHED = "SELECT order_date, count(*), sum(net_revenue) FROM public.published_revenue GROUP BY 1 ORDER BY 1"


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_plans_row_hidden_while_publish_waits_for_its_lock_is_found(engine_world):
    """Insider on PostgreSQL, no key (found by an attack): a running plan (its 2026-01-03 failed)
    holds its window; its row deleted while publish waited for its lock, publish found no plan
    holding 2026-01-02 and copied the plan's write of it alone (no signature, hold or code check, no
    snapshot for a rollback), and with the row put back `evidence verify` passed. Every read of the
    plans compares them with the plans the chain indexes."""
    import psycopg

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    world.run_sql("INSERT INTO orders SELECT * FROM orders WHERE order_date = '2026-01-03' LIMIT 2")  # loaded twice
    assert world.cli("run", "fix") != 0 and world.phase("fix") == "running"
    outcome: dict[str, object] = {}
    with psycopg.connect(world.url, autocommit=True) as insider:
        before = insider.execute(_PUBLISHED).fetchall()
        insider.execute(f"CREATE TABLE public.stash_p AS SELECT * FROM {CONTROL}.plans WHERE plan_id = 'fix'")
        _while_publish_waits(world, insider, ["2026-01-02"], outcome, lambda: insider.execute(
            f"DELETE FROM {CONTROL}.plans WHERE plan_id = 'fix'"))
        insider.execute(f"INSERT INTO {CONTROL}.plans SELECT * FROM public.stash_p")
        after = insider.execute(_PUBLISHED).fetchall()
    assert "done" not in outcome and after == before, outcome
    assert "plan fix is in the evidence chain, but its row is gone" in str(outcome.get("error")), outcome


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_history_hidden_for_an_unplanned_rewrite_while_publish_waits_is_found(engine_world):
    """Insider on PostgreSQL, no key (found by an attack): 2026-01-02 written without a plan and
    published (history). While publish waited for its lock, the insider hid that write's group and
    the partition's rows, tripled the source, let a Materialize write 2026-01-02 again as a new
    partition, and put the published rows back: publish, asking the ledger alone whether the
    partition was written before, copied the unplanned rewrite. It asks the chain too."""
    import psycopg

    world = engine_world
    days = ["2026-01-01", "2026-01-02"]
    assert world.materialize(days).success and world.publish(days).success
    one = "order_date = '2026-01-02'"
    outcome: dict[str, object] = {}
    with psycopg.connect(world.url, autocommit=True) as insider:
        before = insider.execute(_PUBLISHED).fetchall()
        seq = insider.execute(f"SELECT evidence_seq FROM {CONTROL}.writes WHERE partition_key = '2026-01-02'"
                              ).fetchone()[0]
        insider.execute(f"CREATE TABLE public.stash_w AS SELECT * FROM {CONTROL}.writes WHERE evidence_seq = {seq}")
        insider.execute(f"CREATE TABLE public.stash_pub AS SELECT * FROM public.published_revenue WHERE {one}")

        def rewrite_as_new() -> None:
            insider.execute(f"DELETE FROM {CONTROL}.writes WHERE evidence_seq = {seq}")
            insider.execute(f"DELETE FROM public.daily_revenue WHERE {one}")
            insider.execute(f"DELETE FROM public.published_revenue WHERE {one}")
            insider.execute(f"UPDATE public.orders SET amount = amount * 3 WHERE {one}")  # the unplanned data
            assert world.materialize(["2026-01-02"]).success  # plan-free: the partition looks new
            insider.execute("INSERT INTO public.published_revenue SELECT * FROM public.stash_pub")

        _while_publish_waits(world, insider, ["2026-01-02"], outcome, rewrite_as_new)
        insider.execute(f"INSERT INTO {CONTROL}.writes SELECT * FROM public.stash_w")
        after = insider.execute(_PUBLISHED).fetchall()
    assert "done" not in outcome and after == before, outcome
    assert "2026-01-02: written without a plan (evidence row" in str(outcome.get("error")), outcome


def _verified_while(world, monkeypatch, point: str, meanwhile, seconds: float = 10,
                    check=None) -> dict[str, object]:
    """`check(session)` (`integrity.verify_record` by default) in a thread, held at checkpoint
    `point` (for `seconds`) while `meanwhile` commits something legitimate from this thread; what it
    returned ("verified") or raised ("error")."""
    import threading
    import time

    from backfill_assets import faults
    from backfill_assets.control import integrity

    outcome: dict[str, object] = {}
    held = faults.reached(point)
    monkeypatch.setenv("BACKFILL_STALL_AT", f"{point}={seconds}")

    def verify() -> None:
        try:
            with world.warehouse().session() as session:
                outcome["verified"] = (check or integrity.verify_record)(session)
        except Exception as exc:  # noqa: BLE001 - what it raised is the outcome
            outcome["error"] = exc

    thread = threading.Thread(target=verify)
    thread.start()
    while faults.reached(point) == held and thread.is_alive():  # until the check is held at `point`
        time.sleep(0.05)
    monkeypatch.delenv("BACKFILL_STALL_AT")
    meanwhile()
    assert thread.is_alive(), "the check went on before the commit: the test proves nothing"
    monkeypatch.setenv("BACKFILL_STALL_RELEASE", point.partition("@")[0])  # it goes on now
    thread.join(60)
    return outcome


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_write_committed_while_the_whole_record_is_verified_is_not_taken_for_a_forgery(engine_world, monkeypatch):
    """PostgreSQL reads each statement afresh (found by an attack): the whole-record check read which
    chain rows the ledger's rows name, then the chain; a run's write committed between the two was a
    chain row no row read named, "the rows evidence row N sealed are gone", a forgery said of a
    healthy record (publish, rollback, withdraw and `evidence verify` run it). Only the chain rows
    committed before the ledger was read are asked of it."""
    from backfill_assets.control import ledger, record
    from backfill_assets.warehouse.fingerprints import Fingerprint

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0

    def a_run_writes() -> None:
        with world.warehouse().session() as session, session.transaction():
            record.require(session, "fix", lock=True)
            ledger.record_writes(session, plan_id="fix", asset="daily_revenue", mode="overwrite", run_id=None,
                                 code_version="1", code_identity="x",
                                 written={"2026-01-03": Fingerprint(5, "sha256:" + "0" * 64)}, actor="a run")

    outcome = _verified_while(world, monkeypatch, "seals.verify_all.after_ledger", a_run_writes)
    assert "error" not in outcome, outcome


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_plan_approved_while_the_plans_are_read_is_not_taken_for_a_forgery(engine_world, monkeypatch):
    """PostgreSQL (found re-reading this stop's change): a read of the plans checks the chain index,
    then reads the rows; a new plan's first approval committed between the two is a row the index
    read did not name, which the states must then be checked against a new index for, not called
    "never recorded"."""
    import threading
    import time

    from backfill_assets import faults
    from backfill_assets.control import record

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    other = world.plan("other", start="2026-01-06", end="2026-01-07", proof=("2026-01-06",))
    point, outcome = "record.all_plans.after_index", {}
    held = faults.reached(point)
    monkeypatch.setenv("BACKFILL_STALL_AT", f"{point}=10")

    def read() -> None:
        try:
            with world.warehouse().session() as session:
                outcome["plans"] = [p.plan_id for p in record.all_plans(session)]
        except Exception as exc:  # noqa: BLE001 - what it raised is the outcome
            outcome["error"] = exc

    thread = threading.Thread(target=read)
    thread.start()
    while faults.reached(point) == held and thread.is_alive():
        time.sleep(0.05)
    monkeypatch.delenv("BACKFILL_STALL_AT")
    assert world.cli("plan", "approve", str(other), "--by", "olivia", "--key", str(world.keys["olivia"])) == 0
    assert thread.is_alive(), "the read went on before the approval: the test proves nothing"
    monkeypatch.setenv("BACKFILL_STALL_RELEASE", point)
    thread.join(60)
    assert "error" not in outcome and "other" in outcome["plans"], outcome


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
@pytest.mark.parametrize("point", ["record.all_plans.after_index", "record.get.after_row"])
def test_a_plan_paused_while_it_is_read_is_not_taken_for_a_forgery(engine_world, monkeypatch, point):
    """PostgreSQL (found by an attack): a read of the plans checked the chain index, then read the
    rows (reusing that index when every row was a plan it named), and a read of one plan read its
    row, then the index; a pause committed between the two had the plan's new row compared with the
    chain's older record of it, or its old row with the newer one: "restore it from a backup", said
    of a healthy record. A read whose two statements disagree is read again, and a row that still
    differs from the chain is refused."""
    from backfill_assets.control import record

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))

    def read(session):
        if point == "record.get.after_row":
            return [(s.plan_id, s.hold) for s in [record.require(session, "fix")]]
        return [(s.plan_id, s.hold) for s in record.all_plans(session)]

    outcome = _verified_while(world, monkeypatch, point, lambda: world.cli("pause", "fix"), check=read)
    assert "error" not in outcome, outcome
    assert outcome["verified"] == [("fix", record.Hold.PAUSED)], outcome


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_plan_row_forged_on_postgres_is_still_refused_after_it_is_read_again(engine_world):
    """What the reads again above leave standing: a row that differs from the chain's record of it
    on every read is refused, by a read of one plan and of them all."""
    from backfill_assets.control import record
    from backfill_assets.errors import ForgedRecord

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    world.run_sql("UPDATE backfill_control.plans SET hold = 'paused' WHERE plan_id = 'fix'")
    with world.warehouse().session() as session:
        for read in (lambda: record.get(session, "fix"), lambda: record.all_plans(session)):
            with pytest.raises(ForgedRecord, match="plans says hold 'paused'"):
                read()


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
@pytest.mark.parametrize("what", ["a plan", "a version"])
def test_a_plan_approved_while_the_whole_record_is_verified_is_not_taken_for_a_forgery(engine_world, monkeypatch,
                                                                                        what):
    """PostgreSQL (found by an attack): the whole-record check read the plans' rows (and the
    versions'), then the chain's; a first approval of a new plan (or of its new version) committed
    between the two read as a row deleted. The chain is read first."""
    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    other = world.plan("other", start="2026-01-06", end="2026-01-07", proof=("2026-01-06",))
    approve = ("plan", "approve", str(other), "--by", "olivia", "--key", str(world.keys["olivia"]))
    if what == "a version":
        assert world.cli(*approve) == 0
        other = world.plan("other", start="2026-01-06", end="2026-01-08", proof=("2026-01-06",))
    point = "record.verify_all.after_" + ("versions" if what == "a version" else "plans") + "_chain"
    outcome = _verified_while(world, monkeypatch, point, lambda: world.cli(*approve), seconds=10)  # a command: ~1 s
    assert "error" not in outcome, outcome


def test_a_plans_publication_hidden_and_the_bytes_before_it_put_back_is_found(world, capsys):
    """Insider, no key, DuckDB (found by an attack): history published, then plan fix published over
    it. The insider put the history's bytes back into the published table and deleted fix's
    publication group: `plan close` compared the table with the older publication, found no edit,
    and closed the plan; with the group put back `evidence verify` passed. A read of the latest
    publications checks the chain rows after them."""
    from tests.world import BUGGY, keys

    days = keys(1, 4)
    assert world.materialize(days, spec=BUGGY).success and world.publish(days, spec=BUGGY).success
    _insider_duckdb(world, "CREATE TABLE main.stash_pub AS SELECT * FROM main.published_revenue")
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0 and world.phase() == "published"
    seq = _insider_rows(world, f"SELECT max(evidence_seq) FROM {CONTROL}.publications")[0][0]
    _insider_duckdb(world, f"DELETE FROM {CONTROL}.publications WHERE evidence_seq = {seq}",
                    "DELETE FROM main.published_revenue",
                    "INSERT INTO main.published_revenue SELECT * FROM main.stash_pub")
    capsys.readouterr()
    assert world.cli("plan", "close", "fix") != 0 and world.phase() == "published"
    said = capsys.readouterr().err
    assert f"evidence row {seq} recorded is gone from backfill_control.publications" in said, said


def test_a_newer_write_of_a_partition_hidden_is_refused(world, capsys):
    """Insider, no key: a partition written again (a re-run), then that write's whole group and its
    results deleted, so the older write and its results read as the latest and every seal read
    still matches. The chain's newer write of the partition is found."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("run", "fix", "--partitions", "2026-01-03") == 0
    latest = f"SELECT max(evidence_seq) FROM {CONTROL}.writes WHERE partition_key = '2026-01-03'"
    seq = _insider_rows(world, latest)[0][0]
    write = _insider_rows(world, f"SELECT write_id FROM {CONTROL}.writes WHERE evidence_seq = {seq}")[0][0]
    _insider_duckdb(world, f"DELETE FROM {CONTROL}.gate_results WHERE write_id = {write}",
                    f"DELETE FROM {CONTROL}.writes WHERE evidence_seq = {seq}")
    capsys.readouterr()
    assert world.cli("reconcile", "fix") != 0
    said = capsys.readouterr().err
    assert f"daily_revenue 2026-01-03: the write that evidence row {seq} recorded is gone" in said, said


def test_a_write_between_two_identical_proof_writes_hidden_is_refused(world):
    """Insider, no key (a lead of an attack): the proof passes when the last two writes of its
    partition have the same fingerprint. Three writes A, B, A (B differing: not idempotent), then
    B's whole sealed group deleted: the last two read A, A, and the plan would move to proven. What
    the chain recorded the plan wrote is read with them."""
    from backfill_assets.control import ledger, record
    from backfill_assets.execution.advance import proof_verdict
    from backfill_assets.warehouse.fingerprints import Fingerprint

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    prints = [Fingerprint(5, "sha256:" + c * 64) for c in "aba"]
    for fingerprint in prints:  # as three runs of the proof partition record their writes
        with world.warehouse().session() as session, session.transaction():
            record.require(session, "fix", lock=True)
            ledger.record_writes(session, plan_id="fix", asset="daily_revenue", mode="overwrite", run_id=None,
                                 code_version="1", code_identity="x", written={"2026-01-02": fingerprint},
                                 actor="a run of the proof")
    middle = world.sql(f"SELECT evidence_seq FROM {CONTROL}.writes WHERE fingerprint = ?", [prints[1].digest])[0][0]
    _insider_duckdb(world, f"DELETE FROM {CONTROL}.writes WHERE evidence_seq = {middle}")
    from backfill_assets.errors import ForgedRecord

    with pytest.raises(ForgedRecord, match=f"write of daily_revenue 2026-01-02 \\(evidence row {middle}\\) is gone"):
        with world.warehouse().session() as session:
            proof_verdict(session, record.require(session, "fix"))


@pytest.mark.parametrize("engine_world", ["duckdb", "postgresql"], indirect=True)
def test_the_evidence_table_without_its_primary_key_is_refused(engine_world, capsys):
    """Insider, no key: the chain is exactly its rows numbered 1 to the last, checked by counting
    them; `evidence` recreated without its primary key could hold a row twice and so hide a row
    removed from the count (a lead of an attack). Refused as each session opens, like a view."""
    import psycopg

    world = engine_world
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    if world.url is None:
        _insider_duckdb(world, f"CREATE TABLE {CONTROL}.evidence_copy AS SELECT * FROM {CONTROL}.evidence",
                        f"DROP TABLE {CONTROL}.evidence", f"ALTER TABLE {CONTROL}.evidence_copy RENAME TO evidence")
    else:
        with psycopg.connect(world.url, autocommit=True) as insider:
            insider.execute(f"ALTER TABLE {CONTROL}.evidence DROP CONSTRAINT evidence_pkey")
    capsys.readouterr()
    assert world.cli("run", "fix", "--proof") != 0
    said = capsys.readouterr().err
    assert f"{CONTROL}.evidence has no primary key on seq" in said and said.count("\n") == 1, said
    assert world.cli("evidence", "verify") != 0
    # the proof never wrote: its table is made by its first write
    count = "SELECT count(*) FROM information_schema.tables WHERE table_name = 'daily_revenue'"
    if world.url is None:  # read as the insider reads it: the product's sessions refuse the file
        import duckdb

        world.warehouse().engine.let_go()
        with duckdb.connect(str(world.warehouse_path), read_only=True) as con:
            assert con.execute(count).fetchone() == (0,)
    else:
        with psycopg.connect(world.url) as con:
            assert con.execute(count).fetchone() == (0,)


@pytest.mark.parametrize("how", ["the chain's table renamed Evidence", "the schema renamed Backfill_Control"])
def test_control_names_in_another_case_are_checked_as_duckdb_resolves_them(world, capsys, how):
    """DuckDB resolves names without regard to case but keeps the case they were made with: the
    checks compared the catalog's names with ours exactly, so `evidence` copied without its primary
    key and renamed "Evidence" (a row then held twice, another removed: count = last number) was
    never checked (found by an attack); nor was a view in the control schema made again as
    "Backfill_Control"."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    if how.startswith("the chain's"):
        _insider_duckdb(world, f"CREATE TABLE {CONTROL}.evidence_copy AS SELECT * FROM {CONTROL}.evidence",
                        f"DROP TABLE {CONTROL}.evidence", f'ALTER TABLE {CONTROL}.evidence_copy RENAME TO "Evidence"',
                        f"INSERT INTO {CONTROL}.evidence SELECT * FROM {CONTROL}.evidence WHERE seq = 4",
                        f"DELETE FROM {CONTROL}.evidence WHERE seq = 3")
        expected = f"{CONTROL}.evidence has no primary key on seq"
    else:
        tables = [t for (t,) in _insider_rows(world, "SELECT table_name FROM duckdb_tables() WHERE schema_name = "
                                                     f"'{CONTROL}' ORDER BY table_name")]
        from backfill_assets.warehouse.state_store.schema import _TABLES

        chain = _TABLES[_TABLES.index(f"CREATE TABLE IF NOT EXISTS {CONTROL}.evidence"):]
        chain = chain[:chain.index(");") + 2].replace(CONTROL, '"Backfill_Control"', 1)  # with its key
        _insider_duckdb(world, "CREATE SCHEMA stash",
                        *(f"CREATE TABLE stash.{t} AS SELECT * FROM {CONTROL}.{t}" for t in tables),
                        f"DROP SCHEMA {CONTROL} CASCADE", 'CREATE SCHEMA "Backfill_Control"', chain,
                        'INSERT INTO "Backfill_Control".evidence SELECT * FROM stash.evidence',
                        *(f'CREATE TABLE "Backfill_Control".{t} AS SELECT * FROM stash.{t}' for t in tables
                          if t not in ("plans", "evidence")),
                        'CREATE TABLE "Backfill_Control".plans_real AS SELECT * FROM stash.plans',
                        'CREATE VIEW "Backfill_Control".plans AS SELECT * FROM "Backfill_Control".plans_real',
                        "DROP SCHEMA stash CASCADE")
        expected = "holds the view plans"
    capsys.readouterr()
    assert world.cli("run", "fix", "--proof") != 0
    said = capsys.readouterr().err
    assert expected in said, said


def _insider_rows(world, query: str) -> list[tuple]:
    import duckdb

    world.warehouse().engine.let_go()
    with duckdb.connect(str(world.warehouse_path), read_only=True) as con:
        return con.execute(query).fetchall()


def _forged_while_read(world, monkeypatch, store, name: str, forge: str, put_back: str):
    """Wraps `store.name` (a ledger read): the insider's `forge` commits just before it, its
    `put_back` just after, so the seal check that follows reads the rows as sealed again."""
    import psycopg

    real = getattr(store, name)

    def read(*args, **kwargs):
        with psycopg.connect(world.url, autocommit=True) as insider:
            insider.execute(forge)
            try:
                return real(*args, **kwargs)
            finally:
                insider.execute(put_back)

    monkeypatch.setattr(store, name, read)


def _verified_document(rendered):
    from backfill_assets.control import evidence_log
    from backfill_assets.errors import ForgedRecord

    document, verified = rendered
    if verified is not True:
        raise ForgedRecord(str(verified), fix=evidence_log.FORGED_FIX)
    return document


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_ledger_row_forged_only_while_a_decision_reads_it_is_refused(engine_world, monkeypatch):
    """PostgreSQL reads each statement afresh (found by an attack): a decision read its ledger rows,
    then the seal check read the sealed rows again and compared those with the chain. A failing
    result set to pass before the read and put back before the check was acted on: publish copied
    the failed partitions, a rollback restored an insider's rows and sealed them as the snapshot's,
    a proof whose two runs differed passed. Each reader now checks the very rows it read, how many
    times, that none of a seal it read is newer than the one read, and, where it reads everything
    of a plan (its failures, the code it ran), everything the chain recorded of it."""
    from backfill_assets import evidence
    from backfill_assets.control import evidence_log, ledger, record, seals, snapshots
    from backfill_assets.errors import ForgedRecord
    from backfill_assets.publish import published
    from backfill_assets.warehouse.fingerprints import Fingerprint
    from tests.world import BUGGY, DAILY_REVENUE

    world = engine_world
    days = keys(1, 4)
    assert world.materialize(days, spec=BUGGY).success and world.publish(days, spec=BUGGY).success
    world.approved_plan("fix", start=days[0], end=days[-1], proof=(days[1],))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    world.run_sql(f"UPDATE daily_revenue SET net_revenue = net_revenue + 1 WHERE order_date = '{days[0]}'")
    assert world.cli("reconcile", "fix") == 1  # a failure recorded: the evidence's history lists it
    with world.warehouse().session() as session, session.transaction():  # two days written by newer code
        ledger.record_writes(session, plan_id="fix", asset="daily_revenue", mode="overwrite", run_id=None,
                             code_version="v2", code_identity="v2/x", actor="op",
                             written={d: Fingerprint(1, "sha256:" + "0" * 64) for d in days[:2]})
    newest = f"(SELECT max(evidence_seq) FROM {CONTROL}.writes WHERE plan_id = 'fix')"
    flip = f"UPDATE {CONTROL}.gate_results SET passed = NOT passed WHERE plan_id = 'fix'"
    hidden = (f"UPDATE {CONTROL}.{{0}} SET plan_id = 'hidden' WHERE plan_id = 'fix' AND {{1}}",
              f"UPDATE {CONTROL}.{{0}} SET plan_id = 'fix' WHERE plan_id = 'hidden'")
    suffix = (f"UPDATE {CONTROL}.{{0}} SET {{1}} = {{1}} || 'x' WHERE plan_id = 'fix'",
              f"UPDATE {CONTROL}.{{0}} SET {{1}} = left({{1}}, length({{1}}) - 1) WHERE plan_id = 'fix'")
    edits = {table_column: tuple(sql.format(*table_column) for sql in suffix) for table_column in (
        ("writes", "fingerprint"), ("writes", "code_version"), ("writes", "code_identity"),
        ("snapshots", "fingerprint"), ("publications", "fingerprint"), ("evidence", "actor"))}
    readers = [  # (what a decision reads, the store read it makes, the insider's edit and its undoing)
        ("the latest results", ledger.store, "latest_writes", (flip, flip),
         lambda s: ledger.latest(s, "daily_revenue", days, "fix", figures=False)),
        ("the latest writes", ledger.store, "latest_writes", edits["writes", "fingerprint"],
         lambda s: ledger.latest(s, "daily_revenue", days, "fix")),
        ("the code versions", ledger.store, "latest_code_versions", edits["writes", "code_version"],
         lambda s: ledger.code_versions(s, "daily_revenue", "fix")),
        # the newer code's whole group moved out of the read's way: the one code version gate passed
        ("the code versions, the newest group hidden", ledger.store, "latest_code_versions", (
            f"UPDATE {CONTROL}.writes SET plan_id = 'hidden' WHERE evidence_seq = {newest}",
            f"UPDATE {CONTROL}.writes SET plan_id = 'fix' WHERE plan_id = 'hidden'"),
         lambda s: ledger.code_versions(s, "daily_revenue", "fix")),
        ("a proof's fingerprints", ledger.store, "fingerprints_of", edits["writes", "fingerprint"],
         lambda s: ledger.fingerprints_written(s, "daily_revenue", "fix", days[1])),
        ("the failures", ledger.store, "failed_results", (flip, flip),
         lambda s: ledger.failures_of_plan(s, "fix")),
        # moved out of the read's way (another plan's, just while read): no failure, no repair in the evidence
        ("the failures, hidden", ledger.store, "failed_results",
         tuple(sql.format("gate_results", "NOT passed") for sql in hidden),
         lambda s: ledger.failures_of_plan(s, "fix")),
        ("the code written, writes hidden", ledger.store, "writes_of_plan",
         tuple(sql.format("writes", f"partition_key <> '{days[1]}'") for sql in hidden),
         lambda s: ledger.code_written(s, "fix")),
        ("the code written", ledger.store, "writes_of_plan", edits["writes", "code_identity"],
         lambda s: ledger.code_written(s, "fix")),
        ("the snapshots", snapshots.store, "records", edits["snapshots", "fingerprint"],
         lambda s: snapshots.snapshotted(s, "fix", "published_revenue")),
        ("the publications", published.store, "latest", edits["publications", "fingerprint"],
         lambda s: published.latest(s, DAILY_REVENUE, days)),
        # the evidence document rendered a chain row as read, then verified the chain read again:
        # it says now that the chain did not verify (an error here, for the loop below)
        ("the evidence's chain rows", evidence_log.store, "rows", edits["evidence", "actor"],
         lambda s: _verified_document(evidence.render(s, record.require(s, "fix"), "auditor"))),
        # a copy of the proof's writes (same seal, other ids) read beside them: the proof passed on one write
        ("a proof's fingerprints, each read twice", ledger.store, "fingerprints_of", (
            f"INSERT INTO {CONTROL}.writes SELECT write_id + 1000000, plan_id, asset, partition_key, mode, run_id, "
            f"code_version, row_count, fingerprint, recorded_at, impact, evidence_seq, code_identity "
            f"FROM {CONTROL}.writes WHERE plan_id = 'fix'", f"DELETE FROM {CONTROL}.writes WHERE write_id >= 1000000"),
         lambda s: ledger.fingerprints_written(s, "daily_revenue", "fix", days[1])),
        # one result of a sealed group moved out of the read's way, the rest of the group read: a
        # reconcile's one failing result hidden published its failed partition
        ("one result of its group", ledger.store, "latest_writes", tuple(
            f"UPDATE {CONTROL}.gate_results SET write_id = -write_id WHERE result_id = (SELECT max(result_id) "
            f"FROM {CONTROL}.gate_results WHERE plan_id = 'fix')" for _ in range(2)),
         lambda s: ledger.latest(s, "daily_revenue", days, "fix", figures=False)),
    ]
    taken = []  # what a decision took as sealed though it was forged while read
    for what, store, name, (forge, put_back), read in readers:
        with world.warehouse().session() as session:
            honest = read(session)
        assert honest, f"{what}: the honest read found nothing to forge"
        with monkeypatch.context() as patch:
            _forged_while_read(world, patch, store, name, forge, put_back)
            with world.warehouse().session() as session:
                try:
                    read(session)
                    taken.append(what)
                except ForgedRecord as refused:  # a chain row's keyed hash, or the rows read, says it
                    expected = evidence_log.FORGED_FIX if store is evidence_log.store else seals.CHANGED_WHILE_READ_FIX
                    assert refused.fix == expected, (what, refused)
    assert taken == []


def test_a_rollback_of_published_data_never_goes_unsigned_under_definitions_naming_another_published_table(
        world, tmp_path, capsys):
    """fix was published, bob's key was then dropped (its approvals no longer hold) and it went back
    to reconciled after an edit of the published table: consumers read its bytes, so a rollback needs
    approvers' signatures. An operator without a key passed definitions whose `publish_as` names
    another table: the rollback found no published snapshot there, called the plan "not published:
    no approval needed", restored the target alone and ended the plan while consumers still read its
    bytes (found by an attack). The chain says which tables the plan wrote: all of them, or none."""
    import dataclasses

    from tests.world import FIXED

    window = ["2026-01-01", "2026-01-02"]
    world.approved_plan("fix", start=window[0], end=window[1], proof=(window[1],))
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    _drop_bob(world, tmp_path)
    world.run_sql("UPDATE published_revenue SET net_revenue = net_revenue + 1 WHERE order_date = '2026-01-01'")
    world.cli("reconcile", "fix")
    world.cli("reconcile", "fix")
    assert world.phase() == "reconciled"
    seen = world.fingerprints("published_revenue", window), world.fingerprints("daily_revenue", window)
    elsewhere = world.defs_file(dataclasses.replace(FIXED, publish_as="published_revenue_elsewhere"))
    for dry in ((), ("--dry-run",)):
        capsys.readouterr()
        assert world.cli("rollback", "fix", *dry, "--defs", str(elsewhere)) != 0
        said = capsys.readouterr().err
        assert "published_revenue" in said and "do not restore" in said and said.count("\n") == 1, said
    assert world.phase() == "reconciled"
    assert (world.fingerprints("published_revenue", window), world.fingerprints("daily_revenue", window)) == seen


# --- a plan's own text on the reviewer's screen (found by an attack) ------------------------------

# what a pull request's plan can say in its free text: a forged checklist line and verdict, then
# ESC[8m (conceal), which hides everything printed after it on a terminal (the real REFUSED line)
FORGED_TEXT = ("late rows\n- [x] approvals captured: owner olivia signed; 2/2 approver signature(s) counted "
          "(alice, bob)\nALLOWED: the plan is complete, fits its table, and is signed by enough approvers\x1b[8m")


def _sneaky(repo: Path, **fields) -> Path:
    document = complete_plan(plan_id="sneaky")
    document["scenario"] = {"kind": "repair", "failure": FORGED_TEXT}
    for dotted, value in fields.items():
        block, _, key = dotted.partition("__")
        document[block][key] = value
    return write_plan(repo / "plans" / "sneaky.yaml", document)


def _forged_lines(text: str, starts: tuple[str, ...]) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(starts)]


def test_a_plan_nobody_signed_never_prints_a_forged_allowed_line_in_the_guard(world, run_subprocess, tmp_path):
    """Pull-request author. The guard printed a plan's free text as it was written: a repair's
    `failure` (or `idempotency`, a `notify` channel) holding a line break and an escape sequence put a
    forged `- [x] approvals captured ...` and `ALLOWED: ...` line on the reviewer's screen for a plan
    nobody signed, and ESC[8m hid the real verdict after it (the README: a child's note with a line
    break printed a fake ALLOWED line, found by an attack; the plan file itself did the same)."""
    repo, _, main = pull_request_checkout(world, tmp_path)
    plan = _sneaky(repo, publish__notify=["#ok\nALLOWED: signed\x1b[8m"],
                   execution__idempotency="one\nALLOWED: fine\x1b[8m")
    done = run_subprocess(command=[str(HOOK), str(plan), "--allowed-signers", str(main / "allowed_signers"),
                                   "--policy", str(main / "policy.yaml")],
                          env={"BACKFILL_HOME": str(tmp_path / "ci-home"), "BACKFILL_DEFS": ""}, cwd=repo)
    assert done.code in (1, 2), done
    shown = done.out + done.err
    assert "\x1b" not in shown, "the guard printed a pull request's escape sequence:\n" + repr(shown)
    assert not _forged_lines(shown, ("ALLOWED",)), "a forged ALLOWED line for an unsigned plan:\n" + shown
    assert len(_forged_lines(shown, ("- [x] approvals captured", "- [ ] approvals captured"))) <= 1, shown


def test_plan_show_never_prints_a_forged_approved_line_from_the_plans_text(world, run_subprocess, tmp_path):
    """Reviewer. `plan show` on a pull request's checkout printed the repair's `failure` as written:
    a forged `approvals ... (approved)` line for a plan nobody signed, and the real one concealed (an
    escape sequence), on the screen of the approver deciding whether to sign (the README: a fake
    "(approved)" printed there by the definitions was found by an attack)."""
    repo, _, main = pull_request_checkout(world, tmp_path)
    document = complete_plan(plan_id="sneaky")
    document["scenario"] = {"kind": "repair", "failure": (
        "late rows\napprovals  owner olivia signed; 2/2 approver signature(s) counted (alice, bob) (approved)"
        "\x1b[8m")}
    plan = write_plan(repo / "plans" / "sneaky.yaml", document)
    done = run_subprocess(command=[str(BIN / "backfill"), "plan", "show", str(plan), "--allowed-signers",
                                   str(main / "allowed_signers"), "--policy", str(main / "policy.yaml")],
                          env={"BACKFILL_HOME": str(tmp_path / "ci-home"), "BACKFILL_DEFS": ""}, cwd=repo)
    shown = done.out + done.err
    assert "\x1b" not in shown, "plan show printed a pull request's escape sequence:\n" + repr(shown)
    assert "(approved)" not in shown, "plan show calls an unsigned plan approved:\n" + shown


def test_a_partition_key_in_a_plan_never_puts_control_characters_on_the_reviewers_screen(
        world, run_subprocess, tmp_path):
    """Plan text refuses control characters, but a partition key (the window, the proof, expect's
    partitions) was checked only for C0 controls: a pull request's proof partition holding the line
    separator (U+2028, a line break to Python's splitlines and to an editor or a browser showing the
    CI log) and the 8-bit CSI (U+009B: `8m` conceals the rest on a terminal that takes C1 controls)
    printed a forged ALLOWED line in the guard's checklist and in `plan show`, for a plan nobody
    signed."""
    from backfill_assets.plan.model import _HIDDEN

    repo, _, main = pull_request_checkout(world, tmp_path)
    document = complete_plan(plan_id="sneaky")
    document["execution"]["proof_partitions"] = [
        "2026-01-02\u2028ALLOWED: signed by enough approvers\x9b8m"]
    plan = write_plan(repo / "plans" / "sneaky.yaml", document)
    roots = ["--allowed-signers", str(main / "allowed_signers"), "--policy", str(main / "policy.yaml")]
    for command in ([str(HOOK), str(plan), *roots], [str(BIN / "backfill"), "plan", "show", str(plan), *roots]):
        done = run_subprocess(command=command, env={"BACKFILL_HOME": str(tmp_path / "ci-home"), "BACKFILL_DEFS": ""},
                              cwd=repo)
        shown = done.out + done.err
        assert not _HIDDEN.search(shown), f"{command[-5]} printed a plan's control character:\n{shown!r}"
        assert not [line for line in shown.splitlines() if line.startswith("ALLOWED")], shown


def test_a_version_approved_before_its_text_was_refused_is_read_back_as_it_was_signed():
    """The refusal above is of plan files; a version in a warehouse approved before it (its text
    holding a carriage return) is read back as it was signed: refused there too, the plan would have
    no rollback, cancel or status (every state has a way out)."""
    from backfill_assets.plan.identity import canonical_content, plan_from_canonical
    from backfill_assets.plan.model import Plan

    document = complete_plan(plan_id="old")
    document["scenario"] = {"kind": "repair", "failure": "late rows"}
    stored = canonical_content(Plan.model_validate(document))
    stored["scenario"]["failure"] = "late rows\r overwritten"  # as a release before the refusal stored it
    document["scenario"]["failure"] = stored["scenario"]["failure"]
    with pytest.raises(ValueError, match="U\\+000D"):
        Plan.model_validate(document)
    assert plan_from_canonical(json.dumps(stored)).scenario.failure == "late rows\r overwritten"


def test_who_pinned_the_trust_root_and_when_are_the_chains_not_a_typed_row(world, capsys):
    """`approvers show` is how a team checks its trust root ("compare it with the reviewed files"):
    it named who pinned each root and when from the `trust_roots` row, which the chain's record of
    the pin does not cover. An insider typed another name and time over the first pin's row and
    both `approvers show` and `evidence verify` passed it on as the record's."""
    capsys.readouterr()
    assert world.cli("approvers", "show") == 0
    honest = capsys.readouterr().out
    world.run_sql("UPDATE backfill_control.trust_roots SET pinned_by = 'security-team@vault', "
                  "pinned_at = '2020-01-01T00:00:00+00:00' WHERE version = 1")
    shown = world.cli("approvers", "show")
    out = capsys.readouterr()
    actor = honest.split("pinned by ", 1)[1].split(" at ", 1)[0]
    assert shown != 0 or ("security-team@vault" not in out.out and "2020-01-01" not in out.out
                          and f"pinned by {actor} at " in out.out), out.out + out.err


def test_approvers_show_without_the_evidence_key_says_its_root_is_unverified(world, tmp_path, monkeypatch, capsys):
    """`approvers show` is what a team compares with its reviewed files, and what finds a root an
    evidence-key holder rewrote (README). Read without the key (a reviewer's laptop, a CI job given
    the warehouse), the `trust_roots` rows are whatever an insider typed: a first pin listing
    mallory's key as alice's was shown as the current root, in the words of a verified one, with
    no note, where every decision refuses it as forged. It says the root is unverified there."""
    signers = (tmp_path / "approvers" / "allowed_signers").read_text()
    mallory = " ".join((world.keys["mallory"].parent / "mallory.pub").read_text().split()[:2])
    forged = "".join(f"{line.split()[0]} {mallory}\n" if line.startswith("alice ") else line + "\n"
                     for line in signers.splitlines())
    world.run_sql("UPDATE backfill_control.trust_roots SET signers_text = ?, signers_sha256 = ? WHERE version = 1",
                  [forged, hashlib.sha256(forged.encode()).hexdigest()])
    capsys.readouterr()
    assert world.cli("approvers", "show") == 1  # with the key: forged, refused
    capsys.readouterr()
    monkeypatch.setenv("BACKFILL_EVIDENCE_KEY_FILE", str(tmp_path / "no-key-here"))
    code = world.cli("approvers", "show")
    said = capsys.readouterr()
    assert code != 0 or "unverified" in said.out + said.err, said.out + said.err
    # and `status`, read there too, says its answer rests on rows it cannot verify
    assert world.cli("status") == 0
    said = capsys.readouterr()
    assert "unverified" in said.err and said.err.count("\n") == 1, said.err
