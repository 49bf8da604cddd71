from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from backfill_assets.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def run_cli(home: Path, capsys):
    """The CLI through its runner (in-process `main`), with --home in tmp_path."""

    def run(*args: str) -> Result:
        code = cli_main(["--home", str(home), *args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def run_subprocess(home: Path, tmp_path: Path):
    """The installed `backfill` console script as a real subprocess."""

    def run(*args: str, command: list[str] | None = None, timeout: float = 300) -> Result:
        env = {**os.environ, "BACKFILL_HOME": str(home), "PYTHONWARNINGS": "ignore"}
        cmd = command if command is not None else [str(BIN / "backfill"), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=timeout)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def instance():
    import dagster as dg

    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def world(tmp_path, instance):
    from tests.world import make_world

    return make_world(tmp_path, instance)


@pytest.fixture
def cli(world, run_subprocess):
    """The `backfill` console script as a subprocess, on the world's home."""
    def run(*args: str) -> Result:
        return run_subprocess("--home", str(world.home), *args)
    return run
