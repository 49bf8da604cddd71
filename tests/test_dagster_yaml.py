"""dagster.yaml is written once, by a YAML library, without secrets, and never rewritten: a team's
edits survive every command; one that lacks our run coordinator is kept and said so in one line."""

from __future__ import annotations

import pytest
import yaml


def dagster_yaml(world):
    return world.home / "dagster" / "dagster.yaml"


@pytest.mark.own_dagster_home
def test_a_teams_edits_of_dagster_yaml_survive_run_and_publish(world):
    path = dagster_yaml(world)
    document = yaml.safe_load(path.read_text())
    document["run_coordinator"]["config"]["max_concurrent_runs"] = 3
    document["run_launcher"] = {"module": "dagster._core.launcher", "class": "DefaultRunLauncher"}
    edited = "# the team's launcher and limits\n" + yaml.safe_dump(document)
    path.write_text(edited)
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    assert world.cli("run", "fix", "--proof") == 0
    assert world.cli("run", "fix") == 0
    assert world.cli("publish", "fix") == 0
    assert world.cli("init") == 0
    assert path.read_text() == edited


@pytest.mark.own_dagster_home
def test_a_dagster_yaml_without_our_coordinator_is_kept_and_said_in_one_line(world, capfd):
    path = dagster_yaml(world)
    path.write_text("telemetry:\n  enabled: false\n")
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    capfd.readouterr()
    assert world.cli("run", "fix", "--proof") == 0
    said = [line for line in capfd.readouterr().err.splitlines() if "PlanGateRunCoordinator" in line]
    assert len(said) == 1 and f"{path} has no PlanGateRunCoordinator run coordinator" in said[0], said
    assert path.read_text() == "telemetry:\n  enabled: false\n"


def test_the_warehouse_url_is_an_environment_reference_never_its_value(tmp_path, run_cli, monkeypatch):
    secret = "postgresql://backfill:hunter2@127.0.0.1:1/nowhere"
    monkeypatch.setenv("BACKFILL_WAREHOUSE_URL", secret)
    from backfill_assets.dagster_setup import ensure_dagster_home
    from backfill_assets.home import Home

    folder, note = ensure_dagster_home(Home(tmp_path / "home"))
    text = (folder / "dagster.yaml").read_text()
    assert note is None and "hunter2" not in text
    assert yaml.safe_load(text)["run_coordinator"]["config"]["warehouse_url"] == {"env": "BACKFILL_WAREHOUSE_URL"}
