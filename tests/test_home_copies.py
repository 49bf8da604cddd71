"""A home copied (or moved) keeps its own Dagster instance and gate: `backfill init` writes dagster.yaml
with paths of its own folder. With absolute paths, a copy's commands stored their runs in the
original's event log and its run coordinator gated UI runs with the original's warehouse; a home
whose dagster.yaml still names another home that way is refused in one line."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.test_utils import in_process_test_workspace  # as test_run_coordinator: a queued run's origin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from backfill_assets.dagster_setup import instance_for
from backfill_assets.home import Home
from backfill_assets.permission import BACKFILL_TAG
from tests.conftest import ROOT
from tests.test_run_coordinator import RANGE, submit

pytestmark = pytest.mark.own_dagster_home


def runs_in(home: Path) -> int:
    with sqlite3.connect(home / "dagster" / "history" / "runs.db") as conn:
        return conn.execute("SELECT count(*) FROM runs").fetchone()[0]


def step_logs(home: Path) -> set[str]:
    folder = home / "dagster" / "storage"
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


def copied(world, tmp_path: Path) -> Path:
    copy = tmp_path / "copy" / "home"
    shutil.copytree(world.home, copy, symlinks=True)  # as `cp -a`
    return copy


def test_a_copied_home_stores_its_runs_in_its_own_dagster_instance(world, tmp_path, run_subprocess):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    copy = copied(world, tmp_path)
    before = runs_in(world.home)
    done = run_subprocess("--home", str(copy), "run", "fix", "--proof",
                          env={"BACKFILL_HOME": str(copy), "DAGSTER_HOME": str(copy / "dagster")})
    assert done.code == 0, done.err
    assert runs_in(world.home) == before  # the original's instance saw nothing of the copy's runs
    assert runs_in(copy) == before + 2  # the proof's two runs, in the copy's
    assert step_logs(copy) and not step_logs(world.home) & step_logs(copy)  # their step logs too


def test_a_copied_homes_coordinator_gates_with_the_copys_warehouse(world, tmp_path, monkeypatch):
    copy = copied(world, tmp_path)
    assert world.materialize(["2026-01-03"]).success  # history in the original only
    monkeypatch.setenv("BACKFILL_HOME", str(copy))
    monkeypatch.setenv("DAGSTER_HOME", str(copy / "dagster"))
    instance = instance_for(Home(copy))
    origin = LoadableTargetOrigin(module_name="backfill_assets.demo.definitions", working_directory=str(ROOT))
    try:
        with in_process_test_workspace(instance, origin) as workspace:
            world.workspace = workspace
            run = submit(instance, world, {BACKFILL_TAG: "bf1", RANGE[0]: "2026-01-02", RANGE[1]: "2026-01-04"})
    finally:
        instance.dispose()
    # the copy holds no history there: a plan-free load, queued (the original's would have refused it)
    assert run.status == dg.DagsterRunStatus.QUEUED


def test_a_home_whose_dagster_yaml_names_another_home_is_refused_in_one_line(world, tmp_path, run_subprocess):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    config = world.home / "dagster" / "dagster.yaml"
    document = yaml.safe_load(config.read_text())  # as `backfill init` wrote it before: absolute paths
    for part, folder in (("event_log_storage", "event_log"), ("run_storage", "history"), ("compute_logs", "storage")):
        document[part]["config"]["base_dir"] = str(world.home / "dagster" / folder)
    document["run_coordinator"]["config"]["backfill_home"] = str(world.home)
    config.write_text(yaml.safe_dump(document))
    copy = copied(world, tmp_path)
    before = runs_in(world.home)
    env = {"BACKFILL_HOME": str(copy), "DAGSTER_HOME": str(copy / "dagster")}
    done = run_subprocess("--home", str(copy), "run", "fix", "--proof", env=env)
    assert done.code != 0
    lines = [line for line in done.err.splitlines() if line.strip()]
    assert len(lines) == 1 and "was this home copied or moved?" in lines[0], done.err
    assert f"has its run coordinator gate runs with the home {world.home}, not this one" in lines[0]
    assert "its backfill_home as .." in lines[0]
    assert runs_in(world.home) == before
    status = run_subprocess("--home", str(copy), "status", "fix", env=env)
    assert status.code == 0 and "approved" in status.out, status.err  # nothing was written: still approved
    assert runs_in(world.home) == before
    # the original, where the paths are its own, runs as before
    assert run_subprocess("--home", str(world.home), "run", "fix", "--proof",
                          env={"DAGSTER_HOME": str(world.home / "dagster")}).code == 0


def test_a_dagster_home_left_exported_for_another_home_is_refused_in_one_line(world, tmp_path, run_subprocess):
    """`backfill init` prints `export DAGSTER_HOME=...`: a copy used with the original's still exported
    stored its runs in the original's instance, whose coordinator gates the original's warehouse."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    copy = copied(world, tmp_path)
    before = runs_in(world.home)
    stale = {"BACKFILL_HOME": str(copy), "DAGSTER_HOME": str(world.home / "dagster")}
    for command in (("run", "fix", "--proof"), ("init",)):
        done = run_subprocess("--home", str(copy), *command, env=stale)
        lines = [line for line in done.err.splitlines() if line.strip()]
        assert done.code != 0 and len(lines) == 1, done.err
        assert f"is the Dagster instance of the home {world.home}, not of {copy}" in lines[0]
        assert f"export DAGSTER_HOME={copy / 'dagster'}" in lines[0]
    assert runs_in(world.home) == before


def test_a_relative_dagster_home_is_refused_before_anything_is_written(world, tmp_path, run_subprocess):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run_subprocess("--home", str(world.home), "run", "fix", "--proof", cwd=elsewhere,
                          env={"DAGSTER_HOME": "dagster"})
    assert done.code != 0 and "DAGSTER_HOME is 'dagster', not an absolute path" in done.err, done.err
    assert list(elsewhere.iterdir()) == []


def test_storage_in_a_folder_of_another_home_is_refused_and_a_teams_own_volume_is_not(world, tmp_path, run_subprocess):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    other = copied(world, tmp_path)  # another home, beside this one
    config = world.home / "dagster" / "dagster.yaml"
    original = config.read_text()
    document = yaml.safe_load(original)
    document["event_log_storage"]["config"]["base_dir"] = str(Path("..") / ".." / "copy" / "home" / "dagster" /
                                                              "event_log")
    config.write_text(yaml.safe_dump(document))
    env = {"DAGSTER_HOME": str(world.home / "dagster")}
    done = run_subprocess("--home", str(world.home), "run", "fix", "--proof", env=env)
    assert done.code != 0 and "another home's folder" in done.err, done.err
    assert runs_in(other) == runs_in(world.home)  # nothing of this home's landed in the other's
    document["event_log_storage"]["config"]["base_dir"] = "event_log"
    document["compute_logs"]["config"]["base_dir"] = str(tmp_path / "team-volume" / "compute")  # not made yet
    config.write_text(yaml.safe_dump(document))
    assert run_subprocess("--home", str(world.home), "run", "fix", "--proof", env=env).code == 0
    assert list((tmp_path / "team-volume" / "compute").iterdir())
