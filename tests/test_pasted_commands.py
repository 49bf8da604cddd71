"""A hurried operator who names the warehouse with `--home` (and the definitions with
`--defs`) on every command, and pastes the commands a refusal or a report prints, as printed."""

from __future__ import annotations

import re
import shlex
import shutil

from tests.world import World


def _commands(text: str) -> list[list[str]]:
    """The `backfill ...` commands a text names, as the shell splits them (without `backfill`)."""
    return [shlex.split(c)[1:] for c in re.findall(r"`(backfill [^`]+)`", text)]


def _next(text: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith("next "))
    [command, *_] = _commands(line)
    return command


def _twin(world: World, tmp_path) -> World:
    """A second team home holding the same plan of record as the world's ($BACKFILL_HOME)."""
    twin = World(tmp_path / "team", world.instance, world.keys)
    shutil.copytree(world.home, twin.home)
    return twin


def test_the_next_step_status_prints_for_a_home_named_by_option_acts_on_that_home(world, run_subprocess, tmp_path):
    """`backfill --home TEAM status fix` printed "next run the proof: `backfill run fix --proof`";
    pasted as printed, the proof ran in $BACKFILL_HOME's warehouse, where a plan fix also was, and
    TEAM's plan stayed approved. Printed commands carry the --home that chose the warehouse."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    team = _twin(world, tmp_path)
    shown = run_subprocess("--home", str(team.home), "status", "fix")
    assert shown.code == 0, shown.err
    command = _next(shown.out)
    done = run_subprocess(*command)
    assert done.code == 0, done.err
    assert (team.phase("fix"), world.phase("fix")) != ("approved", "proven"), \
        f"{shlex.join(command)} ran in $BACKFILL_HOME, not {team.home}"
    assert world.phase("fix") == "approved" and team.phase("fix") != "approved", (shown.out, done.out)


def test_a_printed_command_carries_the_defs_the_command_was_given(world, run_subprocess, tmp_path):
    """With the definitions named by --defs (no BACKFILL_DEFS, no workspace.yaml), the step a
    status prints, pasted, said "no definitions to load"."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    unset = {"BACKFILL_DEFS": ""}
    shown = run_subprocess("--home", str(world.home), "run", "fix", "--defs", "backfill_assets.demo.daily", env=unset)
    [command, *_] = _commands(shown.out + shown.err)
    done = run_subprocess(*command, env=unset)
    assert done.code == 0, (shlex.join(command), done.err)


def test_status_takes_the_defs_a_run_was_given_and_its_next_step_carries_them(world, run_subprocess):
    """An operator naming the definitions with --defs on every command got `backfill: error:
    unrecognized arguments: --defs` from `status` (and from `plan withdraw`), the command the
    README sends everyone to; without them its next step, pasted, said "no definitions to load"."""
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    unset = {"BACKFILL_DEFS": ""}
    shown = run_subprocess("--home", str(world.home), "status", "fix", "--defs", "backfill_assets.demo.daily",
                           env=unset)
    assert shown.code == 0, shown.err
    command = _next(shown.out)
    assert "--defs" in command, command
    done = run_subprocess(*command, env=unset)
    assert done.code == 0, (shlex.join(command), done.err)
    missing = run_subprocess("--home", str(world.home), "status", "fix", "--defs", "no_such_module", env=unset)
    assert missing.code != 0 and len(missing.err.strip().splitlines()) == 1, missing.err
    # the proof pasted above wrote: a withdraw refuses, naming the rollback with the definitions it was given
    gone = run_subprocess("--home", str(world.home), "plan", "withdraw", "fix", "--defs", "backfill_assets.demo.daily",
                          env=unset)
    assert gone.code == 1 and "`backfill rollback fix --defs backfill_assets.demo.daily`" in gone.err, gone.err


ODD_KEYS = ("apac", "north west", "a;b$HOME")  # static keys are text: a blank, `;` and `$` in them


def odd_definitions(home: str):
    """A static table over a VARCHAR column whose keys the shell would split or expand."""
    import dagster as dg

    from backfill_assets.defs.replayable import make_replayable_table
    from backfill_assets.defs.resources import backfill_resources
    from tests.test_partitionings import STATIC

    table = make_replayable_table(STATIC.spec, dg.StaticPartitionsDefinition(list(ODD_KEYS)))
    return dg.Definitions(assets=[dg.AssetSpec(STATIC.spec.source), *table.assets], sensors=table.sensors,
                          resources=backfill_resources(home=home))


def _odd_lab(tmp_path, ssh_keys, capsys):
    """test_partitionings' lab over the odd static keys."""
    from tests.test_partitionings import Lab

    class OddLab(Lab):
        def write_defs(self, name: str):
            path = self.root / "defs_odd.py"
            path.write_text(f"from tests.test_pasted_commands import odd_definitions\n\n"
                            f"defs = odd_definitions({str(self.home)!r})\n", encoding="utf-8")
            return path

        def materialize(self, keys: list[str], *, publish: bool = False):
            import dagster as dg

            from backfill_assets.tags import ACTOR_TAG

            tags = {ACTOR_TAG: "test", "dagster/asset_partition_range_start": keys[0],
                    "dagster/asset_partition_range_end": keys[-1]}
            selection = [dg.AssetKey(self.spec.name)] + ([dg.AssetKey(self.spec.publish_as)] if publish else [])
            job = odd_definitions(str(self.home)).resolve_implicit_global_asset_job_def()
            return job.execute_in_process(instance=self.instance, asset_selection=selection, tags=tags,
                                          raise_on_error=False)

    return OddLab(tmp_path, "static", ssh_keys, capsys)


def test_a_failing_static_key_status_names_is_rerun_as_printed(tmp_path, ssh_keys, capsys, monkeypatch):
    """A static key with a blank failed its reconcile: status printed `backfill run replay --partitions
    north west`, which the shell splits ("unrecognized arguments: west"); a key with `;` ran the rest
    as another command. The printed command, pasted, re-runs exactly the failing key."""
    from backfill_assets.warehouse.duckdb_engine import kept_open
    from tests.test_partitionings import STATIC

    with kept_open():
        lab = _odd_lab(tmp_path, ssh_keys, capsys)
        monkeypatch.setenv("BACKFILL_DEFS", str(lab.defs_file))
        monkeypatch.setenv("BACKFILL_HOME", str(lab.home))
        source = STATIC.source_sql.replace("['eu', 'us', 'apac']", f"{list(ODD_KEYS)}")
        lab.run_sql(source)
        try:
            assert lab.materialize(list(ODD_KEYS), publish=True).success
            path = lab.plan("replay", ODD_KEYS[0], ODD_KEYS[1], ODD_KEYS[1])
            for who in ("olivia", "alice", "bob"):
                assert lab.approve(path, who).code == 0
            assert lab.cli("run", "replay", "--proof").code == 0 and lab.cli("run", "replay").code == 0
            # a double-loaded source row in each window key: both fail their reconcile
            lab.run_sql("INSERT INTO region_events SELECT event_id, region, kind, 999 FROM region_events "
                        "WHERE event_id IN (0, 1)")
            assert lab.cli("reconcile", "replay").code == 1
            lab.run_sql("DELETE FROM region_events WHERE amount = 999")
            shown = lab.cli("status", "replay")
            step = next(line for line in shown.out.splitlines() if line.startswith("next "))
            [command, *_] = _commands(step)
            rerun = lab.cli(*command)
            assert rerun.code == 0, (step, rerun.err)
            assert lab.phase("replay") == "reconciled", rerun.out
        finally:
            lab.close()


def _draft_named(text: str) -> list[str]:
    drafts = [c for c in _commands(text) if c[:2] == ["plan", "new"]]
    assert drafts, text
    return drafts[0]


def test_a_reconcile_of_a_withdrawn_plan_names_the_plan_that_replays_its_window(world, run_cli, tmp_path,
                                                                                 monkeypatch):
    """`backfill reconcile a1` of a withdrawn plan exited 1 with "NOT reconciled; plan a1 is
    withdrawn" and named nothing to do. It names the draft of a new plan, which, pasted, writes one."""
    monkeypatch.chdir(tmp_path)  # where the printed `plans/...` is drafted
    world.approved_plan("a1", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert run_cli("plan", "withdraw", "a1").code == 0
    done = run_cli("reconcile", "a1")
    assert done.code == 1, done.err
    command = _draft_named(done.out + done.err)
    drafted = run_cli(*command)
    assert drafted.code == 0, (command, drafted.err)
    assert "--target" in command and "daily_revenue" in command, command


def test_the_status_of_a_rolled_back_plan_names_the_draft_of_a_new_one(world, run_cli, tmp_path, monkeypatch):
    """`backfill status fix` of a rolled-back plan said "draft a new plan to retry", no command."""
    monkeypatch.chdir(tmp_path)  # where the printed `plans/...` is drafted
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0
    assert run_cli("rollback", "fix").code == 0 and world.phase("fix") == "rolled_back"
    shown = run_cli("status", "fix")
    assert shown.code == 0, shown.err
    command = _draft_named(next(line for line in shown.out.splitlines() if line.startswith("next ")))
    drafted = run_cli(*command)
    assert drafted.code == 0, (command, drafted.err)


def test_data_a_command_prints_is_never_rewritten_for_pasting(world, run_subprocess, tmp_path):
    """What is data, not advice, stays as the product made it with --home carried into advice: the
    rendered evidence (its header names `backfill evidence`), JSON, a statement approvers sign."""
    from backfill_assets.evidence import HEADER

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    team = _twin(world, tmp_path)
    here = ("--home", str(team.home))
    evidence = run_subprocess(*here, "evidence", "fix")
    assert evidence.code == 0 and evidence.out.startswith(HEADER) and "--home" not in evidence.out, evidence.err
    shown = run_subprocess(*here, "status", "fix", "--json")
    assert shown.code == 0 and "--home" not in shown.out and "`backfill run fix --proof`" in shown.out, shown.out
    statement = run_subprocess(*here, "plan", "statement", str(world.root / "plans" / "fix.yaml"))
    assert statement.code == 0 and "--home" not in statement.out, statement.err
    assert f"--home {team.home}" in run_subprocess(*here, "status", "fix").out


def test_a_new_plan_a_refusal_names_is_drafted_when_pasted_into_bash(world, run_cli, tmp_path):
    """A publish refused over a day no active plan holds named `backfill plan new plans/<id>.yaml
    --target daily_revenue`: pasted into bash, `<id>` and `>.yaml` are redirections; no plan was
    drafted ("id: No such file or directory"), or, with a file `id` there, `.yaml` was written over."""
    import os
    import subprocess

    from tests.conftest import BIN
    from tests.world import BUGGY, failure_text, keys

    assert world.materialize(keys(1, 4), spec=BUGGY, publish=True).success
    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    assert world.cli("run", "fix", "--proof") == 0 and world.cli("run", "fix") == 0
    assert run_cli("rollback", "fix").code == 0
    world.run_sql("UPDATE daily_revenue SET net_revenue = net_revenue + 1 WHERE order_date = DATE '2026-01-02'")
    said = failure_text(world.publish(keys(2, 2)))
    [printed, *_] = [c for c in re.findall(r"`(backfill [^`]+)`", said) if c.startswith("backfill plan new")]
    folder = tmp_path / "desk"
    folder.mkdir()
    environment = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    pasted = subprocess.run(["bash", "-c", printed], cwd=folder, env=environment, capture_output=True, text=True,
                            timeout=300)
    assert pasted.returncode == 0, (printed, pasted.stderr)
    assert [p.name for p in (folder / "plans").iterdir()] and not (folder / ".yaml").exists(), printed


def test_the_rest_of_a_halted_load_of_static_keys_loads_as_printed(tmp_path, ssh_keys, capsys, monkeypatch):
    """`backfill load` halted at a failing static key printed "the rest loads with `backfill load
    region_kinds --start north west --end a;b$HOME`": the shell split it at the blank (and ran
    `b$HOME` as a command at the `;`). Pasted as printed, the rest loads."""
    from backfill_assets.warehouse.duckdb_engine import kept_open
    from tests.test_partitionings import STATIC

    with kept_open():
        lab = _odd_lab(tmp_path, ssh_keys, capsys)
        monkeypatch.setenv("BACKFILL_DEFS", str(lab.defs_file))
        monkeypatch.setenv("BACKFILL_HOME", str(lab.home))
        lab.run_sql(STATIC.source_sql.replace("['eu', 'us', 'apac']", f"{list(ODD_KEYS)}"))
        try:
            lab.run_sql(STATIC.break_sql)  # event 3, of apac, loaded twice: apac's gates fail
            halted = lab.cli("load", STATIC.spec.name, "--start", ODD_KEYS[0], "--end", ODD_KEYS[-1],
                             "--per-run", "1")
            assert halted.code == 1, halted.err
            rest = next(line for line in halted.out.splitlines() if line.startswith("the rest loads with"))
            [command] = _commands(rest)
            lab.run_sql(STATIC.fix_sql)
            loaded = lab.cli(*command)
            assert loaded.code == 0, (rest, loaded.err)
        finally:
            lab.close()


def test_a_definitions_file_named_relative_to_the_folder_is_carried_so_it_loads_from_another(
        world, run_subprocess, tmp_path):
    """`--defs defs_x.py`, relative to the folder the command ran from, printed into the refusal's
    command as typed would load nothing from another folder: it is carried as an absolute path."""
    from tests.world import DAILY_REVENUE

    world.approved_plan("fix", start="2026-01-01", end="2026-01-04", proof=("2026-01-02",))
    defs = world.defs_file(DAILY_REVENUE)
    unset = {"BACKFILL_DEFS": ""}
    refused = run_subprocess("run", "fix", "--defs", defs.name, env=unset, cwd=defs.parent)
    assert refused.code == 1, refused.err
    [command, *_] = _commands(refused.err)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = run_subprocess(*command, env=unset, cwd=elsewhere)
    assert done.code == 0, (shlex.join(command), done.err)
