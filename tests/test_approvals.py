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
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.loading import load_plan
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
    from backfill_assets.signing.statements import PLAN_APPROVAL

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
    assert len(result.err.splitlines()) == 1, result.err  # one problem, one line
    assert result.err.startswith(f"backfill: {path}: owner ") and "U+043E" in result.err, result.err
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


def test_hand_typed_and_impersonating_entries_are_void_with_or_without_a_record(world, cli, run_subprocess, capsys):
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
    # the home named once (the guard refuses `--home` given twice, as a split file name could give it)
    without_record = run_subprocess("guard", str(path), "--home", str(fresh), "--allowed-signers",
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


@pytest.mark.parametrize("layout", ["no granted key", "flow mapping"])
def test_an_approval_recorded_but_not_laid_into_a_hand_edited_file_says_it_was_recorded(world, capsys, layout):
    """A plan file edited by hand (no `granted:`, or the approvals as a flow mapping) takes no
    signature where the mirror puts it; the approval committed first, and the command said only
    what the layout lacked, as if nothing had been recorded (found by an attack). It says the
    approval is recorded, what the file lacks, and that the same command syncs it."""
    path = world.plan("fix")
    text = path.read_text()
    edited = text.replace("granted: []\n", "") if layout == "no granted key" else \
        text.replace("approvals:\n  required: 2\n  granted: []\n", "approvals: {required: 2, granted: []}\n")
    assert edited != text, text
    path.write_text(edited)
    capsys.readouterr()
    assert world.cli("plan", "approve", str(path), "--by", "olivia", "--key", str(world.keys["olivia"])) == 1
    said = capsys.readouterr().err
    assert world.sql("SELECT count(*) FROM backfill_control.approvals WHERE plan_id = 'fix'") == [(1,)]
    assert "olivia's approval is recorded in the warehouse" in said and "plan approve` again" in said, said
    assert said.count("\n") == 1, said
