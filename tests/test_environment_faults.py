"""Faults of the environment a user gives the CLI: named pipes and devices where a file is
expected, a full disk, a read-only home, quotes in the home's path. Each is one line naming the
file and the fix, exit 1 or 2, before anything commits; never a hang, never exit 3."""

from __future__ import annotations

import os

import pytest

FIFO_TIMEOUT = 60  # seconds: a FIFO opened for reading would block forever


def one_line(result) -> str:
    assert result.err.count("\n") == 1 and result.err.startswith("backfill: "), result.err
    assert "internal error" not in result.err, result.err
    return result.err


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("case", ["plan file", "private key", "signature file", "allowed_signers",
                                  "init allowed_signers", "status plan", "evidence file", "partitions file",
                                  "workspace"])
def test_a_named_pipe_given_as_a_file_is_one_line_never_a_hang(world, cli, fifo, case):
    plan = world.plan("fix")
    if case == "status plan":
        assert world.cli("init") == 0
    if case == "partitions file":
        world.approve(plan)
    if case == "workspace":  # the definitions are found through ./workspace.yaml (cwd is tmp_path)
        os.replace(fifo, fifo.parent / "workspace.yaml")
        fifo = fifo.parent / "workspace.yaml"
    args = {
        "plan file": ("plan", "validate", str(fifo)),
        "private key": ("plan", "approve", str(plan), "--by", "alice", "--key", str(fifo)),
        "signature file": ("plan", "approve", str(plan), "--by", "alice", "--signature", str(fifo)),
        "allowed_signers": ("plan", "approve", str(plan), "--by", "alice", "--key", str(world.keys["alice"]),
                            "--allowed-signers", str(fifo)),
        "init allowed_signers": ("init", "--allowed-signers", str(fifo)),
        "status plan": ("status", str(fifo)),
        "partitions file": ("run", "fix", "--partitions-file", str(fifo)),
        "workspace": ("run", "fix"),
        "evidence file": ("evidence", "verify", "--against", str(fifo)),
    }[case]
    env = {"BACKFILL_DEFS": ""} if case == "workspace" else None
    result = cli(*args, timeout=FIFO_TIMEOUT, env=env)
    assert result.code == 2, result.err
    line = one_line(result)
    assert str(fifo) in line and "named pipe" in line, line
