"""Reading a plan file into a `Plan`, reporting every problem at once.

A plan is refused with one line per problem: the key, the bad value, and how to fix it. A
``TODO`` placeholder counts as missing, so a half-filled template never validates.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from backfill_assets.errors import PlanInvalidError, PlanProblem, PlanReadError
from backfill_assets.plan.model import Plan

MISSING = "<missing>"

# How to fix a key, by its dotted path (list indexes dropped). The most specific path wins.
FIXES: dict[str, str] = {
    "plan_id": "use lowercase letters, digits, '-' and '_' (e.g. revenue-refund-fix)",
    "owner": "name the person who runs the backfill",
    "reason": "say why the replay is needed (incident, logic change, late data)",
    "target": "give the asset key of the replayable table, e.g. daily_revenue",
    "window": "give {start: YYYY-MM-DD, end: YYYY-MM-DD}, inclusive partition keys",
    "window.start": "give the first partition key as YYYY-MM-DD",
    "window.end": "give the last partition key as YYYY-MM-DD",
    "source_of_truth": "give the asset key the gates compare against, e.g. orders",
    "downstream": "list the consumers as [{asset: ..., owners: [...]}]",
    "downstream.asset": "give the consumer's asset key",
    "downstream.owners": "list at least one owner to notify",
    "execution": "fill mode, idempotency, business_keys, max_concurrent_partitions, "
    "proof_partitions",
    "execution.mode": "use one of overwrite, merge, replay",
    "execution.idempotency": "state plainly why a rerun adds nothing",
    "execution.business_keys": "list the columns that identify a row, e.g. [order_date, region]",
    "execution.max_concurrent_partitions": "give an integer >= 1",
    "execution.proof_partitions": "list one or more partition keys (YYYY-MM-DD) inside the window",
    "execution.allow_empty_partitions": "use true or false",
    "incremental": "fill watermark and metrics_comparable",
    "incremental.watermark": "say how the daily cursor behaves during and after the replay",
    "incremental.metrics_comparable": "say why metric definitions stay comparable",
    "publish": "give {pause: true, notify: [...]}",
    "publish.pause": "must be true: consumers keep the last good data during the replay",
    "publish.notify": "list who is told when publish pauses and reopens",
    "publish.webhook_url": "give an http(s) URL or remove the key",
    "rollback": "give {strategy: ...}",
    "rollback.strategy": "describe in plain language how the window is restored",
    "checks": "define row_count_parity, duplicates, metrics and contract",
    "checks.row_count_parity": "give {max_diff_pct: N}",
    "checks.row_count_parity.max_diff_pct": "give a percentage between 0 and 100",
    "checks.duplicates": "give {max_rows: N}",
    "checks.duplicates.max_rows": "give an integer >= 0 (usually 0)",
    "checks.metrics": "list [{name: ..., tolerance_pct: N}], at least one",
    "checks.metrics.name": "name a metric the target declares, e.g. net_revenue",
    "checks.metrics.tolerance_pct": "give a percentage between 0 and 100",
    "checks.contract": "give {enforce: true}",
    "checks.contract.enforce": "must be true: the contract gate cannot be switched off",
    "approvals": "give {required: N, granted: []}",
    "approvals.required": "give an integer >= 1",
    "approvals.granted": "leave it to `backfill plan approve`; do not edit by hand",
}


def fix_for(path: str) -> str:
    parts = path.split(".")
    while parts:
        candidate = ".".join(p for p in parts if not p.isdigit())
        if candidate in FIXES:
            return FIXES[candidate]
        parts.pop()
    return "remove it or check its spelling against templates/backfill-plan.yaml"


def read_plan_document(path: Path) -> dict[str, Any]:
    """Parse the YAML file into a mapping; unreadable input is a PlanReadError (exit 2)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlanReadError(
            f"{path}: no such plan file", fix="check the path, or create one with "
            "`backfill plan new`"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanReadError(f"{path}: cannot read ({exc})", fix="check the file") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise PlanReadError(
            f"{path}: malformed YAML{where} ({problem})",
            fix="fix the indentation or quoting there",
        ) from None
    if not isinstance(document, dict):
        raise PlanReadError(
            f"{path}: expected a mapping of plan keys, found {type(document).__name__}",
            fix="start from templates/backfill-plan.yaml",
        )
    return document


def _todo_paths(node: Any, prefix: str = "") -> list[str]:
    """Dotted paths of every value that is still a TODO placeholder."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _todo_paths(value, f"{prefix}{key}" if not prefix else f"{prefix}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _todo_paths(value, f"{prefix}.{i}")
    elif isinstance(node, str) and "TODO" in node:
        found.append(prefix)
    return found


def _drop(document: Any, path: str) -> None:
    parts = path.split(".")
    node = document
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last = parts[-1]
    if isinstance(node, list):
        node[int(last)] = None
    else:
        del node[last]


def _value_at(document: Any, loc: tuple[Any, ...]) -> Any:
    node = document
    for part in loc:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return MISSING
    return node


def collect_problems(document: dict[str, Any]) -> tuple[Plan | None, list[PlanProblem]]:
    """Validate a parsed document; return the plan (when valid) and every problem found."""
    problems: list[PlanProblem] = []
    todo = _todo_paths(document)
    for path in todo:
        problems.append(PlanProblem(path, "TODO", f"still a placeholder; {fix_for(path)}"))
        _drop(document, path)
    plan: Plan | None = None
    try:
        plan = Plan.model_validate(document)
    except ValidationError as exc:
        for error in exc.errors():
            loc = tuple(error["loc"])
            path = ".".join(str(p) for p in loc)
            if any(path == t or path.startswith(t + ".") for t in todo):
                continue
            if error["type"] == "extra_forbidden":
                problems.append(PlanProblem(
                    path, _value_at(document, loc),
                    "unknown key; remove it or check its spelling against "
                    "templates/backfill-plan.yaml"))
            elif error["type"] == "missing":
                problems.append(PlanProblem(path, MISSING, f"required; {fix_for(path)}"))
            else:
                problems.append(
                    PlanProblem(path, error.get("input"), f"{error['msg']}; {fix_for(path)}")
                )
    # the cross-key rules run on whatever parsed, so they are reported beside schema problems
    problems += _rule_problems(document)
    return (plan if not problems else None), problems


def _date(value: Any) -> dt.date | None:
    if isinstance(value, dt.datetime):
        return None
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            return None
    return None


def _rule_problems(document: dict[str, Any], today: dt.date | None = None) -> list[PlanProblem]:
    """Rules that span keys: a bounded, past window and proof partitions inside it."""
    today = today or dt.datetime.now(dt.UTC).date()
    problems = []
    window = document.get("window") if isinstance(document.get("window"), dict) else {}
    start, end = _date(window.get("start")), _date(window.get("end"))
    if start and end and start > end:
        problems.append(PlanProblem("window", f"{start}..{end}", "start is after end; swap them"))
    if end and end > today:
        problems.append(PlanProblem(
            "window.end", str(end), f"is in the future (today is {today}); end on or before "
            "today"))
    execution = document.get("execution") if isinstance(document.get("execution"), dict) else {}
    proof = execution.get("proof_partitions")
    if start and end and start <= end and isinstance(proof, list):
        for key in filter(None, (_date(k) for k in proof)):
            if not (start <= key <= end):
                problems.append(PlanProblem(
                    "execution.proof_partitions", str(key),
                    f"is outside the window {start}..{end}; pick keys inside it"))
    checks = document.get("checks") if isinstance(document.get("checks"), dict) else {}
    metrics = checks.get("metrics") if isinstance(checks.get("metrics"), list) else []
    names = [m.get("name") for m in metrics if isinstance(m, dict) and m.get("name")]
    for name in sorted({n for n in names if names.count(n) > 1}):
        problems.append(PlanProblem("checks.metrics.name", name, "listed twice; keep one"))
    return problems


def load_plan(path: str | Path) -> Plan:
    """Load and validate a plan file, raising with every problem when it is not complete."""
    path = Path(path)
    plan, problems = collect_problems(read_plan_document(path))
    if problems or plan is None:
        raise PlanInvalidError(str(path), problems)
    return plan
