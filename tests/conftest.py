from __future__ import annotations

import contextlib
import gc
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from backfill_assets.cli import main as cli_main
from tests.pg_server import postgres_server, postgres_url  # noqa: F401 - fixtures

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# The suite's tables hold a few rows and three workers share two cores: DuckDB's thread a core costs
# more than it gives (~12% of the suite's CPU). Set here, so every subprocess inherits it too;
# `BACKFILL_DUCKDB_THREADS=0 make test` measures the suite at DuckDB's default.
os.environ.setdefault("BACKFILL_DUCKDB_THREADS", "1")


# Handed out in this order under `pytest -n --dist loadscope` (a worker takes a whole module, in the
# order the modules' first tests come): the end-to-end UI module first (~140 s, mostly waiting on
# its daemon), then these modules longest first by their wall under -n 3 (benchmarks/suite_cpu.py,
# 2026-12-08 00:24, 1,438 tests; the modules added since by estimate), then the modules holding
# LONG_TESTS, then the rest. Every module over ~5 s is listed, so the last ones handed out are
# short: a 14 s module named late in the alphabet, handed out last, kept one worker busy alone for
# the suite's last 12 s.
LONGEST_FIRST = ("test_e2e_ui.py", "test_graph.py", "test_trust.py", "test_pg_concurrency.py", "test_engines.py",
                 "test_signals_and_streams.py", "test_plan_replacement.py", "test_published_bytes.py",
                 "test_publish_and_sensor.py", "test_environment_faults.py", "test_run_cli.py",
                 "test_hurried_user.py", "test_commands_at_once.py", "test_faults.py", "test_plan_cli.py",
                 "test_cutover.py", "test_writes_and_rollback.py", "test_expectations.py",
                 "test_printed_commands.py", "test_notices.py", "test_graph_after_publish.py", "test_automation.py",
                 "test_evidence.py", "test_team_graph.py", "test_evidence_for_auditors.py", "test_pg_after_proof.py",
                 "test_pasted_commands.py", "test_pg_rollback.py", "test_hostile_input.py", "test_leases.py",
                 "test_approvals.py", "test_warehouse_faults.py", "test_one_key_approvers.py",
                 "test_partitionings.py", "test_status_steps.py", "test_published_shapes.py",
                 "test_impact_and_scenarios.py", "test_team_rollups.py", "test_permission.py",
                 "test_state_machine.py", "test_late_source_rows.py", "test_dagster_storage.py",
                 "test_planted_rows.py", "test_upgrade.py", "test_home_copies.py", "test_diff.py",
                 "test_ui_check_state.py", "test_load_reads.py", "test_duckdb_triggers.py",
                 "test_pg_checked_reads.py", "test_gates.py", "test_pg_code_in_tables.py", "test_team_project.py",
                 "test_package.py", "test_duckdb_nested_schemas.py", "test_fingerprint_upgrade.py",
                 "test_dagster_yaml.py", "test_seed_requirements.py", "test_pg_server.py",
                 "test_trust_root_reading.py", "test_duckdb_collations.py", "test_shared_tables.py",
                 "test_ci_and_files.py", "test_run_coordinator.py", "test_pg_namesakes.py", "test_load.py")
LONG_TESTS = ("test_the_demo_tells_the_whole_story",
              "test_a_rollback_of_published_data_is_no_edit_of_the_published_table",
              "test_guard_checklist_and_exit_codes_and_the_sh_hook_gives_the_same",
              "test_a_killed_graph_publish_leaves_both_published_tables_wholly_old",
              "test_rollback_of_an_earlier_plan_is_allowed_once_the_later_plan_was_rolled_back",
              "test_rollback_is_refused_when_a_later_plan_wrote_the_same_partitions",
              "test_a_reconcile_failing_after_publish_moves_the_plan_to_repairing_and_blocks_close",
              "test_publish_copies_only_the_bytes_the_gates_checked",
              "test_a_failed_gate_blocks_publish_in_the_same_run_and_a_later_run_until_fixed",
              "test_a_plan_over_the_graph_replays_gates_and_publishes_the_days_and_the_month_together",
              "test_the_ci_guard_never_trusts_a_signers_file_planted_next_to_the_plan",
              "test_a_0_2_home_upgrades_in_place_and_keeps_its_approvers")


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist 3.7+ hands out loadscope's modules by their number of tests, most first
    # (`--loadscope-reorder`, on by default), which put the end-to-end UI module (few tests, ~140 s,
    # mostly waiting on the daemon) last, alone on one worker for the suite's last minute: keep the
    # order below instead
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    config.addinivalue_line("markers", "own_dagster_home: the world's Dagster home is its own (<home>/dagster), "
                                       "not the worker's shared one: the test edits its dagster.yaml")
    config.addinivalue_line("markers", "separate_processes: the test's other processes open the world's "
                                       "DuckDB file, so the test process keeps it open only per session")


def pytest_collection_finish(session: pytest.Session) -> None:
    # what the worker imported and collected moves to the permanent generation: the collector runs
    # ~2,000 times a module set and walked it each full pass (GC 2.2 -> 0.9 s of 50 CPU-s measured)
    gc.freeze()
    # and the youngest generation collected as the `backfill` console script has it collected
    # (`console.GC_THRESHOLDS`): the commands the tests run in process allocate as much as its own
    # (one run in a worktree: the suite's user CPU 428 -> 407 s; from a fresh clone 433 -> 432 s)
    from backfill_assets.console import GC_THRESHOLDS

    gc.set_threshold(*GC_THRESHOLDS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        if name in LONGEST_FIRST:
            return LONGEST_FIRST.index(name)
        return len(LONGEST_FIRST) + (0 if getattr(item, "originalname", item.name) in LONG_TESTS else 1)

    items.sort(key=rank)  # stable: the order inside each module is kept


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch):
    """No test sees the developer's configuration; each test says what it uses."""
    for name in ("BACKFILL_HOME", "BACKFILL_WAREHOUSE_URL", "BACKFILL_ALLOWED_SIGNERS", "BACKFILL_DEFS",
                 "BACKFILL_CRASH_AT", "BACKFILL_EVIDENCE_KEY_FILE", "DAGSTER_HOME",
                 "BACKFILL_MAX_WINDOW_PARTITIONS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def run_cli(home: Path, capfd):
    """The CLI through its runner (in-process `main`), with --home in tmp_path; output is captured at
    the file descriptors, as a terminal would see it (Dagster's own output goes to the log file)."""

    def run(*args: str) -> Result:
        capfd.readouterr()
        code = cli_main(["--home", str(home), *args])
        captured = capfd.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture(scope="session")
def cli_server(tmp_path_factory):
    """Forks `backfill` commands from one process per worker that imported the package once
    (tests/cli_server.py says what differs from starting the console script: nothing a test sees)."""
    from tests.cli_server import Server

    server = Server(tmp_path_factory.mktemp("cli"))
    yield server
    server.stop()


@pytest.fixture
def run_subprocess(home: Path, tmp_path: Path, cli_server):
    """`backfill` as a real subprocess, from tmp_path: a child of the worker's CLI server, or the
    given command (the console script itself, a hook) started as it is."""

    def run(*args: str, command: list[str] | None = None, timeout: float = 300,
            env: dict[str, str] | None = None, cwd: Path | None = None) -> Result:
        full = {**os.environ, "BACKFILL_HOME": str(home), "PYTHONWARNINGS": "ignore",
                "BACKFILL_DEFS": "backfill_assets.demo.daily", **(env or {})}
        if command is None:
            proc = cli_server.run([str(BIN / "backfill"), *args], full, cwd or tmp_path, timeout)
        else:
            proc = subprocess.run(command, capture_output=True, text=True, env=full, cwd=cwd or tmp_path,
                                  timeout=timeout)
        return Result(proc.returncode, proc.stdout, proc.stderr)

    return run


@pytest.fixture
def instance():
    import dagster as dg

    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture(scope="session")
def ssh_keys(tmp_path_factory):
    from tests.world import make_keys

    return make_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="session")
def shared_dagster_home(tmp_path_factory) -> Path:
    """The Dagster home the worker's worlds share (DAGSTER_HOME: our dagster.yaml, its sqlite storage),
    emptied before each test (`_home_instance`): opening an instance costs ~90 ms (Dagster reads its
    YAML and each storage's config with PyYAML's Python parser), once a test over the suite's ~550
    worlds; emptying the one a worker keeps open, a few milliseconds. Its dagster.yaml is written
    here, in no test's environment: written by a PostgreSQL world first, it named
    ${BACKFILL_WAREHOUSE_URL}, which the worker's later DuckDB worlds do not set."""
    from backfill_assets.dagster_setup import ensure_dagster_home
    from backfill_assets.home import Home

    root = tmp_path_factory.mktemp("dagster-shared")
    with pytest.MonkeyPatch.context() as environment:
        environment.delenv("BACKFILL_WAREHOUSE_URL", raising=False)
        environment.setenv("DAGSTER_HOME", str(root / "dagster"))
        folder, _ = ensure_dagster_home(Home(root))
    # no backfill_home: its run coordinator gates with the test's own home ($BACKFILL_HOME, set by
    # each world), as one team instance shared by homes would; a named one is refused for the others
    config = folder / "dagster.yaml"
    document = yaml.safe_load(config.read_text())
    del document["run_coordinator"]["config"]["backfill_home"]
    config.write_text(yaml.safe_dump(document, sort_keys=False))
    return root / "dagster"


def _home_instance(home: Path, dagster_home: Path, monkeypatch: pytest.MonkeyPatch, own: bool = False):
    """The Dagster instance of a backfill home, as the CLI, the daemon and the UI find it through
    DAGSTER_HOME (set here, for the test and the processes it starts), holding no run, event or tick
    of an earlier test: a world's runs land where the CLI's do. `own`: the home's own
    (`<home>/dagster`, made now), for a test that edits its dagster.yaml."""
    from backfill_assets.dagster_setup import instance_for
    from backfill_assets.home import Home

    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster" if own else dagster_home))
    instance = instance_for(Home(home))
    instance.wipe()
    instance.wipe_all_schedules()
    return contextlib.nullcontext(instance)  # kept open for the worker's next test (the process's exit ends it)


@pytest.fixture(scope="session")
def duckdb_world_template(tmp_path_factory, ssh_keys) -> Path:
    """A DuckDB world's files as `make_world` leaves them (the orders generated, the trust root pinned
    through the control record, the evidence key and chain heads, approvers/allowed_signers): made
    once per worker (~0.4 s), copied per test (a few ms), as the Dagster storage template is."""
    from tests.world import make_world

    root = tmp_path_factory.mktemp("world-template")
    make_world(root, None, ssh_keys, f"duckdb:///{root / 'home' / 'warehouse.duckdb'}")  # whatever the env says
    return root


def _copy_world(template: Path, root: Path) -> None:
    for folder in ("home", "approvers"):
        shutil.copytree(template / folder, root / folder, dirs_exist_ok=True)


# fixtures whose commands run in processes of their own, which open the world's DuckDB file
OTHER_PROCESSES = frozenset({"cli", "run_subprocess", "cli_server"})


def _kept_database(request: pytest.FixtureRequest):
    """The world's DuckDB database loaded once for the test (`kept_open`, as a writing command keeps
    it between its sessions): each session still gets a fresh connection, but joins the open
    database (~0.1 ms) instead of loading it again (~15 ms, cold pages): -20% CPU on the in-process
    modules. Not when another process opens the file (it would wait for the lock)."""
    from backfill_assets.warehouse.duckdb_engine import kept_open

    if OTHER_PROCESSES & set(request.fixturenames) or request.node.get_closest_marker("separate_processes"):
        return contextlib.nullcontext()
    return kept_open()


@pytest.fixture
def world(request, tmp_path, ssh_keys, monkeypatch, shared_dagster_home, duckdb_world_template):
    from tests.world import DEMO_DEFS, World

    monkeypatch.setenv("BACKFILL_DEFS", DEMO_DEFS)
    # as a deployment sets it where Dagster runs: a run's warehouse must be the CLI's
    monkeypatch.setenv("BACKFILL_HOME", str(tmp_path / "home"))
    _copy_world(duckdb_world_template, tmp_path)
    own = request.node.get_closest_marker("own_dagster_home") is not None
    with _home_instance(tmp_path / "home", shared_dagster_home, monkeypatch, own) as instance, \
            _kept_database(request):
        yield World(tmp_path, instance, ssh_keys)


@pytest.fixture(params=["duckdb", "postgresql"])
def engine(request, tmp_path):
    """A bare warehouse engine on each engine: a DuckDB file in tmp_path, an empty PostgreSQL database."""
    from backfill_assets.warehouse import engine_for

    url = f"duckdb:///{tmp_path / 'engine.duckdb'}" if request.param == "duckdb" else \
        request.getfixturevalue("postgres_url")
    return engine_for(url)


@pytest.fixture(params=["duckdb", "postgresql"])
def engine_world(request, tmp_path, ssh_keys, monkeypatch, shared_dagster_home):
    """The same world on each engine: the embedded DuckDB file (a copy of the template), and a real
    PostgreSQL server (made in its fresh database)."""
    from tests.world import DEMO_DEFS, World, make_world

    monkeypatch.setenv("BACKFILL_DEFS", DEMO_DEFS)
    monkeypatch.setenv("BACKFILL_HOME", str(tmp_path / "home"))
    url = None
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres_url")
        monkeypatch.setenv("BACKFILL_WAREHOUSE_URL", url)
    else:
        _copy_world(request.getfixturevalue("duckdb_world_template"), tmp_path)
    kept = _kept_database(request) if url is None else contextlib.nullcontext()
    with _home_instance(tmp_path / "home", shared_dagster_home, monkeypatch) as instance, kept:
        yield World(tmp_path, instance, ssh_keys) if url is None else make_world(tmp_path, instance, ssh_keys, url)


@pytest.fixture
def cli(world, run_subprocess):
    """The `backfill` console script as a subprocess, on the world's home."""
    def run(*args: str, **kw) -> Result:
        return run_subprocess("--home", str(world.home), *args, **kw)
    return run
