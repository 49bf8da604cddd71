"""One source of answers about a plan: the guard's last three ticks, `status`, `publish`,
`plan close` and the plan-state entry in the Dagster UI all come from `plan_status`, computed over
the control record and the data as they are now. Hints name the exact command to run next.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from backfill_assets import lifecycle
from backfill_assets.control import authority, evidence_log, lease, record, trust_record
from backfill_assets.control.record import PlanState
from backfill_assets.execution.advance import STALE, proof_verdict, window_verdict
from backfill_assets.gates.results import SINGLE_CODE_VERSION
from backfill_assets.partitions import PartitionScheme
from backfill_assets.plan.phases import ENDED, SEEN_BY_CONSUMERS, WRITABLE, Hold, Phase
from backfill_assets.publish import published as published_record
from backfill_assets.publish import rule
from backfill_assets.table import TableSpec
from backfill_assets.terminal import NEW_PLAN_FILE, partitions_option, shell_word
from backfill_assets.warehouse.engine import Session
from backfill_assets.warehouse.state_store import plans as plan_store

if TYPE_CHECKING:
    from backfill_assets.graph import TableGraph


@dataclass(frozen=True)
class PlanStatus:
    plan_id: str
    phase: str
    hold: str | None
    target: str
    window: list[str]
    partitions: int
    approvals: list[str]
    written: int
    reconciled: int
    failed: dict[str, list[str]]
    proof: str | None            # when the proof passed, if it did
    window_reconciled: str | None  # when every gate passed, if they pass now
    published: str | None        # when publish reopened, if it did and still holds
    publish: str                 # frozen / blocked / reopened ...
    blockers: list[str] = field(default_factory=list)
    running: str | None = None   # who holds the run lease
    next: str = ""
    # every other table of the plan's graph: asset -> {"partitions", "written", "failed", "window"}
    graph: dict[str, dict[str, Any]] = field(default_factory=dict)
    # a cutover plan's dual run: its streak against what it needs, and what reset it
    cutover: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _approvals(session: Session, state: PlanState, pending: str | None) -> list[str]:
    """Who signed, as counted now under the pinned root (the owner first), else as recorded."""
    sha = state.approved_sha256 or pending
    if not sha:
        return []
    version = record.version(session, sha)
    if version is not None and trust_record.current(session) is not None:
        counted = authority.plan_tally(session, version, code=None)
        names = ([f"{counted.owner} (owner)"] if counted.owner_signature else []) + counted.approvers
        return names + ([f"void: {v.principal}" for v in counted.void[:3]] if not counted.approved else [])
    return [a.principal for a in record.approvals(session, sha)]


def plan_status(session: Session, state: PlanState, spec: TableSpec | None = None,
                scheme: PartitionScheme | None = None, graph: TableGraph | None = None) -> PlanStatus:
    """`graph`: the loaded definitions, to check the published tables of the plan's whole graph."""
    pid = state.plan_id
    keys = list(state.partition_keys)
    pending = None if state.approved_sha256 else plan_store.latest_version_sha(session, pid)
    approvals = _approvals(session, state, pending)
    rows = evidence_log.rows(session, plan_id=pid)
    sha = state.approved_sha256
    proof = next((f"proof passed at {r.at}" for r in reversed(rows) if r.kind == "proof"
                  and r.payload.get("sha256") == sha), None)
    published_row = next((r for r in reversed(rows) if r.kind == "published"
                          and r.payload.get("sha256") == sha), None)
    verdict = window_verdict(session, state) if state.version is not None else None
    failed = verdict.failed if verdict else {}
    missing = verdict.missing if verdict else keys
    written = len(keys) - len(missing)
    reconciled_at = None
    if verdict is not None and verdict.passed and state.phase in (Phase.RECONCILED, Phase.PUBLISHED,
                                                                  Phase.CLOSED):
        reconciled_at = next((f"all gates passed at {r.at}" for r in reversed(rows)
                              if r.kind == "window_reconciled"), "all gates pass now")
    published = (f"published at {published_row.at} by {published_row.actor}"
                 if published_row and state.phase in (Phase.PUBLISHED, Phase.CLOSED) else None)
    blockers: list[str] = []
    if state.phase is Phase.RECONCILED and spec is not None and scheme is not None:
        blockers = rule.plan_blockers(session, state, spec, scheme, graph).problems
    if state.phase in (Phase.PUBLISHED, Phase.CLOSED) and spec is not None and scheme is not None:
        from backfill_assets.execution.advance import plan_tables

        for table, table_scheme, table_keys in plan_tables(state, spec, scheme, graph):
            edits = published_record.edited(session, table, table_scheme, list(table_keys))
            blockers += [f"{k}: {table.publish_as} edited since published (now {n}, published {p})"
                         for k, (n, p) in list(edits.items())[:20]]
            if edits and published:
                where = "" if table is spec else f" of {table.publish_as}"
                published = f"{published}; EDITED since: {len(edits)} partition(s){where}, first {next(iter(edits))}"
    members = {}
    for asset in state.assets[1:]:
        asset_keys = state.keys_of(asset)
        bad = verdict.failed_downstream.get(asset, {}) if verdict else {}
        absent = verdict.missing_downstream.get(asset, []) if verdict else list(asset_keys)
        members[asset] = {"partitions": len(asset_keys), "window": [asset_keys[0], asset_keys[-1]],
                          "written": len(asset_keys) - len(absent), "failed": bad}
    held = lease.current(session, pid)
    running = held.describe() if held is not None and held.alive() else None
    publish = _publish_state(state, blockers, published)
    dual = None
    if state.version is not None and spec is not None and scheme is not None:
        # while the plan is active the streak as publish would judge it; after, the one it met
        done = published_row is not None or not state.active
        dual = rule.cutover_streak(session, spec, scheme, state, recheck=not done)
    status = PlanStatus(pid, state.phase.value, state.hold, state.target,
                        [keys[0], keys[-1]] if keys else [], len(keys), approvals, written,
                        written - len(failed), failed, proof, reconciled_at, published, publish,
                        blockers or (verdict.blockers if verdict else []), running, graph=members,
                        cutover=(("cut over: " if published_row is not None else "") + dual.line()
                                 if dual is not None else None))
    seen = state.phase in SEEN_BY_CONSUMERS or any(r.kind == "published" for r in rows)
    keep: list[str] = []
    if state.hold is Hold.CANCELLED and state.phase not in ENDED and spec is not None and scheme is not None:
        from backfill_assets.execution.rollback import tables_to_keep

        keep = tables_to_keep(session, spec, scheme, state, graph)
    step = _resign_step(session, state, spec, graph, status, seen) or next_step(status, state, session, keep)
    if state.phase is Phase.RECONCILED and dual is not None and rule.only_cutover(blockers):
        step = rule.cutover_fix(pid, dual)  # the window reconciled; the cutover waits for its streak
    return PlanStatus(**{**asdict(status), "next": step})


def reconciled_seq(session: Session, state: PlanState) -> int | None:
    """The chain row of the reconciliation the reopen sensor publishes (its run key names it), for a
    plan that waits for publish; else None. The sensor and `status` both read it here, so `status`
    asks Dagster about the keys the sensor used."""
    if state.phase is not Phase.RECONCILED:
        return None
    rows = evidence_log.rows(session, state.plan_id, "window_reconciled")
    return rows[-1].seq if rows else None


def sensor_gave_up(status: PlanStatus, attempts: int) -> PlanStatus:
    """The reopen sensor's `attempts` publish runs of this reconciliation all failed, and it requests
    no more: `status` said the sensor would publish it."""
    if status.phase != Phase.RECONCILED.value or status.blockers or status.hold:
        return status
    return PlanStatus(**{**asdict(status), "next": (
        f"the reopen sensor's {attempts} publish runs of this window failed (Dagster's Runs list says why) and it "
        f"requests no more: publish now with `backfill publish {status.plan_id}`, which says what blocks it")})


def ended_status(session: Session, state: PlanState) -> PlanStatus:
    """An ended plan (closed, rolled back, withdrawn) as its record says it ended, for the table of a
    table's plans that every plan-changing command records: its window's gates and published bytes
    are not judged again here (a closed 2,526-partition plan cost every later command of the table
    ~0.9 s, growing with each plan kept in the table); `backfill status PLAN` judges them on demand."""
    pid = state.plan_id
    keys = list(state.partition_keys)
    rows = evidence_log.rows(session, plan_id=pid)
    sha = state.approved_sha256
    reconciled = next((f"all gates passed at {r.at}" for r in reversed(rows) if r.kind == "window_reconciled"),
                      None) if state.phase is Phase.CLOSED else None
    published_row = next((r for r in reversed(rows) if r.kind == "published"
                          and r.payload.get("sha256") == sha), None)
    published = f"published at {published_row.at} by {published_row.actor}" if published_row else None
    ended = {Phase.CLOSED: "closed", Phase.ROLLED_BACK: "rolled back", Phase.WITHDRAWN: "withdrawn"}[state.phase]
    publish = (published if state.phase is Phase.CLOSED and published else
               f"{ended} at {rows[-1].at}" if rows else ended)
    status = PlanStatus(pid, state.phase.value, state.hold, state.target, [keys[0], keys[-1]] if keys else [],
                        len(keys), _approvals(session, state, None), 0, 0, {}, None, reconciled,
                        published if state.phase is Phase.CLOSED else None, publish)
    return PlanStatus(**{**asdict(status), "next": next_step(status, state, session)})


def _resign_step(session: Session, state: PlanState, spec: TableSpec | None, graph: TableGraph | None,
                 status: PlanStatus, seen: bool) -> str | None:
    """While the plan may still write or publish, a step only its signers can take when their
    signatures no longer authorise the code loaded now (another release, an expiry): every run and
    publish would be refused, so `run` or `publish` is never the hint. `seen`: consumers saw the
    plan's data, so a rollback needs signatures too when the plan's own no longer hold."""
    if spec is None or state.version is None or status.running or state.hold is Hold.CANCELLED or not (
            state.phase in WRITABLE or state.phase is Phase.RECONCILED):
        return None
    from backfill_assets.permission import code_identity

    why = authority.refusal(session, state.version, code=code_identity(state, spec, graph))
    if why is None:
        return None
    pid = state.plan_id
    # the recorded name as the shell takes it: an ESC in it (a pull request's name) concealed the rest
    # of the line, and blanks folded to one named another file (found by an attack)
    where = shell_word(state.version.source_file) if state.version.source_file else "PLAN_FILE"
    sign = (f"sign it again for the code loaded now ({' '.join(why.split())}): `backfill plan approve {where} "
            f"--by NAME --key ~/.ssh/id_ed25519` by the owner and the approvers (`backfill plan statement "
            f"{where}` shows what they sign)")
    if state.hold is Hold.PAUSED:
        return f"{sign}, then `{_resume(state)}` resumes it; or end it, `backfill cancel {pid}`"
    if seen and authority.refusal(session, state.version, code=None) is not None:
        return f"{sign}; or {_signed_rollback(pid)}"
    return f"{sign}; or roll it back, `backfill rollback {pid}`"


def _signed_rollback(pid: str, keep: Sequence[str] = ()) -> str:
    """A rollback of data consumers saw, once the plan's own approvals no longer hold; `keep`: the
    tables it must leave computed, which the statement the approvers sign names."""
    kept = authority.keep_options(keep)
    return (f"roll it back with approvers' signatures (consumers saw its data): they sign "
            f"`backfill rollback {pid} --print-statement{kept}`, then `backfill rollback {pid}{kept} "
            "--statement FILE --signature NAME=FILE` (or `--sign NAME=KEY`)")


def _resume(state: PlanState) -> str:
    """The run that resumes a paused plan: its proof until that passed (the window is refused)."""
    return f"backfill run {state.plan_id}" + ("" if state.past_proof else " --proof")


def _publish_state(state: PlanState, blockers: list[str], published: str | None) -> str:
    if state.phase in (Phase.PUBLISHED, Phase.CLOSED):
        return published or "reopened"
    if state.phase is Phase.REPAIRING:
        return "frozen again: a reconcile after publish failed; consumers keep what was published"
    if state.active:
        return "frozen (consumers keep the last good data)" + (f"; blocked: {blockers[0]}" if blockers else "")
    return "not frozen by this plan"


def next_step(status: PlanStatus, state: PlanState, session: Session, keep: Sequence[str] = ()) -> str:
    """`keep`: the tables a rollback of a cancelled plan must leave computed (`--keep-computed`)."""
    pid = state.plan_id
    phase = state.phase
    if status.running:
        if state.hold is Hold.CANCELLED:  # a cancelled plan refuses a pause, whose refusal names status
            return (f"wait: {status.running} is running it and stops before its next slice (the plan is "
                    f"cancelled); then `backfill status {pid}` names the rollback")
        return f"wait: {status.running} is running it (or `backfill pause {pid}`)"
    if state.hold is Hold.PAUSED and state.active:
        # a pause outlives a publish (which takes no run): then neither run nor cancel can act on
        # it (found by an attack), and the phase's own step follows
        return f"resume with `{_resume(state)}`, or end it with `backfill cancel {pid}`"
    if state.hold is Hold.CANCELLED and phase not in ENDED:  # once rolled back, nothing is left to roll back
        if (phase in SEEN_BY_CONSUMERS and state.version is not None
                and authority.refusal(session, state.version, code=None) is not None):
            return _signed_rollback(pid, keep)  # a bare rollback is refused (found by an attack)
        what = (f" (leaving {', '.join(keep)}, computed from its partitions since, as it is; then recompute it "
                "under a plan)") if keep else ""
        return f"roll it back{what}: `backfill rollback {pid}{authority.keep_options(keep)}`"
    failing = sorted(status.failed)
    if phase is Phase.DRAFTED:
        return "collect approvals: `backfill plan approve PLAN_FILE --by NAME --key ~/.ssh/id_ed25519`"
    if phase is Phase.APPROVED:
        return f"run the proof: `backfill run {pid} --proof`"
    if phase is Phase.PROVING:
        verdict = proof_verdict(session, state)
        if verdict.empty_proof:  # running the proof again writes nothing again
            return f"prove the plan on data: {verdict.blockers[-1]}"
        if verdict.failed:
            return (f"fix the proof partition(s) and run them again: `backfill run {pid} --proof` "
                    f"({verdict.blockers[0]})")
        return f"finish the proof: `backfill run {pid} --proof`"
    if phase in (Phase.PROVEN, Phase.RUNNING, Phase.REPAIRING):
        mixed = [k for k in failing if SINGLE_CODE_VERSION in status.failed[k]]
        if mixed:
            return _code_version_step(session, state, mixed)
        if failing:
            return (f"fix the cause, then re-run the failing partitions: `backfill run {pid} "
                    f"{partitions_option(failing[:5])}`" + (f" (+{len(failing) - 5} more)" if len(failing) > 5 else ""))
        if status.written < status.partitions:
            return f"run the rest of the window: `backfill run {pid}`"
        for asset, member in status.graph.items():
            bad = sorted(member["failed"])
            if bad:
                stale = all(g.startswith(STALE) for k in bad for g in member["failed"][k])
                return ((f"compute {asset} again from the partitions it reads, written since" if stale else
                         f"fix the cause, then re-run {asset}'s failing partitions") + f": `backfill run {pid} --asset "
                        f"{asset} {partitions_option(bad[:5])}`" + (f" (+{len(bad) - 5} more)"
                                                                         if len(bad) > 5 else ""))
            if member["written"] < member["partitions"]:
                return f"run the rest of the graph ({asset} next): `backfill run {pid}`"
        return f"record the reconciliation: `backfill reconcile {pid}`"
    if phase is Phase.RECONCILED:
        if failing:
            # a partition changed since its gates passed (its publish refused): a re-run through the
            # plan checks it again; "see `backfill publish PLAN`" named the refused command itself
            # (found by an attack)
            return (f"re-run the partitions that changed since their gates passed: `backfill run {pid} "
                    f"{partitions_option(failing[:5])}`" + (f" (+{len(failing) - 5} more)"
                                                                if len(failing) > 5 else ""))
        moved = next((b for b in status.blockers if rule.SOURCE_MOVED in b), None)
        if moved is not None:
            # rows landed in the source since the gates compared it (late data): the reconcile finds
            # them and names the re-run; `backfill publish` only refuses (found by an attack)
            return (f"publish is blocked ({moved}): compare the window with the source again, "
                    f"`backfill reconcile {pid}`, which names the partitions to run again")
        if status.blockers:
            return f"publish is blocked ({status.blockers[0]}); see `backfill publish {pid}`"
        return f"publish reopens by the sensor, or now: `backfill publish {pid}`"
    if phase is Phase.PUBLISHED:
        # read only where a repair is due (it reads every active plan of each table)
        repair_due = bool(failing or status.blockers or any(m["failed"] for m in status.graph.values()))
        holder = lifecycle.held_by_another(session, state) if repair_due else None
        if holder is not None:
            # its repair would hold that plan's partitions too: the other plan goes first
            other, asset, key = holder
            # an approved plan wrote nothing (its first write moves it to proving): it withdraws
            end = (f"withdraw it, `backfill plan withdraw {other.plan_id}`" if other.phase is Phase.APPROVED else
                   f"finish or roll it back, as `backfill status {other.plan_id}` names")
            return (f"plan {other.plan_id} ({other.phase}) holds {asset} {key}, which a repair of {pid} would "
                    f"write: end {other.plan_id} first ({end}), then `backfill reconcile {pid}` sends {pid} "
                    "back to repairing")
        if status.blockers:  # consumers do not see the proven bytes: closing would say they do
            return (f"the published table was edited ({status.blockers[0]}): `backfill reconcile {pid}`, "
                    f"then `backfill publish {pid}` puts the checked bytes back")
        return f"close the plan when consumers confirm: `backfill plan close {pid}`"
    if phase is Phase.CLOSED:
        if status.blockers:  # a closed plan publishes nothing again: a new plan over the window does
            return (f"the published table was edited since the plan closed ({status.blockers[0]}): a new plan over "
                    f"the edited partitions (`backfill plan new {NEW_PLAN_FILE} --target {status.target}`), once "
                    "approved and run, publishes checked bytes again")
        return "nothing: the plan is closed"
    if phase is Phase.ROLLED_BACK:
        rolled = evidence_log.rows(session, pid, "rollback")
        kept = rolled[-1].payload.get("kept_computed") if rolled else None
        if isinstance(kept, dict) and kept:  # left computed from the bytes restored: publish refuses it
            table, parts = sorted(kept.items())[0]
            return (f"recompute {table} {', '.join(list(parts)[:3])}{', ...' if len(parts) > 3 else ''}, left computed "
                    "from the partitions the rollback restored (--keep-computed), with a new plan whose graph lists "
                    f"it: `backfill plan new {NEW_PLAN_FILE} --target {status.target}`")
        return f"nothing: the plan was rolled back; to retry, draft a new plan: {redraft(state)}"
    return "nothing: the plan was withdrawn"


_PLAIN_VALUE = re.compile(r"^[\w./:@+-]{1,64}$")  # what `plan new` takes as --start/--end


def redraft(state: PlanState) -> str:
    """The command that drafts a new plan over an ended plan's window, as pasted: a fresh id of its
    own (the ended plan keeps its id), its target and window filled. "draft a new plan to retry" named
    no command (found by an attack)."""
    suffix = "-retry"
    plan_id = f"{state.plan_id[:63 - len(suffix)]}{suffix}"
    keys = state.partition_keys
    window = draft_window(keys[0], keys[-1]) if keys else ""
    return (f"`backfill plan new {shell_word(f'plans/{plan_id}.yaml')} --id {plan_id} --target "
            f"{shell_word(state.target)}{window}`")


def draft_window(first: str, last: str) -> str:
    """A window's `--start A --end B` for a printed `plan new`, when it takes them (plain values; a
    static key with a blank is filled in the drafted file instead): pasted as printed, it drafts."""
    if _PLAIN_VALUE.match(first) and _PLAIN_VALUE.match(last):
        return f" --start {shell_word(first)} --end {shell_word(last)}"
    return ""


def _code_version_step(session: Session, state: PlanState, mixed: list[str]) -> str:
    """single_code_version failed: re-running those partitions fixes it only under the window's
    majority code version (under the code that wrote them it fails the same way), so say what will."""
    from backfill_assets.control import ledger
    from backfill_assets.execution.audit import code_version_results

    pid = state.plan_id
    keys = list(state.partition_keys)
    versions = ledger.code_versions(session, state.target, pid)
    majority = code_version_results(keys[:1], versions)[keys[0]].expected if versions else None
    whole = f"`backfill run {pid} {partitions_option(keys, as_range=True)}`"
    rollback = f"`backfill rollback {pid}`"
    if majority is None:
        return (f"the window mixes code versions with no majority: re-run the whole window under one code "
                f"version, {whole}, or roll it back, {rollback}")
    named = ", ".join(mixed[:5])
    more = f" (+{len(mixed) - 5} more)" if len(mixed) > 5 else ""
    others = sorted({versions.get(k) or "unknown" for k in mixed})
    return (f"{named}{more} were written by code version {', '.join(others)}, the window by {majority}: "
            f"re-running them helps only with code version {majority} deployed (then `backfill run {pid} "
            f"{partitions_option(mixed[:5])}`{more}); with the new code re-run the whole window, {whole}; or roll it "
            f"back, {rollback}")


def markdown(statuses: list[PlanStatus]) -> str:
    """The plan-state table the UI shows on the target asset."""
    if not statuses:
        return "No replay plan has been approved for this table."
    head = ("| plan | phase | window | approvals | gates | publish | next step | runs |\n"
            "|---|---|---|---|---|---|---|---|")
    lines = [head]
    for s in statuses:
        window = f"{s.window[0]}..{s.window[1]} ({s.partitions})" if s.window else "-"
        gates = f"{s.reconciled}/{s.partitions} passed" + (f", {len(s.failed)} failed" if s.failed else "")
        if Phase(s.phase) in ENDED:  # as recorded when it ended (`ended_status`)
            gates = s.window_reconciled or "-"
        for asset, member in s.graph.items():  # the other tables of the plan's graph
            window += f"; {asset} {member['window'][0]}..{member['window'][1]} ({member['partitions']})"
            gates += (f"; {asset} {member['written'] - len(member['failed'])}/{member['partitions']} passed"
                      + (f", {len(member['failed'])} failed" if member["failed"] else ""))
        if s.cutover:  # the cutover waits for its dual run's streak, beside the gates
            gates += f"; {s.cutover}"
        phase = s.phase + (f" ({s.hold})" if s.hold else "")
        cell = [s.plan_id, phase, window, ", ".join(s.approvals) or "-", gates, s.publish, s.next]
        runs = f"[runs](/runs?{urlencode({'q[0]': f'tag:backfill_assets/plan={s.plan_id}'})})"
        lines.append("| " + " | ".join(c.replace("|", "/").replace("\n", " ") for c in cell) + f" | {runs} |")
    return "\n".join(lines)
