"""A table is one asset's: two asset keys naming one physical table (another case on DuckDB, a flat
key for a prefixed one on both engines), the second partitioned by another column, found every day
of the first's history "new" and rewrote it, and its publish what consumers read, without a plan
(found by an attack; each test failed first). Refused now before any write, whether the definitions
hold both tables or only the second (the ledger remembers the first)."""

from __future__ import annotations

from dataclasses import replace

import dagster as dg
import pytest

from backfill_assets.defs.replayable import make_replayable_table
from backfill_assets.defs.resources import backfill_resources
from backfill_assets.demo.definitions import ORDERS, PARTITIONS
from backfill_assets.demo.revenue import BUGGY_SELECT, DAILY_REVENUE
from backfill_assets.table import Metric
from tests.world import failure_text, keys

# The operator's second "replayable table": the same physical DuckDB table as daily_revenue (DuckDB
# resolves quoted identifiers case-insensitively), partitioned by another column (region, static
# key "refunded"), published into published_revenue under another case. For this key the
# permission's questions ("rows where region = 'refunded'?", "a write of Daily_Revenue in the
# ledger?", "published rows where region = 'refunded'?") all answer no, so it is "new".
ALIAS_SELECT = """
SELECT order_date, status AS region,
       count(*) AS orders,
       sum(amount) AS gross,
       CAST(0 AS DECIMAL(18,2)) AS refunds,
       sum(amount) AS net_revenue,
       count(DISTINCT customer_id) AS customers
FROM orders
WHERE status = $partition
GROUP BY order_date, status
"""
ALIAS = replace(
    DAILY_REVENUE, name="Daily_Revenue", publish_as="Published_Revenue", select_sql=ALIAS_SELECT,
    partition_column="region", source_partition_column="status", range_form=False,
    source_keys=(("region", '"status"'),),
    metrics=(Metric("orders", "sum(orders)", "count(*)"), Metric("gross", "sum(gross)", "sum(amount)")),
)
STATUS = dg.StaticPartitionsDefinition(["refunded"])
pytestmark = pytest.mark.filterwarnings("ignore:Asset job .* varying BackfillPolicies")  # target + publish


def _alias_defs(world, *, with_team: bool) -> dg.Definitions:
    tables = [make_replayable_table(ALIAS, STATUS, group_name="revenue")]
    if with_team:
        tables.insert(0, make_replayable_table(DAILY_REVENUE, PARTITIONS, group_name="revenue"))
    alias = tables[-1]
    return dg.Definitions(
        assets=[ORDERS, *(a for t in tables for a in t.assets)],
        jobs=[dg.define_asset_job("alias_job", selection=[alias.target.key, alias.publish.key],
                                  partitions_def=STATUS)],
        resources=backfill_resources(str(world.home), world.url or ""),
        executor=dg.in_process_executor,
    )


def _run(world, defs: dg.Definitions, job: str, tags: dict[str, str], **kw) -> dg.ExecuteInProcessResult:
    with world.deployed():
        return defs.resolve_job_def(job).execute_in_process(
            instance=world.instance, tags={"backfill_assets/actor": "op", **tags}, raise_on_error=False, **kw)


@pytest.mark.parametrize("with_team", [True, False], ids=["both-defined", "alias-alone"])
def test_a_second_asset_over_the_same_table_never_rewrites_its_history(world, with_team):
    """DuckDB folds the case of a quoted name: `Daily_Revenue` is daily_revenue's table."""
    days = keys(1, 3)
    assert world.materialize(days, publish=True).success  # history consumers read now
    before = (world.fingerprints("daily_revenue", days), world.fingerprints("published_revenue", days))
    assert not world.materialize("2026-01-02").success  # history needs a plan
    result = _run(world, _alias_defs(world, with_team=with_team), "alias_job", {"dagster/backfill": "ui-bf"},
                  partition_key="refunded")
    assert not result.success and "two assets cannot share a table" in failure_text(result), failure_text(result)
    assert (world.fingerprints("daily_revenue", days), world.fingerprints("published_revenue", days)) == before


# Without DuckDB's case folding, on either engine: an asset key's parts are joined by "__" into its
# table name (identifiers.table_for_asset), so the flat key `finance__daily_revenue` names the
# table of the team's prefixed key `finance/daily_revenue`.
TEAM = replace(DAILY_REVENUE, name="finance/daily_revenue", publish_as="finance/published_revenue")
FLAT = replace(ALIAS, name="finance__daily_revenue", publish_as="finance__published_revenue")


def test_a_flat_asset_key_naming_a_prefixed_tables_table_never_rewrites_its_history(engine_world):
    world = engine_world
    team = make_replayable_table(TEAM, PARTITIONS, group_name="revenue")
    team_defs = dg.Definitions(
        assets=[ORDERS, *team.assets],
        jobs=[dg.define_asset_job("team_job", selection=[team.target.key, team.publish.key],
                                  partitions_def=PARTITIONS)],
        resources=backfill_resources(str(world.home), world.url or ""), executor=dg.in_process_executor)
    flat = make_replayable_table(FLAT, STATUS, group_name="revenue")
    operator_defs = dg.Definitions(
        assets=[ORDERS, *team.assets, *flat.assets],
        jobs=[dg.define_asset_job("flat_job", selection=[flat.target.key, flat.publish.key], partitions_def=STATUS)],
        resources=backfill_resources(str(world.home), world.url or ""), executor=dg.in_process_executor)
    days = keys(1, 3)
    assert _run(world, team_defs, "team_job", {"dagster/asset_partition_range_start": days[0],
                                               "dagster/asset_partition_range_end": days[-1]}).success
    tables = ("finance__daily_revenue", "finance__published_revenue")
    before = tuple(world.fingerprints(t, days) for t in tables)
    result = _run(world, operator_defs, "flat_job", {"dagster/backfill": "ui-bf"}, partition_key="refunded")
    assert not result.success and "two assets cannot share a table" in failure_text(result), failure_text(result)
    assert tuple(world.fingerprints(t, days) for t in tables) == before


# A second asset key with a table of its own (other_revenue), the same partitioning, whose
# `publish_as` names the team's published table or the team's target: the first check left out
# every name equal to this asset's own name or publish_as, so the team's asset never counted (found
# by an attack on the check). It runs in another code location: Dagster refuses one asset key
# twice in one set of definitions, and the ledger remembers the team's asset.
def _other_defs(world, publish_as: str) -> dg.Definitions:
    spec = replace(DAILY_REVENUE, name="other_revenue", publish_as=publish_as, select_sql=BUGGY_SELECT,
                   metrics=(Metric("orders", "sum(orders)", "count(*)"), Metric("gross", "sum(gross)", "sum(amount)")))
    other = make_replayable_table(spec, PARTITIONS, group_name="other")
    return dg.Definitions(
        assets=[ORDERS, *other.assets],
        jobs=[dg.define_asset_job("other_job", selection=[other.target.key, other.publish.key],
                                  partitions_def=PARTITIONS)],
        resources=backfill_resources(str(world.home), world.url or ""), executor=dg.in_process_executor)


@pytest.mark.parametrize("shared", ["published_revenue", "daily_revenue"], ids=["their-published", "their-target"])
def test_a_publish_as_naming_another_assets_table_is_refused(world, shared):
    assert world.materialize(keys(1, 3), publish=True).success  # the team's history, published
    result = _run(world, _other_defs(world, shared), "other_job", {}, partition_key="2026-01-04")
    assert not result.success and "two assets cannot share a table" in failure_text(result), failure_text(result)
    assert world.rows(shared, "2026-01-04") == 0


def test_a_publish_as_naming_another_assets_table_is_refused_with_the_ledger_hidden(world):
    """Insider, no key, and an operator's second definition (found by an attack): the team's write
    and publication rows deleted while the second definition's target run asked which tables are
    claimed, then put back; its publish step then wrote the team's published table (a day its
    history never had), and `evidence verify` passed. The claims are read from the chain too."""
    from tests.test_trust import _insider_duckdb

    assert world.materialize(keys(1, 3), publish=True).success  # the team's history, published
    _insider_duckdb(world, "CREATE TABLE main.h_writes AS SELECT * FROM backfill_control.writes",
                    "CREATE TABLE main.h_pubs AS SELECT * FROM backfill_control.publications",
                    "DELETE FROM backfill_control.writes", "DELETE FROM backfill_control.publications")
    result = _run(world, _other_defs(world, "published_revenue"), "other_job", {}, partition_key="2026-01-04",
                  asset_selection=[dg.AssetKey("other_revenue")])
    assert not result.success and "which is asset daily_revenue's too" in failure_text(result), failure_text(result)
