"""Rendering the release-gate evidence (templates/release-gate-evidence.yaml) from the record.

One file per plan that summarises: counts, every failure in full, and a digest of all gate
results and snapshots, so it stays small and renders in seconds for thousands of partitions
(the rows themselves stay in the keyed chain, which `backfill evidence verify` checks).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from backfill_assets.control import authority, evidence_log, integrity, ledger, publications, record, trust_record
from backfill_assets.control.ledger import comparisons
from backfill_assets.control.record import PlanState, PlanVersion
from backfill_assets.control.snapshots import snapshotted
from backfill_assets.errors import BackfillError, EvidenceChainBroken
from backfill_assets.gates.cutover import cutover_of, streak
from backfill_assets.gates.results import CHANGES_AS_EXPECTED
from backfill_assets.identifiers import table_for_asset
from backfill_assets.plan.model import Plan
from backfill_assets.plan.phases import Phase
from backfill_assets.signing.statements import Statement, stamp
from backfill_assets.trust.root import Candidate, TrustRoot
from backfill_assets.warehouse.engine import Session


class ChainNotVerified(BackfillError):
    """The rendered evidence says the chain does not verify."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"the evidence was written, but its chain does not verify: {reason}",
                         fix="restore the control record (and its key) from backup; `backfill evidence verify` "
                             "names the first bad row")


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def render(session: Session, state: PlanState, actor: str) -> tuple[dict[str, Any], bool | str]:
    rows = evidence_log.rows(session, plan_id=state.plan_id)
    # each row checked against its keyed hash as read (the record is verified whole below, but it
    # is read again there: on PostgreSQL a row edited just while this read it was rendered)
    try:
        evidence_log.verified(session, rows)
        unverified: str | None = None
    except (EvidenceChainBroken, BackfillError) as exc:
        unverified = f"NO: {exc}"
    sha = state.approved_sha256
    version = state.version
    plan = version.plan if version else None

    def last(kind: str, **match: Any) -> evidence_log.EvidenceRow | None:
        found = [r for r in rows if r.kind == kind and all(r.payload.get(k) == v for k, v in match.items())]
        return found[-1] if found else None

    freeze = last("notification", event="frozen") or last("notification", event="paused")  # before 0.3
    proof = last("proof", passed=True)
    reconciled = last("window_reconciled")
    published = last("published")
    rolled = last("rollback")
    # a paused or cancelled plan keeps its phase: the hold is what says it stopped (and, cancelled,
    # for good), which the rendered file left out while `status` said it (`proven (cancelled)`)
    held = last("hold", to=state.hold.value) if state.hold is not None else None
    keys = list(state.partition_keys)
    latest = ledger.latest(session, state.target, keys, state.plan_id)
    failures = {k: {g: figures.get("detail") for g, (passed, figures) in e.gates.items() if not passed}
                for k, e in latest.items() if e is not None and not e.passed}
    results = {k: {g: [p, f.get("numbers")] for g, (p, f) in e.gates.items()}
               for k, e in latest.items() if e is not None}
    snaps = {table: {k: [f.rows, f.digest] for k, f in snapshotted(session, state.plan_id, table).items()}
             for table in (table_for_asset(state.target),)}
    graph = {}
    for asset in state.assets[1:]:  # the other tables of the plan's graph, each like the target
        asset_keys = list(state.keys_of(asset))
        found = ledger.latest(session, asset, asset_keys, state.plan_id)
        snapped = snapshotted(session, state.plan_id, table_for_asset(asset))
        snaps[table_for_asset(asset)] = {k: [f.rows, f.digest] for k, f in snapped.items()}
        graph[asset] = {
            "window": {"start": asset_keys[0], "end": asset_keys[-1], "partitions": len(asset_keys)},
            "written": sum(1 for e in found.values() if e is not None),
            "passed": sum(1 for e in found.values() if e is not None and e.passed),
            "failed": {k: {g: figures.get("detail") for g, (passed, figures) in e.gates.items() if not passed}
                       for k, e in found.items() if e is not None and not e.passed},
            "results_sha256": _digest({k: {g: [p, f.get("numbers")] for g, (p, f) in e.gates.items()}
                                       for k, e in found.items() if e is not None}),
            "published": (published.payload.get("graph", {}).get(asset) if published else None)}
    expectation = _expectation(plan, latest) if plan is not None else None
    cutover = _cutover(plan, latest) if plan is not None else None
    fingerprints = _published_fingerprints(session, state, published) if published else {}
    earlier = [r.at for r in rows if r.kind == "published" and published and r.seq < published.seq]
    put_back = _put_back(session, fingerprints)
    # when each version last became the plan of record (state rows of an earlier release included)
    try:
        adoptions = record.adoptions(session, state.plan_id)
    except BackfillError:  # the chain's verdict says the record is broken
        adoptions = []
    adopted_at = {adopted: row for row, adopted in adoptions}
    versions = _versions(session, rows, adoptions)
    # the signatures of the plan of record; of a plan that has none yet, of its latest version (a
    # plan short of its quorum listed none of the signatures the chain holds: found by an attack)
    signed_sha = sha or (versions[-1]["sha256"] if versions else None)
    signed = version
    if signed is None and signed_sha is not None:
        try:
            signed = record.version(session, signed_sha)
        except BackfillError:  # the chain's verdict says the record is broken
            signed = None
    head_seq, head_hash = evidence_log.head(session)
    try:
        integrity.verify_record(session)
        verified: bool | str = unverified or True  # whole again, but not as the rows above were read
    except (EvidenceChainBroken, BackfillError) as exc:
        verified = f"NO: {exc}"  # the whole record's verdict first: it names the first bad row
    document: dict[str, Any] = {
        "plan": {
            "plan_id": state.plan_id, "sha256": sha, "owner": state.owner, "target": state.target,
            "source_of_truth": plan.source_of_truth if plan else None,
            "window": {"start": keys[0] if keys else None, "end": keys[-1] if keys else None,
                       "partitions": len(keys)},
            "mode": plan.execution.mode if plan else None, "phase": state.phase.value,
            "file": version.source_file if version else None,
        },
        **({"versions": versions} if len(versions) > 1 else {}),
        "hold": ({"state": state.hold.value, "at": held.at if held else None,
                  "by": held.actor if held else None, "note": held.payload.get("note") if held else None}
                 if state.hold is not None else None),
        "approvals": _approvals(session, signed, [r for r in rows if r.kind == "approval"
                                                  and r.payload.get("sha256") == signed_sha] if signed_sha else [],
                                adopted_at.get(signed_sha) if signed_sha else None),
        "publish_freeze": {"frozen_at": freeze.at if freeze else None,
                           "notified": freeze.payload.get("recipients") if freeze else []},
        "proof": {"partitions": list(state.proof_keys), "passed_at": proof.at if proof else None},
        "snapshots": {"partitions": sum(len(v) for v in snaps.values()), "sha256": _digest(snaps)},
        **({"scenario": plan.scenario.model_dump(mode="json", exclude_none=True)}
           if plan is not None and plan.scenario is not None else {}),
        **({"expectation": expectation} if expectation else {}),
        **({"cutover": cutover} if cutover else {}),
        "gates": {"partitions": len(keys), "written": len(results),
                  "passed": sum(1 for e in latest.values() if e is not None and e.passed),
                  "failed": failures, "results_sha256": _digest(results),
                  "about": _about(state, published, rolled, fingerprints)},
        **({"graph": graph} if graph else {}),
        "history": _history(session, state),
        "reconciled_at": reconciled.at if reconciled else None,
        "published": ({"at": published.at, "by": published.actor, "rows": published.payload.get("rows"),
                       # the bytes consumers got, as the publish's `publication` chain rows seal them
                       "fingerprints": fingerprints,
                       **({"undone": f"rolled back at {rolled.at}"} if rolled and rolled.seq > published.seq
                          else {}),
                       # what the chain holds of the way there: earlier publishes of the plan, and the
                       # partitions of consumers' copy this one found edited by hand and put back
                       **({"earlier": earlier} if earlier else {}),
                       **({"put_back": put_back} if put_back else {}),
                       # what consumers saw change (totals), as the reopen notice told them
                       **({"impact": published.payload["impact"]} if "impact" in published.payload else {}),
                       **({"cutover": published.payload["cutover"]} if "cutover" in published.payload else {})}
                      if published else None),
        "rollback": _rollback(rolled) if rolled else None,
        "chain": {"rows": len(rows), "verified": verified, "head_seq": head_seq, "head_hash": head_hash,
                  "rendered_at": evidence_log.now_iso(), "rendered_by": actor},
    }
    return document, verified


def _versions(session: Session, rows: list[evidence_log.EvidenceRow],
              adoptions: list[tuple[evidence_log.EvidenceRow, str]]) -> list[dict[str, Any]]:
    """Every version the chain recorded of the plan, in order: its file, when it became the plan of
    record and when another replaced it, the approvers its adoption counted, and what was written
    under it. A plan replaced before it ran named the version of record alone: an auditor could not
    see that another had been the plan of record, on other signatures (found by an attack)."""
    shas = list(dict.fromkeys(str(r.payload.get("sha256")) for r in rows if r.kind == "plan_version"))
    out = []
    for sha in shas:
        recorded = next(r for r in rows if r.kind == "plan_version" and r.payload.get("sha256") == sha)
        mine = [r for r, adopted in adoptions if adopted == sha]
        later = [r for r, adopted in adoptions if mine and r.seq > mine[-1].seq and adopted != sha]
        try:
            version = record.version(session, sha)
        except BackfillError:  # the chain's verdict says the record is broken
            version = None
        signed = [r for r in rows if r.kind == "approval" and r.payload.get("sha256") == sha]
        _, quorum = _counted(session, version, signed, mine[-1] if mine else None, each=False)
        wrote: dict[str, set[str]] = {}
        for r in rows:
            if r.kind == "write" and r.payload.get("sha256") == sha and isinstance(r.payload.get("partitions"), dict):
                wrote.setdefault(str(r.payload.get("table")), set()).update(map(str, r.payload["partitions"]))
        out.append({"sha256": sha, "file": recorded.payload.get("file"), "recorded_at": recorded.at,
                    "adopted_at": mine[-1].at if mine else None, **({"replaced_at": later[0].at} if later else {}),
                    "counted": quorum.get("counted"), "met": quorum.get("met"),
                    "wrote": {t: f"{len(k)} partition(s) {min(k)}..{max(k)}" for t, k in sorted(wrote.items())}})
    return out


def _published_fingerprints(session: Session, state: PlanState, published: evidence_log.EvidenceRow
                            ) -> dict[str, Any]:
    """Each table the publish copied: the plan's partitions it gave consumers, the digest of their
    fingerprints (one line a partition, `key rows fingerprint`, as a rollback digests what it
    restored) and the `publication` chain row that seals them. The file said when and how many rows
    alone, so it could not tie what consumers got to any bytes (found by an attack)."""
    payload = published.payload
    found_graph = payload.get("graph")
    graph: dict[str, Any] = found_graph if isinstance(found_graph, dict) else {}
    tables = [payload.get("table"), *(v.get("table") for v in graph.values() if isinstance(v, dict))]
    out: dict[str, Any] = {}
    for table in (t for t in tables if isinstance(t, str)):
        try:
            seq, found = publications.of_publish(session, table, published.seq, state.plan_id)
        except BackfillError as exc:  # the chain's verdict says the record is broken; this says where
            out[table] = f"NOT verified: {exc.message}"
            continue
        text = "\n".join(f"{k} {fp.rows} {fp.digest}" for k, fp in sorted(found.items()))
        out[table] = {"partitions": len(found), "sha256": hashlib.sha256(text.encode()).hexdigest(),
                      "evidence_row": seq}
    return out


def _put_back(session: Session, fingerprints: dict[str, Any]) -> dict[str, list[str]]:
    """The partitions of each table the last publish found edited outside backfill and put back:
    the `published_edited` chain row its copy of the table appended (in its transaction, after the
    table's previous publication). The chain said it, the file did not (found by an attack)."""
    seqs = {t: f["evidence_row"] for t, f in fingerprints.items() if isinstance(f, dict)}
    if not seqs:
        return {}
    found = evidence_log.rows(session, kind=("publication", "published_edited"))
    out: dict[str, list[str]] = {}
    for table, seq in seqs.items():
        mine = [r for r in found if r.seq < seq and isinstance(r.payload, dict) and r.payload.get("table") == table]
        before = max((r.seq for r in mine if r.kind == "publication"), default=0)
        edits = [r for r in mine if r.kind == "published_edited" and r.seq > before]
        if edits:
            row = evidence_log.by_seq(session, [edits[-1].seq])[edits[-1].seq]  # verified
            partitions = row.payload.get("partitions")
            out[table] = sorted(map(str, partitions)) if isinstance(partitions, dict) else []
    return out


def _about(state: PlanState, published: evidence_log.EvidenceRow | None, rolled: evidence_log.EvidenceRow | None,
           fingerprints: dict[str, Any]) -> str:
    """Which bytes the gates' verdicts are about now: after a rollback the file still said `passed:
    N` and `reconciled_at` as if they described what consumers read (found by an attack)."""
    tables = [table_for_asset(a) for a in state.assets]
    if rolled is not None and state.phase is Phase.ROLLED_BACK:
        # tables the operator left computed from the restored partitions (--keep-computed) keep theirs
        # (and their published copies, which the rollback leaves as they are too)
        found = rolled.payload.get("kept_computed")
        kept = {str(k) for k in found} if isinstance(found, dict) else set()
        graph = published.payload.get("graph") if published is not None else None
        left = {table_for_asset(k) for k in kept} | {
            str(v.get("table")) for a, v in (graph.items() if isinstance(graph, dict) else ())
            if a in kept and isinstance(v, dict)}
        gone = [t for t in [*tables, *fingerprints] if t not in left]
        return (f"the plan's writes, rolled back at {rolled.at}: none of their bytes is in {' or '.join(gone)} now; "
                "consumers read what the rollback restored (rollback.restored)"
                + (f"; left as computed: {', '.join(sorted(kept))} (rollback.kept_computed)" if kept else ""))
    if published is not None and state.phase in (Phase.PUBLISHED, Phase.CLOSED):
        shown = ", ".join(f"{t} {f['sha256'][:16]}" for t, f in fingerprints.items() if isinstance(f, dict))
        # what the publish gave consumers; an edit of their copy since is `backfill status`'s to find
        return f"the plan's latest writes, which the publish gave consumers ({shown})"
    if published is not None:
        return ("the plan's latest writes, some since the publish: consumers were given the publish's bytes "
                "(published.fingerprints), not these where they differ, until the next publish")
    return f"the plan's latest writes in {', '.join(tables)}; consumers do not read them (never published)"


# the rollback row's keys that are not a restored table's
_ROLLBACK_FIELDS = ("index", "authorised", "refilled", "kept_computed")


def _rollback(rolled: evidence_log.EvidenceRow) -> dict[str, Any]:
    """The rollback as its chain row recorded it: who authorised putting back data consumers may
    have read (the plan's approvals, or approvers' rollback signatures and the statement they
    signed), every table restored with its partitions and the digest of the fingerprints proven,
    snapshots refilled from the published copy, and what the operator left computed from the
    restored partitions (--keep-computed). The file showed when and by whom alone, so an auditor
    could not tell what was put back nor on whose authority (recovery evidence, the seed's last
    verification)."""
    payload = rolled.payload
    return {"at": rolled.at, "by": rolled.actor,
            **({"authorised": payload["authorised"]} if "authorised" in payload else {}),
            "restored": {table: figures for table, figures in sorted(payload.items())
                         if table not in _ROLLBACK_FIELDS and isinstance(figures, dict)},
            **({"refilled": payload["refilled"]} if "refilled" in payload else {}),
            **({"kept_computed": payload["kept_computed"]} if "kept_computed" in payload else {})}


def _figures(figures: dict[str, Any]) -> str:
    """The figures that are numbers (a contract's structured expectation is said by its detail)."""
    shown = [f"{name}={figures[name]}" for name in ("expected", "actual", "threshold", "difference")
             if isinstance(figures.get(name), int | float | str)]
    detail = str(figures.get("detail") or "")
    return " ".join(shown) + (f" ({detail[:160]})" if detail else "")


def _history(session: Session, state: PlanState) -> dict[str, Any]:
    """What happened on the way, one line each, so an auditor sees a failure even after its repair:
    every gate failure recorded under the plan (table, partition, gate, figures, time); every
    repair (a later write of a failed partition whose gates all passed); every code version the
    plan's writes ran."""
    failures = ledger.failures_of_plan(session, state.plan_id)
    failed_lines = [f"{f.asset} {f.partition_key} {f.gate} {_figures(f.figures)} at {f.recorded_at}"
                    for f in failures]
    repairs = []
    by_table: dict[str, dict[str, tuple[int, int]]] = {}
    for f in failures:  # the last failure of each partition of each table: (its chain row, its write)
        last_failed = by_table.setdefault(f.asset, {})
        last_failed[f.partition_key] = max(last_failed.get(f.partition_key, (0, 0)), (f.seq, f.write_id or 0))
    for asset, last_failed in by_table.items():
        latest = ledger.latest(session, asset, list(last_failed), state.plan_id)
        for key, (failed_seq, failed_write) in last_failed.items():
            entry = latest.get(key)
            # written after the failure was recorded, in the chain's order (ids are the warehouse's)
            if entry is not None and entry.passed and entry.seq > failed_seq:
                repairs.append(f"{asset} {key} failed on write {failed_write}, passed on write {entry.write_id} "
                               f"(code {entry.code_version}) at {entry.recorded_at}")
    code = [f"{asset} code {version} ({(identity or 'unknown')[:14]}): {n} partition(s) written {first}..{last}"
            for asset, version, identity, n, first, last in ledger.code_written(session, state.plan_id)]
    return {"failures": failed_lines, "repairs": repairs, "code_versions": code}


def _expectation(plan: Plan, latest: dict[str, ledger.LatestWrite | None]) -> dict[str, Any] | None:
    """What the plan said may change, what changed (summed over the window's latest writes), and
    the verdict of `changes_as_expected` on them; None when the plan declares nothing."""
    verdicts = [e.gates[CHANGES_AS_EXPECTED] for e in latest.values()
                if e is not None and CHANGES_AS_EXPECTED in e.gates]
    if plan.expect is None and not any((f.get("numbers") or {}).get("rows.before") is not None
                                       for _, f in verdicts):
        return None
    observed: dict[str, Any] = {"added": 0, "removed": 0, "changed": 0}
    metrics: dict[str, list[Decimal]] = {}
    for _, figures in verdicts:
        numbers = figures.get("numbers") or {}
        for name in ("added", "removed", "changed"):
            observed[name] += int(numbers.get(f"rows.{name}", 0))
        for label, value in numbers.items():
            name, _, part = label.rpartition(".")
            if part in ("old", "new"):  # `<metric>.old` / `.new`; the row and column counts end otherwise
                pair = metrics.setdefault(name, [Decimal(0), Decimal(0)])
                pair[1 if part == "new" else 0] += Decimal(repr(float(value)))
    observed["metrics"] = {n: {"old": float(o), "new": float(v), "difference": float(v - o)}
                           for n, (o, v) in sorted(metrics.items())}
    failed = sorted(k for k, e in latest.items() if e is not None and CHANGES_AS_EXPECTED in e.gates
                    and not e.gates[CHANGES_AS_EXPECTED][0])
    return {"declared": plan.expect.describe() if plan.expect is not None else "nothing (no expect:)",
            "observed": observed,
            "verdict": ("recorded, not judged (no expect:)" if plan.expect is None else
                        "not judged yet" if not verdicts else
                        f"{len(failed)} partition(s) changed beyond expect: {', '.join(failed[:20])}" if failed
                        else f"as expected in all {len(verdicts)} partition(s) judged")}


def _cutover(plan: Plan, latest: dict[str, ledger.LatestWrite | None]) -> dict[str, Any] | None:
    """A cutover plan's dual run: what it needs, the streak its sealed results give, every partition
    mismatching now (key and figures), and the verdict; None for another plan. The streak at the
    moment of publish is in the `published` row of the chain (publish re-checked the published
    bytes then); this one is read from the results alone."""
    scenario = cutover_of(plan, plan.target)
    if scenario is None or scenario.shadow_days is None or scenario.tolerance is None:
        return None
    keys = list(latest)
    dual = streak(keys, comparisons(latest), scenario.shadow_days)
    return {"shadow_days": scenario.shadow_days, "tolerance": scenario.tolerance.describe(),
            "compared": dual.compared, "streak": dual.count,
            "mismatches": {k: w for k, w in dual.mismatches},
            "verdict": (f"met: {dual.line()}" if dual.met else f"not met: {dual.line()}")}


def _approvals(session: Session, version: PlanVersion | None, recorded: list[evidence_log.EvidenceRow],
               adopted: evidence_log.EvidenceRow | None) -> dict[str, Any]:
    """The signatures the chain recorded, one line each, and what they bind (said once when they
    agree): from the chain's rows, never the approvals table, where a row copied under another name
    listed a fourth signer (found by an attack; counting verifies each signature anyway). Each line
    says whether it counted toward the quorum when it was recorded, and `quorum` what the pinned
    policy required and whether the signatures recorded up to the version's adoption met it, under
    the root pinned then: the owner's signature and an approver's second one read as four approvals
    of a plan two approvers authorised, and nothing said what the policy asked (found by an attack)."""
    signers = [_Signed(str(r.payload.get("principal")), str(r.payload.get("key"))) for r in recorded]
    verdicts, quorum = _counted(session, version, recorded, adopted)
    # release 0.2's approval rows hold a signature of the plan's hash alone, no statement
    statements = [(a, Statement.parse(str(r.payload["statement"])), v)
                  for a, r, v in zip(signers, recorded, verdicts, strict=True) if "statement" in r.payload]
    binds: dict[str, Any] = {}
    for name in ("plan", "code", "warehouse"):
        values = sorted({s[name] for _, s, _ in statements})
        binds[name] = values[0] if len(values) == 1 else values
    return {"binds": binds if statements else {}, "quorum": quorum,
            "signed": [f"{a.principal} {a.key_fingerprint} {stamp(s.signed)}..{stamp(s.expires)} {v}"
                       for a, s, v in statements]
            # a 0.2 signature binds no statement this release could count: 0.2 counted it, as the line says
            + [f"{a.principal} {a.key_fingerprint} (release 0.2: the plan's hash alone)"
               for a, r in zip(signers, recorded, strict=True) if "statement" not in r.payload]}


def _moment(at: str) -> dt.datetime:
    return dt.datetime.fromisoformat(at.replace("Z", "+00:00"))


def _counted(session: Session, version: PlanVersion | None, recorded: list[evidence_log.EvidenceRow],
             adopted: evidence_log.EvidenceRow | None, *, each: bool = True) -> tuple[list[str], dict[str, Any]]:
    """Each recorded signature's verdict (with `each`) and the quorum as the version's adoption counted
    them, under the trust root in force at that adoption's chain row (or now, for a version never
    adopted): a signature recorded before the adoption is judged by it (bob's, recorded before a
    re-pin dropped his key, said `counted` beside a quorum of the two who did count); one recorded
    after it, with those before it, at its own row, under the root in force then. Roots are told
    apart by their chain rows' order, not their times (a pin within the second of a signature)."""
    candidates = [Candidate(str(r.payload.get("principal")), str(r.payload.get("statement") or ""),
                            str(r.payload.get("signature") or "")) for r in recorded]
    if version is None:
        return ["not judged, its version is not in the record"] * len(recorded), {"met": False}
    try:
        pinned = {p.root.version: p.root for p in trust_record.history(session)}
        if not pinned:  # a home upgraded from 0.2 before its first pin: nothing to count under
            why = "no trust root is pinned to count them under"
            return [f"not judged, {why}"] * len(recorded), {"met": False, "not_judged": why}
        pins = {int(r.payload["version"]): r.seq for r in evidence_log.rows(session, kind="trust_root")
                if isinstance(r.payload, dict) and isinstance(r.payload.get("version"), int)}

        def root_before(seq: int | None) -> TrustRoot:
            """The root in force at chain row `seq` (None: now)."""
            older = [v for v in pinned if seq is None or pins.get(v, 0) < seq]
            return pinned[max(older) if older else min(pinned)]

        moment = _moment(adopted.at) if adopted is not None else dt.datetime.now(dt.UTC)
        root = root_before(adopted.seq if adopted is not None else None)
        before = [c for c, r in zip(candidates, recorded, strict=True) if adopted is None or r.seq < adopted.seq]
        found = authority.as_recorded(session, version, before, root=root, now=moment)
        verdicts = [v for _, v in found.verdicts] if each else []
        for i, row in enumerate(recorded[len(before):] if each else [], start=len(before)):
            verdicts.append(authority.as_recorded(session, version, candidates[:i + 1], root=root_before(row.seq),
                                                  now=_moment(row.at)).verdicts[-1][1])
    except BackfillError as exc:  # a record that does not verify: the chain's verdict below says where
        return [f"not judged, {exc.message}"] * len(recorded), {"met": False, "not_judged": exc.message}
    need = found.requirement
    required = (f"{need.minimum} approver(s)" + (f", one of each of {', '.join(need.groups)}" if need.groups else "")
                + (f" and the owner {version.plan.owner}'s signature" if version.plan.owner else "")
                + f" (trust root v{root.version})")
    return verdicts, {"required": required, "at": adopted.at if adopted else None,
                      "counted": ", ".join(found.approvers), "met": found.approved,
                      **({} if found.approved else {"missing": found.missing()})}


@dataclass(frozen=True)
class _Signed:
    principal: str
    key_fingerprint: str


HEADER = "# Release-gate evidence rendered by `backfill evidence` from the control record.\n"


def to_yaml(document: dict[str, Any]) -> str:
    return (HEADER + "# Form: templates/release-gate-evidence.yaml\n"
            + yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100))


def rendered_before(path: Path) -> bool:
    """Whether the file at `path` is one `backfill evidence --out` wrote (it begins with our header):
    the only kind `--out` writes over."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(HEADER.encode())) == HEADER.encode()
    except OSError:
        return False
