"""The replay plan as written: a frozen pydantic model of `templates/backfill-plan.yaml`.

Every block forbids unknown keys, so a typo fails loudly instead of silently dropping a setting.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

PLAN_ID_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"
ASSET_KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(/[A-Za-z_][A-Za-z0-9_]*)*$"
IDENTIFIER_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
AssetKey = Annotated[str, StringConstraints(strip_whitespace=True, pattern=ASSET_KEY_PATTERN)]
Identifier = Annotated[str, StringConstraints(strip_whitespace=True, pattern=IDENTIFIER_PATTERN)]
Percent = Annotated[float, Field(ge=0, le=100)]


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Window(_Block):
    start: dt.date
    end: dt.date


class Consumer(_Block):
    asset: AssetKey
    owners: Annotated[list[Text], Field(min_length=1)]


class Execution(_Block):
    mode: Literal["overwrite", "merge", "replay"]
    idempotency: Text
    business_keys: Annotated[list[Identifier], Field(min_length=1)]
    max_concurrent_partitions: Annotated[int, Field(ge=1)]
    proof_partitions: Annotated[list[dt.date], Field(min_length=1)]
    # A recomputation that yields no rows where rows existed is refused unless this is true.
    allow_empty_partitions: bool = False


class Incremental(_Block):
    watermark: Text
    metrics_comparable: Text


class Publish(_Block):
    pause: Literal[True]
    notify: Annotated[list[Text], Field(min_length=1)]
    webhook_url: str | None = None

    @field_validator("webhook_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://", value):
            raise ValueError("must start with http:// or https://")
        return value


class Rollback(_Block):
    strategy: Text


class RowCountParity(_Block):
    max_diff_pct: Percent


class Duplicates(_Block):
    max_rows: Annotated[int, Field(ge=0)]


class MetricCheck(_Block):
    name: Identifier
    tolerance_pct: Percent


class Contract(_Block):
    enforce: Literal[True]


class Checks(_Block):
    row_count_parity: RowCountParity
    duplicates: Duplicates
    metrics: Annotated[list[MetricCheck], Field(min_length=1)]
    contract: Contract


class Approval(_Block):
    by: Text
    at: dt.datetime
    plan_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class Approvals(_Block):
    required: Annotated[int, Field(ge=1)]
    granted: list[Approval] = Field(default_factory=list)


class Plan(_Block):
    plan_id: Annotated[str, StringConstraints(strip_whitespace=True, pattern=PLAN_ID_PATTERN)]
    owner: Text
    reason: Text
    target: AssetKey
    window: Window
    source_of_truth: AssetKey
    downstream: Annotated[list[Consumer], Field(min_length=1)]
    execution: Execution
    incremental: Incremental
    publish: Publish
    rollback: Rollback
    checks: Checks
    approvals: Approvals

    @property
    def partition_keys(self) -> list[str]:
        """Daily partition keys of the inclusive window, in order."""
        days = (self.window.end - self.window.start).days
        return [(self.window.start + dt.timedelta(days=i)).isoformat() for i in range(days + 1)]

    @property
    def proof_keys(self) -> list[str]:
        return [d.isoformat() for d in self.execution.proof_partitions]
