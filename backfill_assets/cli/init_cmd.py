"""`backfill init`: the warehouse's control schema and DAGSTER_HOME with our dagster.yaml."""

from __future__ import annotations

import argparse

from backfill_assets.cli.common import add_home, home_of
from backfill_assets.control.schema import ensure_schema
from backfill_assets.warehouse.connection import connection


def register(sub: argparse._SubParsersAction) -> None:
    init = sub.add_parser("init", help="create the control schema and DAGSTER_HOME/dagster.yaml")
    add_home(init)
    init.set_defaults(handler=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    from backfill_assets.dagster_setup import ensure_dagster_home

    home = home_of(args)
    with connection(home.warehouse) as con:
        ensure_schema(con)
    dagster_home = ensure_dagster_home(home)
    print(f"warehouse    {home.warehouse}")
    print(f"DAGSTER_HOME {dagster_home} (dagster.yaml: plan-gate run coordinator, per-plan caps)")
    print(f"export BACKFILL_HOME={home.root} DAGSTER_HOME={dagster_home}")
    return 0
