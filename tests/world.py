"""A real warehouse, real Dagster definitions and instance, and approved plans, in tmp_path."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, replace
from pathlib import Path

import dagster as dg
import duckdb

from backfill_assets.cli import main as cli_main
from backfill_assets.defs.replayable import ACTOR_TAG
from backfill_assets.plan.gate import BACKFILL_TAG, PLAN_TAG
from backfill_assets.sample import generate_orders
from backfill_assets.table import TableSpec
from backfill_assets.warehouse.connection import connection
from backfill_assets.warehouse.fingerprints import Fingerprint, fingerprints
from examples.definitions import build_definitions
from examples.revenue import DAILY_REVENUE, DAILY_REVENUE_V1
from tests.plans import complete_plan, write_plan

START = dt.date(2026, 1, 1)
DAYS = 8


@dataclass
class World:
    root: Path
    instance: dg.DagsterInstance

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse.duckdb"

    def defs(self, spec: TableSpec = DAILY_REVENUE) -> dg.Definitions:
        return build_definitions(spec, database=str(self.warehouse))

    def cli(self, *args: str) -> int:
        return cli_main(["--home", str(self.home), *args])

    def plan(self, name: str = "fix", **kwargs) -> Path:
        path = write_plan(self.root / f"{name}.yaml", complete_plan(plan_id=name, **kwargs))
        return path

    def approve(self, path: Path) -> Path:
        """Two approvals by non-owners, through the CLI."""
        assert self.cli("plan", "approve", str(path), "--by", "alice") == 0
        assert self.cli("plan", "approve", str(path), "--by", "bob") == 0
        return path

    def approved_plan(self, name: str = "fix", **kwargs) -> Path:
        return self.approve(self.plan(name, **kwargs))

    def materialize(self, keys: list[str] | str, *, tags: dict[str, str] | None = None,
                    spec: TableSpec = DAILY_REVENUE, publish: bool = False,
                    target: bool = True) -> dg.ExecuteInProcessResult:
        keys = [keys] if isinstance(keys, str) else keys
        run_tags = dict(tags or {})
        if "dagster/asset_partition_range_start" in run_tags:
            pass  # the caller's range (e.g. a sensor's request) is used as given
        elif len(keys) == 1:
            run_tags["dagster/partition"] = keys[0]
        else:
            run_tags["dagster/asset_partition_range_start"] = keys[0]
            run_tags["dagster/asset_partition_range_end"] = keys[-1]
        run_tags.setdefault(ACTOR_TAG, "test")
        defs = self.defs(spec)
        selection = ([dg.AssetKey(spec.name)] if target else []) + \
            ([dg.AssetKey(spec.publish_as)] if publish else [])
        job = defs.resolve_implicit_global_asset_job_def()
        return job.execute_in_process(instance=self.instance, asset_selection=selection,
                                      tags=run_tags, raise_on_error=False)

    def backfill(self, keys, backfill_id: str = "ui-bf", **kw) -> dg.ExecuteInProcessResult:
        """A run as the backfill daemon submits it: tagged dagster/backfill."""
        return self.materialize(keys, tags={BACKFILL_TAG: backfill_id}, **kw)

    def plan_run(self, plan_id: str, keys, **kw) -> dg.ExecuteInProcessResult:
        return self.materialize(keys, tags={PLAN_TAG: plan_id}, **kw)

    def fingerprints(self, table: str, keys: list[str]) -> dict[str, Fingerprint]:
        with connection(self.warehouse) as con:
            return fingerprints(con, table, "order_date", keys)

    def sql(self, query: str, params: list | None = None) -> list[tuple]:
        with connection(self.warehouse) as con:
            return con.execute(query, params or []).fetchall()

    def rows(self, table: str, key: str) -> int:
        try:
            return self.sql(f"SELECT count(*) FROM {table} WHERE order_date = ?", [key])[0][0]
        except duckdb.CatalogException:
            return 0


def failure_text(result: dg.ExecuteInProcessResult) -> str:
    texts = []
    for event in result.all_events:
        if event.is_step_failure and event.event_specific_data is not None:
            error = getattr(event.event_specific_data, "error", None)
            if error is not None:
                texts.append(error.message)
            user = getattr(event.event_specific_data, "user_failure_data", None)
            if user is not None and user.description:
                texts.append(user.description)
    return "\n".join(texts)


def make_world(tmp_path: Path, instance: dg.DagsterInstance) -> World:
    world = World(tmp_path, instance)
    world.home.mkdir(parents=True, exist_ok=True)
    with connection(world.warehouse) as con:
        generate_orders(con, start=START, days=DAYS, rows_per_day=300, seed=11)
    return world


def keys(first: int, last: int) -> list[str]:
    return [(START + dt.timedelta(days=i - 1)).isoformat() for i in range(first, last + 1)]


BUGGY = DAILY_REVENUE_V1
FIXED = DAILY_REVENUE
__all__ = ["BUGGY", "FIXED", "World", "failure_text", "keys", "make_world", "replace"]
