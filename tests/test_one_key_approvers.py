"""An approver with one key (ed25519, RSA or ECDSA), the plan files and the CLI, against
what a signature binds and who counts. Keys and signatures are OpenSSH's own (`ssh-keygen`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from backfill_assets.plan.approvals import append_approval_text, entry_of
from backfill_assets.signing.statements import Statement
from tests.test_trust import sign_file
from tests.world import OWNER

CONTROL = "backfill_control"


def _printed(world, capsys, *args: str) -> Statement:
    capsys.readouterr()
    assert world.cli(*args) == 0
    return Statement.parse(capsys.readouterr().out)


def _ssh_sign(world, who: str, text: Path, namespace: str) -> Path:
    subprocess.run(["ssh-keygen", "-Y", "sign", "-f", str(world.keys[who]), "-n", namespace, str(text)],
                   check=True, capture_output=True, timeout=60)
    return Path(f"{text}.sig")


def _recorded(world) -> set[str]:
    return {r[0] for r in world.sql(f"SELECT principal FROM {CONTROL}.approvals")}


def test_signatures_in_another_namespace_or_of_another_statement_never_approve_a_plan(world, tmp_path, capsys):
    """Held. Alice (who signed, with the owner) wants the second approver without asking one. She
    gathers what bob (RSA) and carol (ECDSA) signed elsewhere with `ssh-keygen`: the plan's own
    statement signed in namespace `git` and `file` (OpenSSH's defaults for commits and files), a
    trust-root statement bob signed for another change, and carol's real signature with the `by:`
    of its file entry changed to bob. None counts: the plan stays drafted, nothing is recorded for
    them, and each refusal is one line naming why (found by an attack: held)."""
    path = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    world.approve(path, "alice")  # the owner and alice: one approver short
    statement = _printed(world, capsys, "plan", "statement", str(path))
    text = tmp_path / "statement.txt"
    text.write_text(statement.text)
    for who, namespace in (("bob", "git"), ("carol", "file")):
        sig = _ssh_sign(world, who, text, namespace)
        capsys.readouterr()
        assert world.cli("plan", "approve", str(path), "--by", who, "--statement", str(text),
                         "--signature", str(sig)) == 1
        err = capsys.readouterr().err
        assert f"namespace '{namespace}'" in err and err.count("\n") == 1, err
        sig.unlink()
    new = tmp_path / "next" / "allowed_signers"
    new.parent.mkdir()
    new.write_text((world.root / "approvers" / "allowed_signers").read_text())
    change = _printed(world, capsys, "approvers", "statement", str(new))
    ctext, csig = sign_file(world, "bob", change, tmp_path)
    assert world.cli("plan", "approve", str(path), "--by", "bob", "--statement", str(ctext),
                     "--signature", str(csig)) == 1
    err = capsys.readouterr().err
    assert "trust root statement" in err and err.count("\n") == 1, err
    # carol's genuine signature of this very plan, its file entry relabelled as bob's
    _, carol_sig = sign_file(world, "carol", statement, tmp_path)
    path.write_text(append_approval_text(path.read_text(), entry_of("bob", statement, carol_sig.read_text())))
    assert world.cli("plan", "show", str(path)) == 0
    shown = capsys.readouterr().out
    assert "1/2 approver signature(s) counted (alice)" in shown and "does not list for bob" in shown, shown
    assert world.cli("plan", "approve", str(path), "--by", OWNER, "--key", str(world.keys[OWNER])) == 0
    assert world.phase("fix") == "drafted" and _recorded(world) == {"alice", OWNER}


def test_an_approver_holding_an_old_and_a_new_key_while_rotating_counts_once(world, tmp_path, capsys):
    """Held. Bob rotates his RSA key to a new ECDSA one (`ssh-keygen -t ecdsa`); for the transition the
    quorum pins a file listing both under bob. Bob then signs a plan with each key, and a change of
    the trust root with each: one person, two keys, never the quorum of two (found by an attack:
    held; each principal counts once, whatever key it signs with)."""
    new_key = tmp_path / "bob_ecdsa"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "256", "-N", "", "-C", "bob-2027", "-f", str(new_key)],
                   check=True, capture_output=True, timeout=60)
    rotated = tmp_path / "rotated" / "allowed_signers"
    rotated.parent.mkdir()
    new_public = " ".join(Path(f"{new_key}.pub").read_text().split()[:2])
    rotated.write_text((world.root / "approvers" / "allowed_signers").read_text() + f"bob {new_public} bob-2027\n")
    assert world.cli("approvers", "pin", str(rotated), "--sign", f"alice={world.keys['alice']}",
                     "--sign", f"carol={world.keys['carol']}") == 0
    path = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    world.approve(path, "bob")  # the owner and bob's old (RSA) key
    capsys.readouterr()
    assert world.cli("plan", "approve", str(path), "--by", "bob", "--key", str(new_key)) == 0
    out = capsys.readouterr().out
    assert "1/2 approver signature(s) counted (bob)" in out and "not approved yet" in out, out
    assert world.phase("fix") == "drafted"
    further = tmp_path / "further" / "allowed_signers"
    further.parent.mkdir()
    further.write_text(rotated.read_text().replace(f"bob {new_public} bob-2027\n", ""))
    assert world.cli("approvers", "pin", str(further), "--sign", f"bob={world.keys['bob']}",
                     "--sign", f"bob={new_key}") == 1
    err = capsys.readouterr().err
    assert "1/2 approver signature(s) counted (bob)" in err and err.count("\n") == 1, err
