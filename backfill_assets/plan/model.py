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
from urllib.parse import urlsplit

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
    ValidationInfo,
    field_validator,
    model_validator,
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
    return str(value)


def _number(value: float | int) -> float:
    return float(value)


# characters that change how text shows on a terminal rather than showing: C0 and C1 controls (ESC
# starts an escape sequence; a carriage return writes over the line), the line and paragraph
# separators, and the bidirectional controls (text read in another order than it is stored)
_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


# what `plan_from_canonical` validates with: a version approved before these characters were refused
# is read back as it was signed (refused, the plan had no rollback and no cancel: no way out)
STORED = {"stored": True}


def _stored(info: ValidationInfo) -> bool:
    return isinstance(info.context, dict) and info.context.get("stored") is True


def _shows_as_written(value: str, info: ValidationInfo) -> str:
    """Free text a command prints (the guard's checklist, `plan show`, notices) is text a reader sees as
    it is: a plan's `failure` holding a line break and ESC[8m printed a forged `ALLOWED` line on the
    guard's output and concealed the real verdict, for a plan nobody signed (found by an attack)."""
    found = None if _stored(info) else _HIDDEN.search(value)
    if found:
        raise ValueError(f"it holds the control character U+{ord(found.group()):04X}, which changes how the text "
                         "shows on a terminal (an escape sequence, a carriage return, a bidirectional control); "
                         "write plain text (line breaks and tabs are fine)")
    return value


def _one_line(value: str, info: ValidationInfo) -> str:
    if not _stored(info) and ("\n" in value or "\t" in value):
        raise ValueError("a name is one line, without tabs: write one name per list item")
    return value


def flat(text: str) -> str:
    """Free text (which may hold line breaks) said on one line of a command's output."""
    return " ".join(text.split())


Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=4000),
                 AfterValidator(_shows_as_written)]
# who is told (a channel, a team): one line, never a line break of its own in the output
Name = Annotated[Text, AfterValidator(_one_line)]
Principal = Annotated[str, BeforeValidator(_principal)]
# a partition key is printed too (the guard's window and proof, `plan show`): C0 controls were
# refused, but a line separator and the 8-bit CSI in a proof partition printed a forged ALLOWED line
# (found by attack j)
PartitionKey = Annotated[str, BeforeValidator(_partition_key), AfterValidator(_shows_as_written)]
AssetKey = Annotated[str, StringConstraints(strip_whitespace=True, pattern=ASSET_KEY_PATTERN,
                                            max_length=200)]
Identifier = Annotated[str, StringConstraints(strip_whitespace=True, pattern=IDENTIFIER_PATTERN,
                                              max_length=63)]
Percent = Annotated[StrictFloat | StrictInt, Field(ge=0, le=100), AfterValidator(_number)]
Amount = Annotated[StrictFloat | StrictInt, Field(ge=0, le=1e18), AfterValidator(_number)]
Count = Annotated[StrictInt, Field(ge=0, le=10**12)]


# Keys renamed since release 0.2, by dotted path. The old spelling is read for one release when the
# new one is absent (both given: the old one is an unknown key); a plan's identity is computed over
# the old spelling (`plan.identity`), so the rename voids no approval.
RENAMED = {"checks": "gates", "publish.pause": "publish.freeze"}


def _current_spelling(data: Any, old: str, new: str) -> Any:
    if isinstance(data, dict) and old in data and new not in data:
        return {new if key == old else key: value for key, value in data.items()}
    return data


class _Block(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Window(_Block):
    start: PartitionKey
    end: PartitionKey


class Consumer(_Block):
    asset: AssetKey
    owners: Annotated[list[Name], Field(min_length=1, max_length=100)]


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
    """`freeze: true`: consumers keep the published data they have until every gate passes (the seed's
    "publish pause"; `pause:` is read as its old spelling for one release)."""

    freeze: Literal[True]

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, data: Any) -> Any:
        return _current_spelling(data, "pause", "freeze")
    notify: Annotated[list[Name], Field(min_length=1, max_length=100)]
    webhook_url: Annotated[str, StringConstraints(pattern=r"^https?://\S{1,2000}$")] | None = None

    @field_validator("webhook_url")
    @classmethod
    def _a_host_a_resolver_takes(cls, url: str | None) -> str | None:
        # a host the resolver cannot even encode (`hooks..example.com`, a label over 63 characters)
        # failed every delivery, after the plan was signed (found by an attack)
        if url is None:
            return url
        try:
            parts = urlsplit(url)
            host, _ = parts.hostname, parts.port
            if not host:
                raise ValueError("it names no host")
            host.encode("idna")
        except UnicodeError:
            raise ValueError(f"its host {host!r} is not a name a resolver takes (an empty label, or one over "
                             "63 characters)") from None
        except ValueError as exc:
            raise ValueError(f"it is not a URL ({exc})") from None
        return url


class Rollback(_Block):
    strategy: Text


class RowCountParity(_Block):
    max_diff_pct: Percent


class Duplicates(_Block):
    max_rows: Count


class MetricGate(_Block):
    """A metric compared per business-key group; both tolerances 0 (the default) means exact.

    tolerance_pct is in percent of the source figure (0.01 = 0.01%, one part in ten thousand);
    tolerance_abs is in the metric's own unit. A difference within either passes.
    """

    name: Identifier
    tolerance_pct: Percent = 0.0
    tolerance_abs: Amount = 0.0


class Contract(_Block):
    enforce: Literal[True]


class Gates(_Block):
    row_count_parity: RowCountParity
    duplicates: Duplicates
    metrics: Annotated[list[MetricGate], Field(min_length=1, max_length=100)]
    contract: Contract
    source_duplicates: Duplicates = Duplicates(max_rows=0)


ChangePercent = Annotated[StrictFloat | StrictInt, Field(ge=0, le=1_000_000), AfterValidator(_number)]
CODE_VERSION_PATTERN = r"^[\x21-\x7e]{1,64}$"
CodeVersion = Annotated[str, StringConstraints(strip_whitespace=True, pattern=CODE_VERSION_PATTERN)]


class Bounds(_Block):
    """How far a metric may move from its figure before the plan's first write: every bound given
    must hold. `max_pct` is in percent of the old figure (50 = half of it again); `max_abs` is in
    the metric's own unit."""

    max_abs: Amount | None = None
    max_pct: ChangePercent | None = None


class ExpectedChange(_Block):
    """A name that may change: a value column of the target (may differ per key), a metric the
    target declares (its figure may differ per partition), or both when they share the name.
    Direction and bounds judge the metric, per partition and over the window's sum."""

    name: Identifier
    direction: Literal["up", "down"] | None = None
    per_partition: Bounds | None = None
    window: Bounds | None = None


class Expect(_Block):
    """What the replay may change against the plan's snapshot; everything else must stay byte for
    byte as it was, key by key (gate `changes_as_expected`)."""

    changes: Annotated[list[ExpectedChange], Field(max_length=100)] = Field(default_factory=list)
    # only these partitions may change (None: any partition of the window)
    partitions: Annotated[list[PartitionKey], Field(min_length=1, max_length=10_000)] | None = None
    rows_added: StrictBool = False
    rows_removed: StrictBool = False

    def change(self, name: str) -> ExpectedChange | None:
        return next((c for c in self.changes if c.name == name), None)

    def describe(self) -> str:
        """One line: what may change, how, where, and whether keys may come and go."""
        def bounds(label: str, b: Bounds | None) -> list[str]:
            if b is None:
                return []
            return [f"{label} <= " + " and ".join(([f"{b.max_abs:g}"] if b.max_abs is not None else [])
                                                  + ([f"{b.max_pct:g}%"] if b.max_pct is not None else []))]
        names = []
        for c in self.changes:
            how = ([c.direction] if c.direction else []) + bounds("a partition", c.per_partition) \
                + bounds("the window", c.window)
            names.append(c.name + (f" ({', '.join(how)})" if how else ""))
        where = (f"only in {len(self.partitions)} partition(s)" if self.partitions is not None
                 else "in any partition")
        rows = [w for w, ok in (("keys added", self.rows_added), ("keys removed", self.rows_removed)) if ok]
        return (f"may change: {', '.join(names) if names else 'nothing'} {where}; "
                f"{', '.join(rows) + ' allowed' if rows else 'no key added or removed'}; everything else "
                "byte-identical per key")


Url = Annotated[str, StringConstraints(strip_whitespace=True, pattern=r"^https?://\S{1,2000}$")]
IncidentId = Annotated[str, StringConstraints(strip_whitespace=True, pattern=r"^[\x21-\x7e]{1,100}$")]

# The fields each scenario kind requires; a field of another kind is refused.
SCENARIO_FIELDS: dict[str, tuple[str, ...]] = {
    "incident": ("incident_id", "link"),
    "logic_change": ("old_code_version", "new_code_version"),
    "repair": ("failure",),
    "late_data": ("arrived",),
    "cutover": ("shadow_days", "tolerance"),
}


class DualRunTolerance(_Block):
    """How far a key's figure in the shadow (the plan's target) may differ from the published one
    and still match: within either bound passes, both 0 is exact. Each names its unit, as the
    metric tolerances of `checks` do: `abs` in the metric's own unit, `pct` in percent of the
    published figure (0.01 = 0.01%)."""

    abs: Amount = 0.0
    pct: Percent = 0.0

    def describe(self) -> str:
        if not self.abs and not self.pct:
            return "exact"
        return "within " + " or ".join(([f"{self.abs:g}"] if self.abs else [])
                                       + ([f"{self.pct:g}%"] if self.pct else []))


class Scenario(_Block):
    """Why the replay runs, as data: an incident (its id and link go into the evidence and every
    notice), a logic change (old and new code versions: the replay writes the new one), a repair of
    a failed or partial publish, late data, or a cutover (the new pipeline's output, the plan's
    target, is compared key by key with the published table, and the publish of the window, the
    cutover, waits for `shadow_days` consecutive matching partitions)."""

    kind: Literal["incident", "logic_change", "repair", "late_data", "cutover"]
    incident_id: IncidentId | None = None
    link: Url | None = None
    old_code_version: CodeVersion | None = None
    new_code_version: CodeVersion | None = None
    failure: Text | None = None   # repair: what failed or was published partially
    arrived: Text | None = None   # late_data: what arrived late, and when
    # cutover: consecutive partitions (days of a daily table) of the window, in its order, that
    # must match the published table before the window is published, and how closely
    shadow_days: Annotated[StrictInt, Field(ge=1, le=100_000)] | None = None
    tolerance: DualRunTolerance | None = None

    @model_validator(mode="after")
    def _fields_of_kind(self) -> Scenario:
        # one message naming every field the kind lacks, and every field it does not take
        wanted = SCENARIO_FIELDS[self.kind]
        missing = [f for f in wanted if getattr(self, f) is None]
        foreign = [f for fields in SCENARIO_FIELDS.values() for f in fields
                   if f not in wanted and getattr(self, f) is not None]
        problems = []
        if missing:
            problems.append(f"kind {self.kind} needs {', '.join(missing)}")
        if foreign:
            problems.append(f"{', '.join(foreign)} {'is' if len(foreign) == 1 else 'are'} not a field of kind "
                            f"{self.kind} (it takes {', '.join(wanted)})")
        if not problems and self.kind == "logic_change" and self.old_code_version == self.new_code_version:
            problems.append(f"old_code_version and new_code_version are both {self.new_code_version}")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def label(self) -> str:
        """One line for a notice, the evidence and `plan show`."""
        if self.kind == "incident":
            return f"incident {self.incident_id} ({self.link})"
        if self.kind == "logic_change":
            return f"logic change from code version {self.old_code_version} to {self.new_code_version}"
        if self.kind == "repair":
            return f"repair: {flat(str(self.failure))}"
        if self.kind == "cutover":
            assert self.tolerance is not None
            return (f"cutover after {self.shadow_days} consecutive partition(s) of the dual run matching the "
                    f"published table ({self.tolerance.describe()})")
        return f"late data: {flat(str(self.arrived))}"


class Approval(_Block):
    """A signed approval: an SSH signature by `by` over a `plan approval` statement binding the
    plan's sha256, its table's code, the warehouse and an expiry (see signing.statements), or a
    `plan replacement` one that also names the plan of record it replaces: `at` is when it says it
    was signed. Entries of the earlier form (the hash alone) load, and count for nothing."""

    by: Principal
    at: dt.datetime
    plan_sha256: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    code: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    warehouse: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = None
    expires: dt.datetime | None = None
    # a `plan replacement` statement's: the plan of record it replaces (`sha@adoption row hash`)
    replaces: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}@[0-9a-f]{64}$")] | None = None
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
    gates: Gates
    approvals: Approvals
    # every replayable table downstream of the target (derived from the asset graph, checked
    # against it): the plan recomputes, gates and publishes them with the target, as one
    graph: Annotated[list[GraphMember], Field(max_length=100)] = Field(default_factory=list)
    # what the replay may change (gate changes_as_expected); None: not declared, nothing judged
    expect: Expect | None = None
    scenario: Scenario | None = None

    @model_validator(mode="before")
    @classmethod
    def _old_spelling(cls, data: Any) -> Any:
        return _current_spelling(data, "checks", "gates")

    @property
    def assets(self) -> list[str]:
        """The tables the plan writes: the target first, then its graph in dependency order."""
        return [self.target, *(m.asset for m in self.graph)]

    @property
    def proof_keys(self) -> list[str]:
        return list(self.execution.proof_partitions)
