"""The run tags backfill-assets reads and writes, by name, and the tags `backfill run` puts on its runs.

Plain strings with no Dagster import: the coordinator, the runner, the permission and the sensor
agree on them from here, so none of them imports another layer for a name.
"""

from __future__ import annotations

import os
import socket

# Dagster's own: set on every run of a backfill, and on a range run of an asset's partitions
BACKFILL_TAG = "dagster/backfill"
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
RUN_KEY = "dagster/run_key"  # a sensor's run key, on the run the daemon launched for it

PLAN_TAG = "backfill_assets/plan"
# on a replayable table's op (its value: the table) and, reserved, on its target asset
REPLAYABLE_OP_TAG = "backfill_assets/replayable"
ACTOR_TAG = "backfill_assets/actor"
PID_TAG = "backfill_assets/pid"
HOST_TAG = "backfill_assets/host"
# the process of PID_TAG as no clock step changes it (`environment.process_identity`): a run's
# creation time, the wall clock's, moves with a step (found by an attack)
PROCESS_TAG = "backfill_assets/process"
# on every run `backfill run` launches, in-process or in its worker processes: "<host>:<pid>" of
# the process holding the lease. A label for coordination, not authority: whoever sets it still
# needs the plan's write permission.
LAUNCHER_TAG = "backfill_assets/launcher"
# one per cap: dagster.yaml limits the runs sharing a value of `backfill_assets/plan-cap-N` to N
CAP_TAG = "backfill_assets/plan-cap-{}"
MAX_CAP = 16


def cli_run_tags(plan_id: str | None, actor: str, launcher: str | None = None,
                 process: str | None = None) -> dict[str, str]:
    """Tags of the runs `backfill run` launches: labels for the UI, for finding dead runs (the
    process running it, and `process`, its identity) and for the plan's lease (the process holding
    it, `launcher`; by default this one)."""
    tags = {ACTOR_TAG: actor, PID_TAG: str(os.getpid()), HOST_TAG: socket.gethostname(),
            LAUNCHER_TAG: launcher or f"{socket.gethostname()}:{os.getpid()}"}
    if process:
        tags[PROCESS_TAG] = process
    if plan_id:
        tags[PLAN_TAG] = plan_id
    return tags


# the job of the runs that show verdicts the ledger recorded outside a target's run (`defs/verdicts_shown.py`)
VERDICTS_JOB = "backfill_verdicts"
