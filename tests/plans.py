"""Plan documents for tests: a complete one, and ways to break it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml


def complete_plan(plan_id: str = "revenue-refund-fix", start: str = "2026-01-01",
                  end: str = "2026-01-06", proof: tuple[str, ...] = ("2026-01-02",),
                  mode: str = "overwrite", per_run: int = 2, target: str = "daily_revenue",
                  source: str = "orders", runs_at_once: int | None = None) -> dict[str, Any]:
    return {
        "plan_id": plan_id,
        "owner": "olivia",
        "reason": "refunds were counted twice in daily_revenue since the 2025-12 release",
        "target": target,
        "window": {"start": start, "end": end},
        "source_of_truth": source,
        "downstream": [{"asset": "published_revenue", "owners": ["finance-bi"]}],
        "execution": {
            "mode": mode,
            "idempotency": "each partition is deleted and re-inserted in one transaction",
            "proof_partitions": list(proof),
            "partitions_per_run": per_run,
            **({"runs_at_once": runs_at_once} if runs_at_once else {}),
        },
        "incremental": {
            "watermark": "the daily schedule keeps its cursor; the window is frozen meanwhile",
            "metrics_comparable": "one code version for the whole window, same definitions",
        },
        "publish": {"freeze": True, "notify": ["#revenue-consumers"]},
        "rollback": {"strategy": "restore every written partition from its pre-run snapshot"},
        "gates": {
            "row_count_parity": {"max_diff_pct": 0},
            "duplicates": {"max_rows": 0},
            "metrics": [{"name": "net_revenue"}, {"name": "orders"}],
            "contract": {"enforce": True},
        },
        "approvals": {"required": 2, "granted": []},
    }


def write_plan(path: Path, document: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def edited(document: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy with `a__b` keys set (value) or removed (None)."""
    out = copy.deepcopy(document)
    for dotted, value in changes.items():
        parts = dotted.split("__")
        node = out
        for part in parts[:-1]:
            node = node[part]
        if value is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = value
    return out
