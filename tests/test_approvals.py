"""Issue 9: what an approval is, who gave it, and that it lands exactly once whatever happens.

Approvals are SSH signatures over the plan's sha256 by canonical ASCII principals listed in the
reviewed allowed_signers file. Signatures in the plan file are checked here with `ssh-keygen -Y
verify` itself, so the file is judged by OpenSSH, not by our own verifier. Processes are real where
they matter: two approvals at once, kill -9 mid-approval, a webhook that answers slowly.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import pwd
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.loading import load_plan
from backfill_assets.signing.sshsig import sign
from backfill_assets.signing.statements import PLAN_REPLACEMENT, Statement
from tests.conftest import BIN, Result
from tests.plans import complete_plan, edited, write_plan
from tests.world import DEMO_DEFS

CONTROL = "backfill_control"
CRASH_POINTS = ("approve.before_commit", "approve.after_commit", "approve.after_mirror")


# --- helpers --------------------------------------------------------------------------------------

def approve(world, path: Path, name: str, key: str | None = None) -> int:
    """`backfill plan approve` in-process, signing with `key`'s SSH key (default: the name's own)."""
    return world.cli("plan", "approve", str(path), "--by", name, "--key", str(world.keys[key or name]))


def granted(path: Path) -> list[dict]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))["approvals"]["granted"] or []


def sha_of(path: Path) -> str:
    return plan_sha256(load_plan(path))


def _armor(one_line: str) -> str:
    body = "".join(one_line.split())
    return "\n".join(["-----BEGIN SSH SIGNATURE-----", *(body[i:i + 70] for i in range(0, len(body), 70)),
                      "-----END SSH SIGNATURE-----"]) + "\n"


def openssh_verified(world, path: Path) -> list[str]:
    """Principals with an entry in the file that OpenSSH accepts for the statement it records, bound
    to the plan's current sha256 (each principal once)."""
    from backfill_assets.signing.statements import PLAN_APPROVAL, PLAN_REPLACEMENT, Statement

    sha = sha_of(path)
    found = set()
    for i, entry in enumerate(granted(path)):
        if entry.get("plan_sha256") != sha or "code" not in entry:
            continue
        fields = {"plan": sha, "code": entry["code"], "warehouse": entry["warehouse"]}
        if "replaces" in entry:  # a `plan replacement` statement: it names the plan of record it replaces
            fields["replaces"] = entry["replaces"]
        statement = Statement.make(PLAN_REPLACEMENT if "replaces" in entry else PLAN_APPROVAL,
                                   signed=_moment(entry["at"]), expires=_moment(entry["expires"]), **fields)
        sig = world.root / f".entry-{i}.sig"
        sig.write_text(_armor(str(entry["signature"])))
        checked = subprocess.run(
            ["ssh-keygen", "-Y", "verify", "-f", str(world.root / "approvers" / "allowed_signers"),
             "-I", str(entry["by"]), "-n", "backfill-plan", "-s", str(sig)],
            input=statement.message, capture_output=True)
        if checked.returncode == 0:
            found.add(str(entry["by"]))
    return sorted(found)


def _moment(value):
    import datetime as dt

    return value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def recorded(world, plan_id: str, sha: str | None = None) -> list[str]:
    """Principals in the control record's approvals of the plan (of one version when `sha` is given),
    each once (an approver who signs again records a second signature)."""
    query = f"SELECT DISTINCT principal FROM {CONTROL}.approvals WHERE plan_id = ?"
    params: list = [plan_id]
    if sha is not None:
        query, params = query + " AND sha256 = ?", [plan_id, sha]
    return sorted(r[0] for r in world.sql(query + " ORDER BY principal", params))


def approved_sha(world, plan_id: str) -> str | None:
    found = world.sql(f"SELECT approved_sha256 FROM {CONTROL}.plans WHERE plan_id = ?", [plan_id])
    return found[0][0] if found else None


def notices(world, plan_id: str) -> list[tuple]:
    return world.sql(f"SELECT notice_id, event, attempts, last_error, delivered_at, webhook_url "
                     f"FROM {CONTROL}.outbox WHERE plan_id = ? ORDER BY notice_id", [plan_id])


def write_named_plan(world, name: str, **changes) -> Path:
    """A complete plan in <tmp>/plans with `a__b` keys changed (see tests.plans.edited)."""
    window = {k: changes.pop(k) for k in ("start", "end", "proof") if k in changes}
    document = edited(complete_plan(plan_id=name, **window), **changes)
    return write_plan(world.root / "plans" / f"{name}.yaml", document)


def environment(world, extra: dict[str, str] | None = None) -> dict[str, str]:
    """What the `cli` fixture gives a subprocess."""
    return {**os.environ, "BACKFILL_HOME": str(world.home), "PYTHONWARNINGS": "ignore",
            "BACKFILL_DEFS": DEMO_DEFS, **(extra or {})}


@pytest.fixture
def spawn(world, cli_server):
    """Start a `backfill` command in the background, as the `cli` fixture runs it (a child of the
    worker's CLI server), or `command` as it is; whatever still runs when the test ends is killed."""
    started: list = []

    def start(*args: str, env: dict[str, str] | None = None, command: list[str] | None = None,
              **popen):
        if command is None and not popen:
            process = cli_server.start([str(BIN / "backfill"), "--home", str(world.home), *args],
                                       environment(world, env), world.root)
        else:
            process = subprocess.Popen(command or [str(BIN / "backfill"), "--home", str(world.home), *args],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       env=environment(world, env), cwd=world.root, **popen)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def finish(process) -> Result:
    out, err = process.communicate(timeout=240)
    return Result(process.returncode, out, err)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Webhook:
    """A real HTTP receiver on 127.0.0.1. With `hold`, each answer waits for `release` (at most
    `hold` seconds): a slow receiver whose slowness the test can end."""

    def __init__(self, port: int, hold: float = 0.0) -> None:
        self.port, self.hold = port, hold
        self.bodies: list[dict] = []
        self.received, self.release = threading.Event(), threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                hook.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                hook.received.set()
                if hook.hold:
                    hook.release.wait(hook.hold)
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/notices"


@contextmanager
def serving(port: int, hold: float = 0.0) -> Iterator[Webhook]:
    hook = Webhook(port, hold)
    thread = threading.Thread(target=hook.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        hook.release.set()
        hook.server.shutdown()
        hook.server.server_close()
        thread.join(timeout=10)


# --- 1. identities are canonical ------------------------------------------------------------------

def test_invisible_characters_in_the_approver_name_are_refused_and_nothing_is_recorded(world, capsys):
    path = world.plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    assert approve(world, path, "alice") == 0
    capsys.readouterr()
    file_before = path.read_bytes()
    evidence_before = world.sql(f"SELECT count(*) FROM {CONTROL}.evidence")
    for name, key, codepoint in (("alice\u200b", "alice", "U+200B"), ("oli\u00advia", "bob", "U+00AD")):
        assert world.cli("plan", "approve", str(path), "--by", name, "--key", str(world.keys[key])) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("backfill: "), err
        assert codepoint in err and "invisible" in err, err
        assert "Traceback" not in err
    assert path.read_bytes() == file_before
    assert recorded(world, "fix") == ["alice"]
    assert world.sql(f"SELECT count(*) FROM {CONTROL}.evidence") == evidence_before


def test_a_full_width_name_is_the_same_approver_and_counts_once(world, capsys):
    path = world.plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    assert approve(world, path, "alice") == 0
    capsys.readouterr()
    full_width = "\uff41\uff4c\uff49\uff43\uff45"  # ａｌｉｃｅ
    assert world.cli("plan", "approve", str(path), "--by", full_width, "--key", str(world.keys["alice"])) == 0
    out = capsys.readouterr().out
    assert "alice signed fix" in out and "1/2 approver signature(s) counted (alice)" in out, out
    assert recorded(world, "fix") == ["alice"]
    assert {g["by"] for g in granted(path)} == {"alice"}
    assert openssh_verified(world, path) == ["alice"]
    assert world.phase("fix") == "drafted"  # one person twice is still one approval of two


def test_an_owner_spelled_with_a_cyrillic_letter_makes_the_plan_invalid(tmp_path, run_cli, ssh_keys, home):
    path = write_plan(tmp_path / "plans" / "fix.yaml", complete_plan(plan_id="fix"))
    path.write_text(path.read_text().replace("owner: olivia\n", "owner: \u043elivia\n"), encoding="utf-8")
    result = run_cli("plan", "validate", str(path))
    assert result.code == 1
    problems = [line for line in result.err.splitlines() if line.startswith("  - ")]
    assert len(problems) == 1, result.err
    assert problems[0].startswith("  - owner ") and "U+043E" in problems[0], result.err
    # nor can it be approved: nothing is recorded for a plan whose owner is not a principal
    refused = run_cli("plan", "approve", str(path), "--by", "alice", "--key", str(ssh_keys["alice"]))
    assert refused.code == 1 and "owner" in refused.err
    assert not (home / "warehouse.duckdb").exists()


# --- 2. one key, one value ------------------------------------------------------------------------

def test_a_second_owner_key_is_a_duplicate_key_everywhere(tmp_path, run_cli, ssh_keys, home):
    path = write_plan(tmp_path / "plans" / "fix.yaml", complete_plan(plan_id="fix"))
    path.write_text(path.read_text() + "owner: mallory\n", encoding="utf-8")
    text = path.read_text()
    for command in (("plan", "validate", str(path)), ("guard", str(path)),
                    ("plan", "approve", str(path), "--by", "alice", "--key", str(ssh_keys["alice"]))):
        result = run_cli(*command)
        assert result.code == 2, (command, result)
        assert result.err.count("\n") == 1 and "duplicate key `owner`" in result.err, (command, result.err)
    assert path.read_text() == text
    assert not (home / "warehouse.duckdb").exists()


# --- 3. entries that are not signatures by their principal are void ------------------------------

def _ssh_keygen_sign(key: Path, message: str, cwd: Path) -> str:
    signed = subprocess.run(["ssh-keygen", "-Y", "sign", "-f", str(key), "-n", "backfill-plan"],
                            input=message.encode("ascii"), capture_output=True, cwd=cwd, check=True)
    return signed.stdout.decode()


def _one_line(armored: str) -> str:
    return "".join(line for line in armored.splitlines() if not line.startswith("-----"))


def test_hand_typed_and_impersonating_entries_are_void_with_or_without_a_record(world, cli, capsys):
    from backfill_assets.control import trust_record
    from backfill_assets.demo.revenue import DAILY_REVENUE
    from backfill_assets.plan.approvals import append_approval_text, entry_of, plan_statement
    from backfill_assets.signing import sshsig

    path = world.plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    assert approve(world, path, "alice") == 0  # the control record exists from here on
    assert approve(world, path, "bob", key="mallory") == 1  # the command refuses what the file must void
    assert "does not list for bob" in capsys.readouterr().err
    with world.warehouse().session() as session:
        root = trust_record.require(session)
    statement = plan_statement(load_plan(path), root, DAILY_REVENUE.code_identity)
    fake = base64.b64encode(b"SSHSIG\x00\x00\x00\x01" + b"typed by hand" * 5).decode()
    by_mallory = sshsig.one_line(sshsig.sign(statement.message, world.keys["mallory"]))
    for who, sig in (("carol", fake), ("bob", by_mallory)):  # typed by hand; mallory's key, claiming bob
        path.write_text(append_approval_text(path.read_text(), entry_of(who, statement, sig)))
    assert [g["by"] for g in granted(path)] == ["alice", "carol", "bob"]
    assert openssh_verified(world, path) == ["alice"]

    with_record = cli("guard", str(path))
    fresh = world.root / "elsewhere"  # a machine that never saw the warehouse: a CI job naming the files
    without_record = cli("guard", str(path), "--home", str(fresh), "--allowed-signers",
                         str(world.root / "approvers" / "allowed_signers"), "--warehouse", root.warehouse_id,
                         env={"BACKFILL_HOME": str(fresh)})
    assert not (fresh / "warehouse.duckdb").exists()
    lines = []
    for result in (with_record, without_record):
        assert result.code == 1, result
        line = next(x for x in result.out.splitlines() if "approvals captured" in x)
        assert line.startswith("- [ ] approvals captured: owner olivia has not signed; 1/2 approver signature(s) "
                               "counted (alice); needs "), line
        assert "carol (signature refused" in line
        assert "bob (signature refused: signed by key" in line and "does not list for bob" in line
        assert "REFUSED" in result.out
        lines.append(line)
    assert lines[0].split("; void:")[0] == lines[1].split("; void:")[0]  # the same count with or without

    assert world.cli("plan", "show", str(path)) == 0
    shown = capsys.readouterr().out
    assert "approvals  owner olivia has not signed; 1/2 approver signature(s) counted (alice); needs" in shown
    assert re.search(r"^  void     carol: signature refused", shown, re.M)
    assert re.search(r"^  void     bob: .*does not list for bob", shown, re.M)
    assert recorded(world, "fix") == ["alice"]  # the void entries never reached the record

    # the impersonation does not lock bob out: his own signature counts beside the void entry
    assert approve(world, path, "bob") == 0
    assert approve(world, path, "olivia") == 0
    assert recorded(world, "fix") == ["alice", "bob", "olivia"] and world.phase("fix") == "approved"
    assert openssh_verified(world, path) == ["alice", "bob", "olivia"]
    capsys.readouterr()
    assert world.cli("plan", "show", str(path)) == 0
    assert "2/2 approver signature(s) counted (alice, bob)" in capsys.readouterr().out


# --- 4. an approval signed offline with ssh-keygen ------------------------------------------------

@pytest.mark.separate_processes
def test_an_approval_signed_offline_with_ssh_keygen_counts(world, capsys):
    path = world.plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    assert world.cli("plan", "show", str(path)) == 0
    shown = capsys.readouterr().out
    sha = re.search(r"^sha256     (\S+)$", shown, re.M).group(1)
    assert re.fullmatch(r"[0-9a-f]{64}", sha) and sha == sha_of(path)
    command = re.search(r"^to sign    (.+)$", shown, re.M).group(1)
    assert command.startswith(f"backfill plan statement {path} > statement.txt && ssh-keygen -Y sign -f ")
    # exactly the printed commands, with bob's key in place of the placeholder path
    command = command.replace("~/.ssh/id_ed25519", shlex.quote(str(world.keys["bob"])))
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "BACKFILL_HOME": str(world.home)}
    subprocess.run(["bash", "-c", command], cwd=world.root, check=True, capture_output=True, env=env)
    signature = world.root / "statement.txt.sig"
    assert signature.read_text().startswith("-----BEGIN SSH SIGNATURE-----\n")
    then = re.search(r"^then       (.+?)   \(", shown, re.M).group(1).split()
    assert then[:3] == ["backfill", "plan", "approve"]
    args = [a.replace("NAME", "bob").replace("statement.txt", str(world.root / "statement.txt")) for a in then[3:]]
    assert world.cli("plan", "approve", *args) == 0
    assert "bob signed fix" in capsys.readouterr().out
    assert recorded(world, "fix") == ["bob"]
    assert openssh_verified(world, path) == ["bob"]
    fingerprint = subprocess.run(["ssh-keygen", "-lf", str(world.keys["bob"]) + ".pub"], capture_output=True,
                                 text=True, check=True).stdout.split()[1]
    assert world.sql(f"SELECT key_fingerprint FROM {CONTROL}.approvals") == [(fingerprint,)]
    assert approve(world, path, "alice") == 0 and approve(world, path, "olivia") == 0
    assert world.phase("fix") == "approved" and approved_sha(world, "fix") == sha


# --- 5. two approvals at once ---------------------------------------------------------------------

def test_two_approvals_at_once_both_land_in_the_file_and_the_record(world, spawn):
    """Three plans, each approved by alice and bob at the same moment: six processes racing."""
    plans = {f"race{i}": world.plan(f"race{i}", start=f"2026-01-0{2 * i + 1}", end=f"2026-01-0{2 * i + 2}",
                                    proof=(f"2026-01-0{2 * i + 1}",)) for i in range(3)}
    for path in plans.values():
        assert approve(world, path, "olivia") == 0  # the owner signs first
    started = [(name, spawn("plan", "approve", str(path), "--by", who, "--key", str(world.keys[who])))
               for name, path in plans.items() for who in ("alice", "bob")]
    for name, process in started:
        result = finish(process)
        assert result.code == 0, (name, result)
    for name, path in plans.items():
        assert openssh_verified(world, path) == ["alice", "bob", "olivia"], (name, path.read_text())
        assert len(granted(path)) == 3, name
        assert recorded(world, name, sha_of(path)) == ["alice", "bob", "olivia"], name
        assert world.phase(name) == "approved" and approved_sha(world, name) == sha_of(path), name
        assert [n[1] for n in notices(world, name)] == ["frozen"], name


# --- 6. kill -9 at every step of approve ----------------------------------------------------------

def test_a_kill_at_any_step_of_approve_converges_on_retry(world, cli, capsys):
    """bob's approval completes each plan; its process is killed at one step, then he runs it again."""
    plans = {point: world.plan(point.split(".")[1].replace("_", "-"), start=f"2026-01-0{2 * i + 1}",
                               end=f"2026-01-0{2 * i + 2}", proof=(f"2026-01-0{2 * i + 1}",))
             for i, point in enumerate(CRASH_POINTS)}
    for path in plans.values():
        assert approve(world, path, "olivia") == 0 and approve(world, path, "alice") == 0
    before = {point: path.read_bytes() for point, path in plans.items()}
    for point, path in plans.items():
        crashed = cli("plan", "approve", str(path), "--by", "bob", "--key", str(world.keys["bob"]),
                      env={"BACKFILL_CRASH_AT": point})
        assert crashed.code == -signal.SIGKILL, (point, crashed)

    for point, path in plans.items():
        name, sha = load_plan(path).plan_id, sha_of(path)
        # the file is the old one or holds a valid entry; the record committed or not, never half
        in_record = recorded(world, name, sha)
        if point == "approve.after_mirror":
            assert openssh_verified(world, path) == ["alice", "bob", "olivia"], point
        else:
            assert path.read_bytes() == before[point], point
        assert in_record == (["alice", "olivia"] if point == "approve.before_commit"
                             else ["alice", "bob", "olivia"]), point
        assert world.phase(name) == ("drafted" if point == "approve.before_commit" else "approved"), point
        assert not list(path.parent.glob(".*.tmp")), point

        capsys.readouterr()
        assert approve(world, path, "bob") == 0, (point, capsys.readouterr())  # never locked out
        assert recorded(world, name, sha) == ["alice", "bob", "olivia"], point
        assert openssh_verified(world, path) == ["alice", "bob", "olivia"], point
        assert sorted({g["by"] for g in granted(path)}) == ["alice", "bob", "olivia"], point
        # every recorded signature is in the file, once
        assert len(granted(path)) == world.sql(f"SELECT count(*) FROM {CONTROL}.approvals WHERE sha256 = ?",
                                               [sha])[0][0], point
        assert world.phase(name) == "approved" and approved_sha(world, name) == sha, point
        assert [n[1] for n in notices(world, name)] == ["frozen"], point  # announced once
    assert world.cli("evidence", "verify") == 0, capsys.readouterr()


# --- 7. notices leave after the commit, and without the warehouse ---------------------------------

SLOW_SECONDS = 8.0


PROBE = f"""
import sys, duckdb
print("ready", flush=True)
sys.stdin.readline()
con = duckdb.connect(sys.argv[1])  # read-write: fails at once while another process holds the file
print(con.execute("SELECT event, delivered_at FROM {CONTROL}.outbox").fetchall())
"""


def test_a_slow_webhook_does_not_hold_the_warehouse(world, spawn):
    port = free_port()
    probe = spawn(command=[str(BIN / "python"), "-c", PROBE, str(world.warehouse_path)],
                  stdin=subprocess.PIPE)
    assert probe.stdout.readline() == "ready\n"
    with serving(port, hold=SLOW_SECONDS) as hook:
        path = write_named_plan(world, "fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",),
                                publish__webhook_url=hook.url)
        assert approve(world, path, "olivia") == 0 and approve(world, path, "alice") == 0
        completing = spawn("plan", "approve", str(path), "--by", "bob", "--key", str(world.keys["bob"]))
        assert hook.received.wait(120), finish(completing)
        # the approval committed and its CLI now waits on the receiver: the warehouse is free meanwhile
        status = spawn("status", "fix")
        out, err = probe.communicate("go\n", timeout=60)
        assert probe.returncode == 0, err
        assert out.strip() == "[('frozen', None)]"  # queued in the commit, delivered after it
        assert completing.poll() is None, "the approving CLI stopped waiting on the webhook too early"
        hook.release.set()  # the receiver answers now
        shown = finish(status)
        assert shown.code == 0 and "plan       fix: approved" in shown.out, shown
        assert "waiting for the warehouse lock" not in shown.err, shown.err
        done = finish(completing)
        assert done.code == 0 and "approved: it is the plan of record" in done.out, done
    [(notice_id, event, attempts, last_error, delivered_at, url)] = notices(world, "fix")
    assert (event, attempts, last_error, url) == ("frozen", 1, None, hook.url)
    assert delivered_at is not None
    assert [(b["notice_id"], b["event"], b["plan_id"]) for b in hook.bodies] == [(notice_id, "frozen", "fix")]


def test_a_dead_webhook_keeps_the_notice_until_a_later_relay_delivers_it(world, capsys):
    from backfill_assets.control.outbox import relay

    port = free_port()  # nothing listens here yet
    url = f"http://127.0.0.1:{port}/notices"
    path = write_named_plan(world, "fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",),
                            publish__webhook_url=url)
    assert approve(world, path, "olivia") == 0 and approve(world, path, "alice") == 0
    assert approve(world, path, "bob") == 0  # a dead receiver never fails the approval
    assert "approved: it is the plan of record" in capsys.readouterr().out
    [(notice_id, event, attempts, last_error, delivered_at, _)] = notices(world, "fix")
    assert (event, attempts, delivered_at) == ("frozen", 1, None)
    assert last_error and "refused" in last_error.lower(), last_error
    with serving(port) as hook:
        assert relay(world.warehouse()) == []  # backing off: retried once its next attempt is due
        world.run_sql("UPDATE backfill_control.outbox_retries SET next_attempt_at = 0")  # that time passes
        delivered = relay(world.warehouse())  # what the CLI after a command and the relay sensor's tick run
        assert [(d.notice_id, d.ok) for d in delivered] == [(notice_id, True)]
        assert [b["notice_id"] for b in hook.bodies] == [notice_id]
    [(_, _, attempts, last_error, delivered_at, _)] = notices(world, "fix")
    assert attempts == 2 and last_error is None and delivered_at is not None
    with serving(port) as hook:
        assert relay(world.warehouse()) == [] and hook.bodies == []  # delivered once, not again


# --- 8. the actor is who ran the command ----------------------------------------------------------

def _os_actor() -> str:
    return f"{pwd.getpwuid(os.geteuid()).pw_name}@{socket.gethostname()}"


def _approval_evidence(world) -> list[tuple[str, dict]]:
    return [(actor, json.loads(payload)) for actor, payload in world.sql(
        f"SELECT actor, payload FROM {CONTROL}.evidence WHERE kind = 'approval' ORDER BY seq")]


def test_the_recorded_actor_is_the_os_user_not_the_approver(world, monkeypatch):
    monkeypatch.setenv("BACKFILL_ACTOR", "mallory@laptop")  # the removed override must not come back
    path = world.plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    assert approve(world, path, "alice") == 0
    [(actor, payload)] = _approval_evidence(world)
    assert actor == _os_actor() and payload["principal"] == "alice"
    assert world.sql(f"SELECT principal, actor FROM {CONTROL}.approvals") == [("alice", _os_actor())]
    assert {a for (a,) in world.sql(f"SELECT DISTINCT actor FROM {CONTROL}.evidence")} == {_os_actor()}


def test_the_recorded_actor_ignores_user_name_variables(world, monkeypatch):
    """LOGNAME and USER are free text like --by: the actor comes from the process's uid."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "mallory")
    path = world.plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    assert approve(world, path, "alice") == 0
    [(actor, payload)] = _approval_evidence(world)
    assert payload["principal"] == "alice"
    assert actor == _os_actor(), actor


# --- 9. an edited plan needs its own approvals ----------------------------------------------------

def test_an_edited_plan_becomes_the_plan_of_record_only_with_its_own_approvals(world):
    path = world.approved_plan("fix", start="2026-01-01", end="2026-01-03", proof=("2026-01-02",))
    first = sha_of(path)
    assert world.phase("fix") == "approved" and approved_sha(world, "fix") == first
    path.write_text(path.read_text().replace("partitions_per_run: 2", "partitions_per_run: 3"))
    second = sha_of(path)
    assert second != first
    assert openssh_verified(world, path) == []  # the old entries name the old hash

    # signatures that replace a plan of record (`World.approve_replacing`: `plan replacement`
    # statements naming its adoption, as `backfill plan statement` prints them now)
    world.approve_replacing(path, "carol", "alice", owner=False)
    versions = {r[0] for r in world.sql(f"SELECT sha256 FROM {CONTROL}.plan_versions WHERE plan_id = 'fix'")}
    assert versions == {first, second}
    assert approved_sha(world, "fix") == first and world.phase("fix") == "approved"  # the owner has not signed
    assert recorded(world, "fix", second) == ["alice", "carol"]

    world.approve_replacing(path, "olivia", owner=False)
    assert approved_sha(world, "fix") == second and world.phase("fix") == "approved"
    assert recorded(world, "fix", first) == ["alice", "bob", "olivia"]
    assert recorded(world, "fix", second) == ["alice", "carol", "olivia"]
    assert openssh_verified(world, path) == ["alice", "carol", "olivia"]
    assert [n[1] for n in notices(world, "fix")] == ["frozen"]  # already frozen: not announced again


def test_approvals_checked_against_an_approvers_file_of_ones_own_are_refused(world, run_cli, tmp_path):
    """One person with two keys of their own and a signers file naming them alice and bob."""
    from tests.world import make_keys, signers_text

    world.approved_plan("first", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    mallory = make_keys(tmp_path / "mallory")
    forged = tmp_path / "mallory" / "allowed_signers"
    forged.write_text(signers_text(mallory))
    path = world.plan("evil", start="2026-01-05", end="2026-01-06", proof=("2026-01-05",))
    for name in ("alice", "bob"):
        refused = run_cli("plan", "approve", str(path), "--by", name, "--key", str(mallory[name]),
                          "--allowed-signers", str(forged))
        assert refused.code == 1, refused
        assert "is not the pinned allowed_signers" in refused.err and refused.err.count("\n") == 1
    assert world.phase("evil") is None  # nothing recorded
    assert "plan_sha256" not in path.read_text()

    shown = run_cli("approvers", "show")
    assert shown.code == 0 and "trust root v1" in shown.out and "pinned by" in shown.out

    # re-pinning her own file takes the pinned approvers' signatures, which she does not have
    repinned = run_cli("approvers", "pin", str(forged), "--sign", f"alice={mallory['alice']}",
                       "--sign", f"bob={mallory['bob']}")
    assert repinned.code == 1 and "needs 2 signature(s)" in repinned.err, repinned
    first = world.root / "plans" / "first.yaml"
    assert run_cli("guard", str(first)).code == 0
    guarded = run_cli("guard", str(first), "--allowed-signers", str(forged))  # CI reading her file
    assert guarded.code == 1 and "differ from the pinned trust root" in guarded.out, guarded.out


def test_init_pins_the_approvers_file_it_is_given_once(world, run_cli, tmp_path):
    from tests.world import make_keys, signers_text

    team_file = world.root / "approvers" / "allowed_signers"
    done = run_cli("init", "--allowed-signers", str(team_file))  # the world pinned it as init does
    assert done.code == 0 and done.out.startswith("already pinned: trust root v1 "), done
    others = make_keys(tmp_path / "others")
    forged = tmp_path / "others" / "allowed_signers"
    forged.write_text(signers_text(others))
    again = run_cli("init", "--allowed-signers", str(forged))  # init never replaces a pinned root
    assert again.code == 1 and "approvers pin" in again.err and again.err.count("\n") == 1, again
    missing = run_cli("init", "--allowed-signers", str(tmp_path / "nope"))
    assert missing.code != 0 and "does not exist" in missing.err and missing.err.count("\n") == 1
    fresh = tmp_path / "fresh"
    first = run_cli("--home", str(fresh), "init", "--allowed-signers", str(team_file))
    assert first.code == 0 and first.out.startswith("pinned trust root v1 "), first


def test_one_key_listed_under_two_names_counts_once(world, run_cli, tmp_path):
    from backfill_assets.cli.approvers_cmd import load_files
    from backfill_assets.control import trust_record
    from backfill_assets.demo.revenue import DAILY_REVENUE
    from backfill_assets.plan.approvals import append_approval_text, entry_of, plan_statement
    from backfill_assets.signing import sshsig
    from backfill_assets.trust.root import Candidate

    signers = world.root / "approvers" / "allowed_signers"
    alice_key = (world.keys["alice"].parent / "alice.pub").read_text().split()[:2]
    signers.write_text(signers.read_text() + f"mallory {' '.join(alice_key)}\n")
    with world.warehouse().session() as session:  # the team re-pins the file, with its quorum
        root = trust_record.require(session)
        new_signers, policy = load_files(str(signers), None, root.policy)
        change = trust_record.change_statement(root, new_signers, policy)
        with session.transaction():
            trust_record.repin(session, new_signers, policy, [
                Candidate(who, change.text, sshsig.sign(change.message, world.keys[who])) for who in ("bob", "carol")],
                "test")
    path = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    assert run_cli("plan", "approve", str(path), "--by", "alice", "--key", str(world.keys["alice"])).code == 0
    twin = run_cli("plan", "approve", str(path), "--by", "mallory", "--key", str(world.keys["alice"]))
    assert twin.code == 1 and "a key counts once" in twin.err and twin.err.count("\n") == 1, twin
    assert world.phase("fix") == "drafted"
    # the same two entries written into the file by hand: the guard counts one
    with world.warehouse().session() as session:
        root = trust_record.require(session)
    statement = plan_statement(load_plan(path), root, DAILY_REVENUE.code_identity)
    path.write_text(append_approval_text(path.read_text(), entry_of(
        "mallory", statement, sshsig.one_line(sshsig.sign(statement.message, world.keys["alice"])))))
    guarded = run_cli("guard", str(path))
    assert guarded.code == 1 and "1/2 approver signature(s) counted (alice)" in guarded.out, guarded.out
    assert "a key counts once" in guarded.out


# --- a superseded version ---------------------------------------------------------------------------

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
    """alice and bob sign v1 over statements dated 10 min 25 s ahead (a laptop clock running 25 s
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
    margin = 25
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
    capsys.readouterr()
    assert world.cli("plan", "show", str(v2)) == 0
    shown = capsys.readouterr().out
    guard = world.cli("guard", str(v2))
    guarded = capsys.readouterr().out
    assert guard != 0 and "ALLOWED" not in guarded, guarded
    assert "(approved)" not in shown, shown


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
    failed = {k: v for k, v in results.items() if "evidence key" in v[2] or (k.startswith("guard") and not v[1])}
    assert not failed, failed
    assert all(c == 0 for k, (c, _, _) in results.items() if not k.startswith("guard")), results


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
    capsys.readouterr()
    assert world.cli("plan", "show", str(v2)) == 0
    shown = capsys.readouterr().out
    guard = world.cli("guard", str(v2))
    guarded = capsys.readouterr().out
    assert guard != 0 and "ALLOWED" not in guarded, guarded
    assert "(approved)" not in shown, shown
    assert "cannot replace it" in guarded, guarded


def test_a_run_refused_for_the_replaced_versions_bar_says_why_more_are_needed(world, capsys):
    """v1 asks for three approvers; v2 (`required: 2`) replaced it on three, one of which expires: runs
    are refused "needs 1 more", which v2's file does not explain (found by an attack); the refusal
    names the plan of record that asks for more."""
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
    signed = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(days=14) + dt.timedelta(seconds=10)
    short = Statement.make(printed.kind, signed=signed, expires=signed + dt.timedelta(days=14),
                           **dict(printed.values))
    out = world.root / "short"
    out.mkdir()
    (out / "statement.txt").write_text(short.text)
    (out / "carol.sig").write_text(sign(short.message, world.keys["carol"]))
    assert world.cli("plan", "approve", str(v2), "--by", "carol", "--statement", str(out / "statement.txt"),
                     "--signature", str(out / "carol.sig")) == 0
    world.approve_replacing(v2, "alice", "bob")
    time.sleep(max(0.0, (short.expires - dt.datetime.now(dt.UTC)).total_seconds() + 1))
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
