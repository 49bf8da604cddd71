"""Attack round race-55: the hurried user on PostgreSQL with many sessions and on DuckDB."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.world import BUGGY, keys


def _backfill(world, tmp_path: Path, *args: str, env: dict[str, str] | None = None, wait: bool = True):
    full = {**os.environ, "PYTHONWARNINGS": "ignore", "BACKFILL_DEFS": "backfill_assets.demo.daily",
            "BACKFILL_HOME": str(world.home), **(env or {})}
    if world.url:
        full["BACKFILL_WAREHOUSE_URL"] = world.url
    command = [str(Path(sys.executable).parent / "backfill"), "--home", str(world.home), *args]
    if not wait:
        return subprocess.Popen(command, env=full, cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    return subprocess.run(command, env=full, cwd=tmp_path, text=True, capture_output=True, timeout=300)


def _until(predicate, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("never reached")


@pytest.mark.parametrize("engine_world", ["postgresql"], indirect=True)
def test_a_cancel_typed_while_the_plans_run_goes_names_a_next_step_that_is_not_refused(engine_world, tmp_path):
    """`backfill run fix` is between its slices (its run lease held) when another shell types
    `backfill cancel fix`. The cancel commits and names the next step as `status` does; every
    command it names must be one a cancelled plan accepts, and once the run stops the rollback
    `status` names succeeds and the chain verifies. It named `wait: ... (or `backfill pause fix`)`,
    which a cancelled plan refuses, pointing at `status`, which named the pause again (on DuckDB the
    run holds the file between its slices: the cancel waits for it)."""
    world = engine_world
    assert world.materialize(keys(1, 4), spec=BUGGY).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",), per_run=1)
    assert world.cli("run", "fix", "--proof") == 0
    release = tmp_path / "release"
    run = _backfill(world, tmp_path, "run", "fix", wait=False,
                    env={"BACKFILL_STALL_AT": "run.after_wave@1=120", "BACKFILL_STALL_RELEASE_FILE": str(release)})
    try:
        _until(lambda: run.poll() is not None or (
            world.sql("SELECT count(*) FROM backfill_control.writes WHERE plan_id = 'fix'")[0][0] >= 2
            and world.sql("SELECT count(*) FROM backfill_control.leases WHERE plan_id = 'fix'")[0][0] == 1))
        assert run.poll() is None, run.communicate()
        cancel = _backfill(world, tmp_path, "cancel", "fix")
        assert cancel.returncode == 0, cancel.stderr
        step = cancel.stdout.split("next:", 1)[1]
        named = re.findall(r"`(backfill [^`]*)`", step)
        assert named, cancel.stdout
        for command in named:
            words = command.split()[1:]
            if words[0] in ("pause", "status"):  # commands that change nothing a rollback needs
                done = _backfill(world, tmp_path, *words)
                assert done.returncode == 0, (cancel.stdout, command, done.stderr)
    finally:
        release.touch()
        out, err = run.communicate(timeout=240)
    status = _backfill(world, tmp_path, "status", "fix")
    assert "backfill rollback fix" in status.stdout, status.stdout
    assert _backfill(world, tmp_path, "rollback", "fix").returncode == 0
    assert world.phase() == "rolled_back"
    assert _backfill(world, tmp_path, "evidence", "verify").returncode == 0


def test_a_rollback_never_restores_published_bytes_into_a_column_of_another_kind(engine_world, capfd):
    """Plan fix is published; a consumer's session retypes published_revenue.net_revenue to VARCHAR
    (as `ALTER TABLE ... TYPE VARCHAR` typed beside the command); then `backfill rollback fix`.
    Publish refuses a published column of another kind (the values' texts, all a fingerprint sees,
    match); the rollback's restore into it must be refused the same way, not recorded as consumers
    seeing the snapshot's bytes again while they read strings."""
    world = engine_world
    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    world.run_sql("ALTER TABLE published_revenue ALTER net_revenue TYPE VARCHAR")
    capfd.readouterr()
    code = world.cli("rollback", "fix")
    err = capfd.readouterr().err
    assert code == 1, "restored DECIMAL values into a VARCHAR column as the snapshot's bytes"
    assert "net_revenue: type" in err and err.count("\n") == 1, err
    assert world.phase() == "published"
