"""The replay plan as written: a frozen pydantic model of `templates/backfill-plan.yaml`.

Every block forbids unknown keys, so a typo fails loudly instead of silently dropping a setting.
Numbers are strict (`true` is not 1, `"5"` is not 5) and bounded; names of people are canonical
ASCII principals; partition keys are text, checked against the target's partitions once the
definitions are loaded.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
)

from backfill_assets.errors import PrincipalError
from backfill_assets.signing.principals import canonical_principal

PLAN_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
ASSET_KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*$"
IDENTIFIER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_DATE_PREFIX = re.compile(r"^(\d{4})-(\d{2})-(\d{2})")
_KEY = re.compile(r"^[^\x00-\x1f\x7f]{1,64}$")


def _principal(value: Any) -> str:
    try:
        return canonical_principal(value, "name")
    except PrincipalError as exc:
        raise ValueError(exc.message) from None


def _partition_key(value: Any) -> str:
    """A partition key as text; one that starts like a date must be a real date."""
    if isinstance(value, dt.datetime):
        raise ValueError("give the partition key as text, e.g. 2026-01-05")
    if isinstance(value, dt.date):
        value = value.isoformat()
    if not isinstance(value, str) or not _KEY.match(value.strip()):
        raise ValueError("a partition key is 1-64 printable characters, e.g. 2026-01-05")
    value = value.strip()
    match = _DATE_PREFIX.match(value)
    if match:
        try:
            dt.date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
        except ValueError:
            raise ValueError(f"{value[:10]} is not a real date") from None
    return value


def _number(value: float | int) -> float:
    return float(value)


Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4000)]
Principal = Annotated[str, BeforeValidator(_principal)]
PartitionKey = Annotated[str, BeforeValidator(_partition_key)]
AssetKey = Annotated[str, StringConstraints(strip_whitespace=True, pattern=ASSET_KEY_PATTERN,
                                            max_length=200)]
Identifier = Annotated[str, StringConstraints(strip_whitespace=True, pattern=IDENTIFIER_PATTERN,
                                              max_length=63)]
Percent = Annotated[StrictFloat | StrictInt, Field(ge=0, le=100), AfterValidator(_number)]
Amount = Annotated[StrictFloat | StrictInt, Field(ge=0, le=1e18), AfterValidator(_number)]
Count = Annotated[StrictInt, Field(ge=0, le=10**12)]


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Window(_Block):
    start: PartitionKey
    end: PartitionKey


class Consumer(_Block):
    asset: AssetKey
    owners: Annotated[list[Text], Field(min_length=1, max_length=100)]


class GraphMember(_Block):
    """A replayable table downstream of the target, recomputed by the same plan from the target's
    replayed data: the partitions its partition mapping gives for the target's window."""

    asset: AssetKey
    window: Window


class Execution(_Block):
    mode: Literal["overwrite", "merge", "replay"]
    idempotency: Text
    # the target's business keys; when given they must be the table's (checked at approval)
    business_keys: Annotated[list[Identifier], Field(min_length=1, max_length=32)] | None = None
    proof_partitions: Annotated[list[PartitionKey], Field(min_length=1, max_length=100)]
    # partitions one Dagster run writes, and runs of this plan at once
    partitions_per_run: Annotated[StrictInt, Field(ge=1, le=1000)] = 30
    runs_at_once: Annotated[StrictInt, Field(ge=1, le=16)] = 1
    # optional throttle protecting a busy warehouse
    max_partitions_per_minute: Annotated[StrictInt, Field(ge=1, le=100_000)] | None = None
    # a recomputation that yields no rows where rows existed is refused unless this is true
    allow_empty_partitions: StrictBool = False


class Incremental(_Block):
    watermark: Text
    metrics_comparable: Text


class Publish(_Block):
    pause: Literal[True]
    notify: Annotated[list[Text], Field(min_length=1, max_length=100)]
    webhook_url: Annotated[str, StringConstraints(pattern=r"^https?://\S{1,2000}$")] | None = None


class Rollback(_Block):
    strategy: Text


class RowCountParity(_Block):
    max_diff_pct: Percent


class Duplicates(_Block):
    max_rows: Count


class MetricCheck(_Block):
    """A metric compared per business-key group; both tolerances 0 (the default) means exact.

    tolerance_pct is in percent of the source figure (0.01 = 0.01%, one part in ten thousand);
    tolerance_abs is in the metric's own unit. A difference within either passes.
    """

    name: Identifier
    tolerance_pct: Percent = 0.0
    tolerance_abs: Amount = 0.0


class Contract(_Block):
    enforce: Literal[True]


class Checks(_Block):
    row_count_parity: RowCountParity
    duplicates: Duplicates
    metrics: Annotated[list[MetricCheck], Field(min_length=1, max_length=100)]
    contract: Contract
    source_duplicates: Duplicates = Duplicates(max_rows=0)


class Approval(_Block):
    """A signed approval: an SSH signature by `by` over a `plan approval` statement binding the
    plan's sha256, its table's code, the warehouse and an expiry (see signing.statements): `at` is
    when it was signed. Entries of the earlier form (the hash alone) load, and count for nothing."""

    by: Principal
    at: dt.datetime
    plan_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    code: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    warehouse: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = None
    expires: dt.datetime | None = None
    signature: Annotated[str, StringConstraints(min_length=1, max_length=20_000)]


class Approvals(_Block):
    required: Annotated[StrictInt, Field(ge=1, le=20)]
    granted: Annotated[list[Approval], Field(max_length=100)] = Field(default_factory=list)


class Plan(_Block):
    plan_id: Annotated[str, StringConstraints(strip_whitespace=True, pattern=PLAN_ID_PATTERN)]
    owner: Principal
    reason: Text
    target: AssetKey
    window: Window
    source_of_truth: AssetKey
    downstream: Annotated[list[Consumer], Field(min_length=1, max_length=100)]
    execution: Execution
    incremental: Incremental
    publish: Publish
    rollback: Rollback
    checks: Checks
    approvals: Approvals
    # every replayable table downstream of the target (derived from the asset graph, checked
    # against it): the plan recomputes, gates and publishes them with the target, as one
    graph: Annotated[list[GraphMember], Field(max_length=100)] = Field(default_factory=list)

    @property
    def assets(self) -> list[str]:
        """The tables the plan writes: the target first, then its graph in dependency order."""
        return [self.target, *(m.asset for m in self.graph)]

    @property
    def proof_keys(self) -> list[str]:
        return list(self.execution.proof_partitions)
