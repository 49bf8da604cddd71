"""The notice relay, as a Dagster sensor of its own: a team that drives its backfills from the Dagster
UI gets its webhook notices on time, as a CLI user gets them after each command. Each tick delivers
the notices the outbox holds through `publish.notify.deliver_pending`, the one relay the CLI runs
too, and reports what it delivered, what failed (retried with backoff) or why it waits, as its skip
reason. The reopen sensor only requests runs and reports; it delivers nothing.

It runs every 30 seconds. One relay serves a warehouse resource key: every replayable table of the
definitions returns the same one (`ReplayableTable.relay`), so a code location holds it once
(`backfill_notice_relay`; `backfill_notice_relay__KEY` for a team's own resource key).
"""

import functools

import dagster as dg

from backfill_assets.defs.resources import DEFAULT_KEY, as_warehouse
from backfill_assets.publish.notify import deliver_pending

RELAY_NAME = "backfill_notice_relay"
INTERVAL_SECONDS = 30
LOCK_WAIT_SECONDS = 10.0  # a tick stays short: a warehouse busy longer waits for the next tick
BUDGET_SECONDS = 10.0  # every delivery of one tick; what is left waits for the next tick


def relay_name(warehouse_key: str = DEFAULT_KEY) -> str:
    return RELAY_NAME if warehouse_key == DEFAULT_KEY else f"{RELAY_NAME}__{warehouse_key}"


def make_notice_relay(warehouse_key: str = DEFAULT_KEY) -> dg.SensorDefinition:
    """The relay of the warehouse behind `warehouse_key`: one object per key, so the tables that
    share a warehouse share their relay (Dagster refuses two sensors of one name)."""
    return _relay_of(warehouse_key)  # cached on the key alone, however the caller spelled the call


@functools.cache
def _relay_of(warehouse_key: str) -> dg.SensorDefinition:

    @dg.sensor(
        name=relay_name(warehouse_key),
        minimum_interval_seconds=INTERVAL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Delivers the notices to downstream owners (publish frozen, reopened, a plan ended) "
                    "queued in the outbox to their webhooks, and retries failed ones with backoff.",
        required_resource_keys={warehouse_key},
    )
    def relay(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        warehouse = as_warehouse(getattr(context.resources, warehouse_key), warehouse_key)
        relayed = deliver_pending(warehouse.warehouse(), wait_seconds=LOCK_WAIT_SECONDS, budget=BUDGET_SECONDS)
        if relayed.failed or relayed.waiting:
            context.log.warning(relayed.line())
        return dg.SkipReason(relayed.line())

    return relay
