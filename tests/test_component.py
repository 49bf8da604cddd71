"""The YAML component builds the same definitions as the Python factory, and rejects typos."""

from __future__ import annotations

import dataclasses

import dagster as dg
import pytest
import yaml
from pydantic import ValidationError

from backfill_assets.defs.component import ReplayableTableComponent
from backfill_assets.errors import IdentifierError
from backfill_assets.gates.results import GATE_NAMES
from examples.revenue import DAILY_REVENUE

ATTRIBUTES = {
    "name": "daily_revenue", "source": "orders", "publish_as": "published_revenue",
    "partitions_start_date": "2026-01-01", "select_sql": DAILY_REVENUE.select_sql,
    "partition_column": "order_date", "source_partition_column": "order_date",
    "business_keys": ["order_date", "region"],
    "contract": [{"name": c.name, "type": c.type, "nullable": c.nullable}
                 for c in DAILY_REVENUE.contract],
    "metrics": [{"name": m.name, "target_sql": m.target_sql, "source_sql": m.source_sql}
                for m in DAILY_REVENUE.metrics],
    "expected_rows_sql": DAILY_REVENUE.expected_rows_sql, "code_version": "2",
}


def test_component_from_yaml_builds_target_checks_publish_and_sensor():
    component = ReplayableTableComponent.resolve_from_yaml(yaml.safe_dump(ATTRIBUTES))
    built = component.spec()
    assert built.select_sql.strip() == DAILY_REVENUE.select_sql.strip()
    assert dataclasses.replace(built, select_sql=DAILY_REVENUE.select_sql,
                               description=DAILY_REVENUE.description) == DAILY_REVENUE
    defs = component.build_defs(dg.ComponentTree.for_test().load_context)
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} >= {
        "daily_revenue", "published_revenue"}
    assert sorted(c.name for c in graph.asset_check_keys) == sorted(GATE_NAMES)
    assert defs.resolve_sensor_def("daily_revenue__reopen_publish") is not None


def test_component_rejects_unknown_keys_and_bad_identifiers():
    with pytest.raises(ValidationError, match="busines_keys"):
        ReplayableTableComponent.resolve_from_yaml(yaml.safe_dump({**ATTRIBUTES,
                                                                   "busines_keys": ["x"]}))
    bad = ReplayableTableComponent.resolve_from_yaml(yaml.safe_dump(
        {**ATTRIBUTES, "business_keys": ["order_date; DROP TABLE orders"]}))
    with pytest.raises(IdentifierError, match="not a plain SQL identifier"):
        bad.spec()


def test_public_api_is_importable_from_the_package():
    import backfill_assets

    assert backfill_assets.make_replayable_table.__name__ == "make_replayable_table"
    assert backfill_assets.TableSpec is DAILY_REVENUE.__class__
