"""A hurried user on the embedded DuckDB default, attacked (each test failed first): what a command
given a file it cannot read, killed, or raced does."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.separate_processes  # the commands under test run as processes of their own


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("backfill: "), err
    assert "internal error" not in err, err
    return err


@pytest.mark.parametrize("named", ["allowed_signers", "policy"])
@pytest.mark.parametrize("kind", ["named pipe", "directory", "missing"])
def test_the_guard_never_says_allowed_over_a_named_file_it_cannot_read(world, cli, named, kind):
    """`backfill guard PLAN --allowed-signers FILE [--policy FILE]` where the warehouse's pinned root
    can be read: a named file that cannot be read (a typo'd path, a pipe, a folder) was dropped
    without a word and the guard said ALLOWED under the pinned root, as if the file named agreed."""
    plan = world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    good = world.root / "approvers" / "allowed_signers"
    bad = world.root / f"bad-{named}"
    if kind == "named pipe":
        os.mkfifo(bad)
    elif kind == "directory":
        bad.mkdir()
    args = ["--allowed-signers", str(bad)] if named == "allowed_signers" else \
        ["--allowed-signers", str(good), "--policy", str(bad)]
    checked = cli("guard", str(plan), *args, timeout=60)
    assert checked.code != 0 and "\nALLOWED:" not in checked.out, (checked.code, checked.out[-800:])
    assert str(bad) in checked.out + checked.err, (checked.out[-800:], checked.err)
