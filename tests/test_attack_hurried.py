"""A hurried user's and an operator's faults (no approver key), found by an attack: each test
failed first."""

from __future__ import annotations

import os
import stat

from tests.world import OWNER


def test_approving_a_plan_file_that_is_a_link_updates_the_file_it_names(world, run_cli):
    """A plan kept as a link into the reviewed checkout (`plans/fix.yaml -> ../checkout/fix.yaml`):
    the approval's rename replaced the link with a file of its own, so the checkout's file, which
    the guard reads, never got the signature, and `plan approve` said the file was in sync."""
    real = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    checkout = world.root / "checkout" / "fix.yaml"
    checkout.parent.mkdir()
    real.rename(checkout)
    real.symlink_to(checkout)
    done = run_cli("plan", "approve", str(real), "--by", OWNER, "--key", str(world.keys[OWNER]))
    assert done.code == 0, done.err
    assert real.is_symlink(), "the link was replaced by a file"
    assert "signature:" in checkout.read_text()


def test_approving_keeps_the_plan_files_mode(world, run_cli):
    """A plan file others read (0644 in a shared folder or a checkout): the approval's rewrite made
    it 0600, so the other approvers and the CI guard could no longer read it."""
    path = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    path.chmod(0o644)
    done = run_cli("plan", "approve", str(path), "--by", OWNER, "--key", str(world.keys[OWNER]))
    assert done.code == 0, done.err
    assert "signature:" in path.read_text()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
