"""The trust root as OpenSSH reads it and as a pin waits for the chain: an approver with one
key and an operator with the CLI but no approver key (valid-after/valid-before times, re-pins, lines
pinned by an earlier release)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from backfill_assets.errors import SignatureError
from backfill_assets.signing.allowed_signers import AllowedSigners
from backfill_assets.signing.sshsig import NAMESPACE

MESSAGE = b"backfill-assets plan approval\n"


def _key(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)],
                   check=True, capture_output=True, timeout=60)
    return path


def _ssh_verify(tmp_path: Path, allowed: str, signature: str) -> int:
    (tmp_path / "allowed_signers").write_text(allowed)
    (tmp_path / "msg.sig").write_text(signature)
    return subprocess.run(["ssh-keygen", "-Y", "verify", "-f", str(tmp_path / "allowed_signers"), "-I", "alice",
                           "-n", NAMESPACE, "-s", str(tmp_path / "msg.sig")], input=MESSAGE,
                          capture_output=True, timeout=60).returncode


@pytest.mark.parametrize("option", ['valid-after="19700101"', 'valid-after="19691231"', 'valid-after="16000101"',
                                    'valid-before="19700101000000Z"'])
def test_a_time_at_or_before_the_epoch_is_a_line_openssh_skips_and_never_lets_its_key_count(tmp_path, option):
    """OpenSSH refuses a `valid-after` or `valid-before` at or before 1970-01-01 ("invalid
    valid-after time") and skips the line: the key is no signer's for `ssh-keygen -Y verify` (nor
    git). Read here as a time long past, `valid-after="19691231"` let the key count for alice."""
    key = _key(tmp_path, "alice")
    line = f'alice {option} {" ".join(key.with_suffix(".pub").read_text().split()[:2])}\n'
    signature = subprocess.run(["ssh-keygen", "-Y", "sign", "-f", str(key), "-n", NAMESPACE], input=MESSAGE,
                               capture_output=True, check=True, timeout=60).stdout.decode()
    assert _ssh_verify(tmp_path, line, signature) != 0  # OpenSSH: no key for alice
    signers = AllowedSigners.parse(line)  # a root pinned with such a line still reads
    with pytest.raises(SignatureError) as excinfo:
        signers.verify_approval("alice", MESSAGE, signature)
    said = str(excinfo.value)
    assert "\n" not in said and "OpenSSH skips this line" in said and "1970-01-02" in said, said
    # OpenSSH reads on past the line it skips, and so is a second line for the key read here
    both = line + f'alice namespaces="backfill-plan" {line.split(" ", 2)[2]}'
    assert _ssh_verify(tmp_path, both, signature) == 0
    assert AllowedSigners.parse(both).verify_approval("alice", MESSAGE, signature)


def _change_signed(world, seconds_left: int) -> tuple[Path, Path, list[str], Any]:
    """A trust-root change (mallory added) signed by alice and bob, valid for 14 days and signed so
    that `seconds_left` are left: the new allowed_signers, the statement's file, the `--signature`
    options, and the statement."""
    import datetime as dt

    from backfill_assets.cli.approvers_cmd import load_files
    from backfill_assets.control import trust_record
    from backfill_assets.signing.sshsig import sign
    from tests.test_trust import root_of
    from tests.world import signers_text

    new = world.root / "next" / "allowed_signers"
    new.parent.mkdir()
    new.write_text(signers_text(world.keys, ("alice", "bob", "carol", "olivia", "mallory")))
    root = root_of(world)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    statement = trust_record.change_statement(root, *load_files(str(new), None, root.policy),
                                              signed=now - dt.timedelta(days=14) + dt.timedelta(seconds=seconds_left))
    text = world.root / "change.txt"
    text.write_text(statement.text)
    given = []
    for who in ("alice", "bob"):
        (world.root / f"{who}.sig").write_text(sign(statement.message, world.keys[who]))
        given += ["--signature", f"{who}={world.root / f'{who}.sig'}"]
    return new, text, given, statement


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_re_pin_whose_signatures_expire_while_it_waits_is_refused_as_expired_not_forged(engine_world, capsys):
    """Operator with the CLI, and the quorum's signatures over a trust-root change that expire soon
    (signed two weeks ago, as approvers do before a pin is run). `approvers pin` counted them, then
    waited for the evidence chain's turn (another command held it: a publish, a run), and appended
    the pin's chain row after they had expired. Every later read of the root re-verifies each pin's
    signatures at its chain row's time, so the pin it had just committed read as "lacks the quorum"
    (a forged record): `approvers show`, `plan approve`, every run and publish refused, for good."""
    import datetime as dt
    import threading
    import time

    import psycopg

    from tests.test_trust import _waits, root_of

    world = engine_world
    # valid for 14 days, signed 14 days less 6 seconds ago: 6 seconds left
    new, text, given, statement = _change_signed(world, seconds_left=6)
    outcome: dict[str, object] = {}
    with psycopg.connect(world.url, autocommit=True) as watcher, psycopg.connect(world.url) as holder:
        # another command's transaction holding the chain's turn, as each append takes it
        holder.execute("SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended("
                       "'backfill_control.evidence', 0))")
        capsys.readouterr()
        thread = threading.Thread(target=lambda: outcome.update(
            code=world.cli("approvers", "pin", str(new), "--statement", str(text), *given)))
        thread.start()
        _waits(watcher, "wait_event_type = 'Lock' AND wait_event = 'advisory'", thread)
        time.sleep(max(0.0, (statement.expires - dt.datetime.now(dt.UTC)).total_seconds()) + 1)
        holder.commit()
        thread.join(120)
    said = capsys.readouterr().err
    # counted after its wait, as its chain row is stamped: expired, said so, never called a forgery
    assert outcome["code"] == 1 and said.count("\n") == 1 and "expired at" in said, said
    assert "edited outside backfill" not in said and "restore it from backup" not in said, said
    assert root_of(world).version == 1
    assert world.cli("approvers", "show") == 0 and world.cli("evidence", "verify") == 0


def test_a_re_pin_whose_signatures_stop_counting_within_a_minute_is_refused_saying_so(world, capsys):
    """What is left between the count and the pin's chain row (whose time every later read verifies
    the signatures at) is never enough for them to expire in: a quorum that stops counting within a
    minute is refused, naming the moment, rather than pinned and called forged as it is read back."""
    from backfill_assets.cli.approvers_cmd import load_files
    from backfill_assets.control import trust_record
    from backfill_assets.signing.sshsig import sign
    from tests.test_trust import root_of

    new, text, given, _ = _change_signed(world, seconds_left=30)
    root = root_of(world)
    capsys.readouterr()
    assert world.cli("approvers", "pin", str(new), "--statement", str(text), *given) == 1
    said = capsys.readouterr().err
    assert said.count("\n") == 1 and "stop counting at" in said and "approvers statement" in said, said
    assert root_of(world).version == 1
    # signed afresh, the same change pins
    fresh = trust_record.change_statement(root, *load_files(str(new), None, root.policy))
    text.write_text(fresh.text)
    for who in ("alice", "bob"):
        (world.root / f"{who}.sig").write_text(sign(fresh.message, world.keys[who]))
    assert world.cli("approvers", "pin", str(new), "--statement", str(text), *given) == 0
    assert root_of(world).version == 2


def test_a_root_pinned_with_a_line_this_release_refuses_still_reads_and_can_be_re_pinned(world, monkeypatch, capsys):
    """A release before 2026-12-06 pinned `alice valid-before=20991231 KEY` (an unquoted value, which
    OpenSSH skips; later releases refuse it as a file is read). Every read of the root re-parses
    each pin's stored file, so after the upgrade the pinned root itself was refused: `approvers
    show`, `status`, every approval, run and publish, and `approvers pin` too (it reads the current
    root first): no command could get the warehouse out. A pinned file is read as OpenSSH reads it,
    the line skipped (its key no one's under it), and the quorum moves to a file of today's form."""
    from backfill_assets.signing import allowed_signers
    from tests.test_trust import root_of
    from tests.world import OWNER, signers_text

    def public(name: str) -> str:
        return " ".join((world.keys[name].parent / f"{name}.pub").read_text().split()[:2])

    old = world.root / "old" / "allowed_signers"
    old.parent.mkdir()
    old.write_text(signers_text(world.keys, ("bob", "carol", OWNER))
                   + f"alice valid-before=20991231 {public('alice')}\n")
    # the release before: an option value read with or without its quotes
    release_before = allowed_signers._options

    def unquoted_read(field: str, where: str):
        return release_before(",".join(f'{n}="{v}"' if v and not v.startswith('"') else o
                                       for o in field.split(",") for n, _, v in [o.partition("=")]), where)

    monkeypatch.setattr(allowed_signers, "_options", unquoted_read)
    assert world.cli("approvers", "pin", str(old), "--sign", f"alice={world.keys['alice']}",
                     "--sign", f"bob={world.keys['bob']}") == 0
    monkeypatch.setattr(allowed_signers, "_options", release_before)  # the upgrade
    from backfill_assets.control import trust_record

    trust_record._CACHE.clear()  # the next command's process has verified nothing yet
    capsys.readouterr()
    assert world.cli("approvers", "show") == 0, capsys.readouterr().err
    shown = capsys.readouterr().out
    assert "skipped    allowed_signers v2 line 4: valid-before=20991231 is not quoted" in shown, shown
    assert root_of(world).version == 2
    # alice's line is one OpenSSH skips: her key signs nothing under it; bob and carol re-pin
    new = world.root / "new" / "allowed_signers"
    new.parent.mkdir()
    new.write_text(signers_text(world.keys, ("alice", "bob", "carol", OWNER)))
    assert world.cli("approvers", "pin", str(new), "--sign", f"alice={world.keys['alice']}",
                     "--sign", f"bob={world.keys['bob']}") == 1
    assert "alice" in capsys.readouterr().err
    assert world.cli("approvers", "pin", str(new), "--sign", f"carol={world.keys['carol']}",
                     "--sign", f"bob={world.keys['bob']}") == 0
    assert root_of(world).version == 3
