"""Plan documents for tests: a complete one, and ways to break it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml


def complete_plan(plan_id: str = "revenue-refund-fix", start: str = "2026-01-01",
                  end: str = "2026-01-06", proof: tuple[str, ...] = ("2026-01-02",),
                  mode: str = "overwrite", max_concurrent: int = 2) -> dict[str, Any]:
    return {
        "plan_id": plan_id,
        "owner": "olivia",
        "reason": "refunds were counted twice in daily_revenue since the 2025-12 release",
        "target": "daily_revenue",
        "window": {"start": start, "end": end},
        "source_of_truth": "orders",
        "downstream": [{"asset": "published_revenue", "owners": ["finance-bi"]}],
        "execution": {
            "mode": mode,
            "idempotency": "each partition is deleted and re-inserted in one transaction",
            "business_keys": ["order_date", "region"],
            "max_concurrent_partitions": max_concurrent,
            "proof_partitions": list(proof),
        },
        "incremental": {
            "watermark": "the daily schedule keeps its cursor; the window is frozen meanwhile",
            "metrics_comparable": "one code version for the whole window, same definitions",
        },
        "publish": {"pause": True, "notify": ["#revenue-consumers"]},
        "rollback": {"strategy": "restore every written partition from its pre-run snapshot"},
        "checks": {
            "row_count_parity": {"max_diff_pct": 0},
            "duplicates": {"max_rows": 0},
            "metrics": [{"name": "net_revenue", "tolerance_pct": 0.01},
                        {"name": "orders", "tolerance_pct": 0}],
            "contract": {"enforce": True},
        },
        "approvals": {"required": 2, "granted": []},
    }


def write_plan(path: Path, document: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def edited(document: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy with dotted keys set (value) or removed (None)."""
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
