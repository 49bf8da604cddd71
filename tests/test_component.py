"""The YAML component builds the same definitions as the Python factory, and rejects typos."""

from __future__ import annotations

import dataclasses

import dagster as dg
import pytest
import yaml
from pydantic import ValidationError

from backfill_assets.defs.component import ReplayableTableComponent
from backfill_assets.demo.definitions import build_definitions
from backfill_assets.demo.revenue import DAILY_REVENUE
from backfill_assets.errors import IdentifierError
from backfill_assets.gates.results import GATE_NAMES
from backfill_assets.graph import find_tables

ATTRIBUTES = {
    "name": "daily_revenue", "source": "orders", "publish_as": "published_revenue",
    "partitions": {"cadence": "daily", "start": "2026-01-01"}, "select_sql": DAILY_REVENUE.select_sql,
    "partition_column": "order_date", "source_partition_column": "order_date",
    "business_keys": ["order_date", "region"], "source_event_id": "order_id",
    "contract": [{"name": c.name, "type": c.type, "nullable": c.nullable} for c in DAILY_REVENUE.contract],
    "metrics": [{"name": m.name, "target_sql": m.target_sql, "source_sql": m.source_sql}
                for m in DAILY_REVENUE.metrics],
    "code_version": 2, "description": DAILY_REVENUE.description, "range_form": True,
}


def test_the_component_builds_exactly_what_the_factory_builds():
    component = ReplayableTableComponent.resolve_from_yaml(yaml.safe_dump(ATTRIBUTES))
    built = component.spec()
    assert built.select_sql.strip() == DAILY_REVENUE.select_sql.strip()  # YAML keeps no trailing newline
    assert dataclasses.replace(built, select_sql=DAILY_REVENUE.select_sql) == DAILY_REVENUE
    defs = component.build_defs(dg.ComponentTree.for_test().load_context)
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in graph.get_all_asset_keys()} >= {"daily_revenue", "published_revenue"}
    assert sorted(c.name for c in graph.asset_check_keys) == sorted(GATE_NAMES)
    assert defs.resolve_sensor_def("daily_revenue__reopen_publish") is not None
    assert defs.resolve_sensor_def("backfill_notice_relay") is not None
    # the spec the CLI reads from the loaded definitions is the one the component declared
    [(spec, partitions)] = find_tables(defs).values()
    [(factory_spec, factory_partitions)] = find_tables(build_definitions()).values()
    assert dataclasses.replace(spec, select_sql=DAILY_REVENUE.select_sql) == factory_spec == DAILY_REVENUE
    assert partitions.get_partition_keys()[:3] == factory_partitions.get_partition_keys()[:3]


def test_a_rollup_declared_in_yaml_joins_its_sources_graph_with_its_partition_mapping():
    from backfill_assets.demo.revenue import MONTHLY_REVENUE
    from backfill_assets.graph import TableGraph

    rollup = {"name": "monthly_revenue", "source": "daily_revenue", "publish_as": "published_monthly_revenue",
              "partitions": {"cadence": "monthly", "start": "2026-01-01"}, "select_sql": MONTHLY_REVENUE.select_sql,
              "partition_column": "month", "source_partition_column": "order_date",
              "business_keys": ["month", "region"], "source_keys": dict(MONTHLY_REVENUE.source_keys),
              "contract": [{"name": c.name, "type": c.type, "nullable": c.nullable} for c in MONTHLY_REVENUE.contract],
              "metrics": [{"name": m.name, "target_sql": m.target_sql, "source_sql": m.source_sql}
                          for m in MONTHLY_REVENUE.metrics], "range_form": True}
    context = dg.ComponentTree.for_test().load_context
    days = ReplayableTableComponent.resolve_from_yaml(yaml.safe_dump(ATTRIBUTES)).build_defs(context)
    plain = ReplayableTableComponent.resolve_from_yaml(yaml.safe_dump(rollup)).build_defs(context)
    # two tables of one warehouse share their notice relay: a project of both loads, with one relay
    both = dg.Definitions.merge(days, plain)
    assert both.resolve_sensor_def("backfill_notice_relay") is days.resolve_sensor_def("backfill_notice_relay")
    assert both.resolve_sensor_def("monthly_revenue__reopen_publish") is not None
    # each month reads its own days and the month before's last: an end offset of one partition
    shifted = ReplayableTableComponent.resolve_from_yaml(yaml.safe_dump(
        {**rollup, "source_partition_mapping": {"time_window": {"start_offset": -1, "end_offset": 0}}}))
    for month, feb_reads in ((plain, "2026-02-01"), (shifted.build_defs(context), "2026-01-01")):
        graph = TableGraph.of(dg.Definitions.merge(days, month).resolve_asset_graph())
        assert [m.asset for m in graph.derive("daily_revenue", ["2026-01-31"])] == ["daily_revenue", "monthly_revenue"]
        assert graph.upstream_keys("monthly_revenue", "2026-02-01")[0] == feb_reads
    with pytest.raises(ValidationError, match="weekly"):
        ReplayableTableComponent.resolve_from_yaml(yaml.safe_dump({**rollup,
                                                                   "source_partition_mapping": {"weekly": 1}}))


def test_the_component_rejects_unknown_keys_and_bad_identifiers():
    with pytest.raises(ValidationError, match="busines_keys"):
        ReplayableTableComponent.resolve_from_yaml(yaml.safe_dump({**ATTRIBUTES, "busines_keys": ["x"]}))
    bad = ReplayableTableComponent.resolve_from_yaml(yaml.safe_dump(
        {**ATTRIBUTES, "business_keys": ["order_date; DROP TABLE orders"]}))
    with pytest.raises(IdentifierError, match="not a plain SQL identifier"):
        bad.spec()
    # the write stage tags each row with columns of this prefix beside the contract's
    clash = ReplayableTableComponent.resolve_from_yaml(yaml.safe_dump(
        {**ATTRIBUTES, "contract": [*ATTRIBUTES["contract"], {"name": "backfill_stage_lo", "type": "DATE"}]}))
    with pytest.raises(IdentifierError, match="backfill_stage_lo.*reserves"):
        clash.spec()


@pytest.mark.parametrize("source", ["daily_revenue", "DAILY_REVENUE", "published_revenue"])
def test_a_table_declared_as_its_own_source_is_refused(source):
    """A table computed from itself (or from its own published table): the gates compared it with
    itself, so every one passed whatever it held, and a replay read what it wrote. It was declared
    without a word; it is refused, naming the table to name instead."""
    import dataclasses

    from backfill_assets.demo.revenue import DAILY_REVENUE

    with pytest.raises(IdentifierError, match="its own source"):
        dataclasses.replace(DAILY_REVENUE, source=source)


def test_the_public_api_builds_a_working_table():
    import backfill_assets

    table = backfill_assets.make_replayable_table(DAILY_REVENUE, dg.DailyPartitionsDefinition("2026-01-01"))
    assert table.spec is DAILY_REVENUE and table.target.key == dg.AssetKey("daily_revenue")
    assert isinstance(backfill_assets.WarehouseResource(home="/tmp/x"), dg.ConfigurableResource)
    assert set(backfill_assets.backfill_resources()) == {"warehouse"}
