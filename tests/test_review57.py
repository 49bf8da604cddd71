"""Problems a review of the day's changes found; each test failed on the code before its fix (found
by a review). No `from __future__ import annotations`: Dagster reads the asset functions' annotations."""

import dagster as dg
import pytest

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import WarehouseResource
from backfill_assets.demo.definitions import ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE
from tests.test_team_graph import _quick_fix, _run
from tests.world import failure_text


@pytest.mark.separate_processes
@pytest.mark.parametrize("schema", ["", "main/**/"])
def test_an_asset_whose_schema_metadata_is_empty_or_commented_refuses_the_table(world, monkeypatch, schema):
    """A team's pandas asset keyed `staging/published_revenue` whose `schema` metadata is empty (Dagster's
    IO manager then takes its own `schema` config, `main` here) or `main/**/` (DuckDB drops the comment
    in `main/**/.published_revenue`): both write main.published_revenue, the table consumers read. The
    namesake check read them as the schemas "" and "main/**/" and let the table run and publish beside
    it (found by a review)."""
    from dagster_duckdb_pandas import DuckDBPandasIOManager

    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    day = "2026-01-02"
    quick_fix = _quick_fix(["staging", "published_revenue"], schema=schema)
    table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
    defs = dg.Definitions(assets=[ORDERS, *table.assets, quick_fix],
                          resources={"warehouse": WarehouseResource(home=str(world.home)),
                                     "io_manager": DuckDBPandasIOManager(database=str(world.warehouse_path),
                                                                         schema="main")})
    launched = defs.resolve_implicit_global_asset_job_def().execute_in_process(  # reachable: writes main's table
        instance=world.instance, asset_selection=[dg.AssetKey(["staging", "published_revenue"])],
        tags={"dagster/partition": day}, raise_on_error=False)
    assert launched.success and world.rows("published_revenue", day) == 1, failure_text(launched)
    world.run_sql("DROP TABLE published_revenue")

    ours = _run(world, defs, ["daily_revenue", "published_revenue"], [day])
    assert not ours.success and "staging/published_revenue" in failure_text(ours), (
        f"the table ran beside an asset whose schema metadata {schema!r} names main: {failure_text(ours) or 'success'}")
    assert world.rows("published_revenue", day) == 0


FILES_JOB = '''
import dagster as dg
import pandas as pd
from dagster_duckdb_pandas import DuckDBPandasIOManager
from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.demo.definitions import ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE
from backfill_assets.defs.resources import backfill_resources

@dg.op(out={"published_revenue": dg.Out(io_manager_key=KEY)})
def extract_revenue():
    return pd.DataFrame({"region": ["north"], "net_revenue": [1.0]})

@dg.job
def revenue_report():
    extract_revenue()

table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
defs = dg.Definitions(assets=[ORDERS, *table.assets], jobs=[revenue_report], sensors=table.sensors,
                      resources={**backfill_resources(), "files": FILES, "memory": dg.mem_io_manager,
                                 "io_manager": DuckDBPandasIOManager(database=WAREHOUSE, schema="main")})
'''


@pytest.mark.separate_processes
@pytest.mark.parametrize(("key", "files"), [("files", "dg.FilesystemIOManager(base_dir=BASE)"),
                                             ("files", "dg.fs_io_manager"), ("memory", "None")])
def test_an_op_output_named_like_the_table_but_kept_in_files_or_memory_does_not_refuse_it(
        world, monkeypatch, run_cli, key, files):
    """The team's report job names an op's output `published_revenue` and keeps it with Dagster's
    filesystem (or in-memory) IO manager: it writes a pickle under the run's storage, never a warehouse
    table. The namesake check read every op output as dagster-duckdb's and refused every load and
    plan of daily_revenue (found by a review)."""
    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    day = "2026-01-02"
    module = world.root / "team_report.py"
    module.write_text(f"WAREHOUSE = {str(world.warehouse_path)!r}\nBASE = {str(world.root / 'files')!r}\n"
                      f"KEY = {key!r}\nimport dagster as dg\nFILES = {files}\n{FILES_JOB}", encoding="utf-8")
    loaded = run_cli("load", "daily_revenue", "--start", day, "--end", day, "--defs", str(module))
    assert loaded.code == 0, f"refused beside an op output kept in {files}: {loaded.out}{loaded.err}"
    assert world.rows("daily_revenue", day) > 0


def _many_asset_jobs() -> dg.Definitions:
    partitions = dg.DailyPartitionsDefinition(start_date="2020-01-01")
    assets = []
    for i in range(200):
        @dg.asset(name=f"step_{i}", partitions_def=partitions, deps=[f"step_{i - 1}"] if i else [])
        def step() -> None:
            return None

        assets.append(step)
    jobs = [dg.define_asset_job(f"from_{i}", selection=dg.AssetSelection.assets(f"step_{i}").downstream())
            for i in range(60)]
    return dg.Definitions(assets=assets, jobs=jobs)


def test_the_implicit_job_of_definitions_with_many_asset_jobs_does_not_build_them_all():
    """A team's definitions with many asset jobs (200 assets in a chain, 60 jobs from some of them on):
    every `backfill run` and `load` (and every run worker) built each asset job to read the op jobs'
    outputs, seconds for each command where the implicit job alone takes a tenth of one; asset jobs hold
    no output the implicit job does not (found by a review)."""
    import time
    import warnings

    from backfill_assets.graph import implicit_job

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        started = time.perf_counter()
        _many_asset_jobs().get_repository_def().get_all_jobs()
        every_job = time.perf_counter() - started
        started = time.perf_counter()
        implicit_job(_many_asset_jobs())
        ours = time.perf_counter() - started
    assert ours < every_job / 3, f"implicit_job took {ours:.2f}s, building every job {every_job:.2f}s"



SPELLED_JOB = '''
import dagster as dg
import pandas as pd
from pathlib import Path
from dagster_duckdb_pandas import DuckDBPandasIOManager
from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.demo.definitions import ORDERS, PARTITIONS
from backfill_assets.demo.revenue import DAILY_REVENUE
from backfill_assets.defs.resources import backfill_resources

CATALOG = Path(WAREHOUSE).stem

@dg.op(out={"extract": dg.Out(metadata=eval(METADATA))})
def extract_revenue():
    return pd.DataFrame({"order_date": [pd.Timestamp("2026-01-02")], "region": ["north"], "orders": [1],
                         "gross": [1.0], "refunds": [0.0], "net_revenue": [1_000_000.0], "customers": [1]})

@dg.job
def legacy_extract():
    extract_revenue()

table = make_replayable_table(DAILY_REVENUE, PARTITIONS)
defs = dg.Definitions(assets=[ORDERS, *table.assets], jobs=[legacy_extract], sensors=table.sensors,
                      resources={**backfill_resources(),
                                 "io_manager": DuckDBPandasIOManager(database=WAREHOUSE, schema="main")})
'''


@pytest.mark.separate_processes
@pytest.mark.parametrize("metadata", ['{"table": \'"published_revenue"\'}', '{"table": "published_revenue "}',
                                      '{"table": "main.published_revenue", "schema": CATALOG}'])
def test_an_op_output_whose_table_metadata_spells_the_published_table_otherwise_refuses_the_table(
        world, monkeypatch, run_cli, metadata):
    """The team's older op job keeps its output in a table its `table` metadata names: quoted
    (`"published_revenue"`), with a space after it, or schema-qualified under a catalog `schema`
    (`warehouse` + `main.published_revenue`). dagster-duckdb writes `main."published_revenue"`,
    `main.published_revenue ` and `warehouse.main.published_revenue`: main.published_revenue each
    time, the table consumers read, replaced whole. The namesake check compared the metadata's text
    with the table's name and let the table load and publish beside the job (found by a review)."""
    import importlib.util

    monkeypatch.setenv("BACKFILL_HOME", str(world.home))
    day = "2026-01-02"
    module = world.root / "team_spelled.py"
    module.write_text(f"WAREHOUSE = {str(world.warehouse_path)!r}\nMETADATA = {metadata!r}\n{SPELLED_JOB}",
                      encoding="utf-8")
    spec = importlib.util.spec_from_file_location("team_spelled", module)
    assert spec is not None and spec.loader is not None
    team = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(team)
    launched = team.defs.get_job_def("legacy_extract").execute_in_process(instance=world.instance,
                                                                          raise_on_error=False)
    assert launched.success and world.rows("published_revenue", day) == 1, failure_text(launched)
    world.run_sql("DROP TABLE published_revenue")

    loaded = run_cli("load", "daily_revenue", "--start", day, "--end", day, "--defs", str(module))
    assert loaded.code != 0 and "extract_revenue.extract" in loaded.out + loaded.err, (
        f"the table loaded beside an op job whose output the IO manager writes into its published table: "
        f"{loaded.out}{loaded.err}")
    assert world.rows("daily_revenue", day) == 0 and world.rows("published_revenue", day) == 0
