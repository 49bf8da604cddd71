"""Rendering the release-gate evidence (templates/release-gate-evidence.yaml) from the record."""

from __future__ import annotations

import json
from typing import Any

import duckdb
import yaml

from backfill_assets.control import evidence_log, gate_record
from backfill_assets.control.record import PlanState
from backfill_assets.control.schema import SCHEMA
from backfill_assets.errors import EvidenceChainBroken


def render(con: duckdb.DuckDBPyConnection, state: PlanState, actor: str) -> dict[str, Any]:
    plan_json = json.loads(con.execute(f"SELECT plan_json FROM {SCHEMA}.plans WHERE plan_id = ?",
                                       [state.plan_id]).fetchone()[0])
    rows = evidence_log.rows(con, plan_id=state.plan_id)
    sha = state.approved_sha256 or state.sha256

    def last(kind: str, **match: Any) -> evidence_log.EvidenceRow | None:
        found = [r for r in rows if r.kind == kind
                 and all(r.payload.get(k) == v for k, v in match.items())]
        return found[-1] if found else None

    pause = last("notification", event="paused")
    proof = last("proof", passed=True)
    reconciled = last("window_reconciled")
    published = last("published")
    rolled = last("rollback")
    latest = gate_record.latest(con, state.target, state.partition_keys, state.plan_id)
    head_seq, head_hash = evidence_log.head(con)
    try:
        evidence_log.verify(con)
        verified: bool | str = True
    except EvidenceChainBroken as exc:
        verified = f"NO: {exc}"
    return {
        "plan": {
            "plan_id": state.plan_id, "sha256": sha, "path": state.path, "owner": state.owner,
            "target": state.target, "source_of_truth": plan_json["source_of_truth"],
            "window": {"start": state.window_start.isoformat(),
                       "end": state.window_end.isoformat()},
            "mode": plan_json["execution"]["mode"], "phase": state.phase.value,
        },
        "approvals": [r.payload for r in rows if r.kind == "approval"
                      and r.payload.get("plan_sha256") == sha],
        "publish_pause": {"paused_at": pause.at if pause else None,
                          "notified": pause.payload.get("recipients") if pause else []},
        "proof": {"partitions": list(state.proof_keys),
                  "fingerprints": proof.payload.get("fingerprints") if proof else {},
                  "passed_at": proof.at if proof else None},
        "snapshots": [{"table": r.payload["table"], "partition": r.payload["partition"],
                       "rows": r.payload["rows"], "fingerprint": r.payload["fingerprint"]}
                      for r in rows if r.kind == "snapshot"],
        "gates": [
            {"partition": key, "written_at": entry.write_at if entry else None,
             "fingerprint": entry.fingerprint if entry else None,
             "results": [{"gate": gate, "passed": passed,
                          **{k: figures.get(k) for k in ("expected", "actual", "threshold",
                                                         "difference")}}
                         for gate, (passed, figures) in (entry.gates.items() if entry else [])]}
            for key, entry in latest.items()],
        "reconciled_at": reconciled.at if reconciled else None,
        "published": ({"at": published.at, "by": published.actor,
                       "partitions": len(published.payload.get("partitions", []))}
                      if published else None),
        "rollback": ({"at": rolled.at, "by": rolled.actor} if rolled else None),
        "chain": {"rows": len(rows), "verified": verified,
                  "head_seq": head_seq, "head_hash": head_hash,
                  "rendered_at": evidence_log.now_iso(), "rendered_by": actor},
    }


def to_yaml(document: dict[str, Any]) -> str:
    header = ("# Release-gate evidence rendered by `backfill evidence` from the control record.\n"
              "# Form: templates/release-gate-evidence.yaml\n")
    return header + yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=100)
