"""Reading a plan file into a `Plan`, reporting every problem at once, in time linear in the file.

A plan is refused with one line per problem: the key, the bad value (shortened), and how to fix
it. A ``TODO`` placeholder counts as missing, so a half-filled template never validates. The
checks that need the target's definitions (its partitions, keys, metrics) live in `plan.fit`.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from backfill_assets.errors import PlanInvalidError, PlanProblem, PlanReadError, printable
from backfill_assets.plan.model import RENAMED, Plan
from backfill_assets.settings import whole_number
from backfill_assets.yaml_document import read_yaml_file

MISSING = "<missing>"
MAX_WINDOW_ENV = "BACKFILL_MAX_WINDOW_PARTITIONS"
DEFAULT_MAX_WINDOW = 3660
_TODO = re.compile(r"\bTODO\b")
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_HOUR = re.compile(r"^(\d{4}-\d{2}-\d{2})-(\d{2}):(\d{2})$")

# How to fix a key, by its dotted path (list indexes dropped). The most specific path wins.
FIXES: dict[str, str] = {
    "plan_id": "use lowercase letters, digits, '-' and '_' (e.g. revenue-refund-fix)",
    "owner": "name the person who runs the backfill, as their principal (e.g. olivia)",
    "reason": "say why the replay is needed (incident, logic change, late data)",
    "target": "give the asset key of the replayable table, e.g. daily_revenue",
    "window": "give {start: KEY, end: KEY}, inclusive partition keys of the target",
    "window.start": "give the first partition key, e.g. 2026-01-05",
    "window.end": "give the last partition key, e.g. 2026-01-18",
    "source_of_truth": "give the asset key the gates compare against, e.g. orders",
    "downstream": "list the consumers as [{asset: ..., owners: [...]}]",
    "downstream.asset": "give the consumer's asset key",
    "downstream.owners": "list at least one owner to notify",
    "execution": "fill mode, idempotency and proof_partitions",
    "execution.mode": "use one of overwrite, merge, replay",
    "execution.idempotency": "state plainly why a rerun adds nothing",
    "execution.business_keys": "leave it out (the table's keys are used) or list exactly the table's keys",
    "execution.partitions_per_run": "give an integer from 1 to 1000 (30 is a fast default)",
    "execution.runs_at_once": "give an integer from 1 to 16 (runs of this plan at once)",
    "execution.max_partitions_per_minute": "give an integer >= 1, or remove the key",
    "execution.proof_partitions": "list one or more partition keys inside the window",
    "execution.allow_empty_partitions": "use true or false",
    "execution.max_concurrent_partitions": "renamed: use partitions_per_run (partitions in one run) "
                                           "and runs_at_once (runs in parallel)",
    "incremental": "fill watermark and metrics_comparable",
    "incremental.watermark": "say how the daily cursor behaves during and after the replay",
    "incremental.metrics_comparable": "say why metric definitions stay comparable",
    "publish": "give {freeze: true, notify: [...]}",
    "publish.freeze": "must be true: consumers keep the last good data during the replay",
    "publish.notify": "list who is told when publish freezes and reopens",
    "publish.webhook_url": "give an http(s) URL or remove the key",
    "rollback": "give {strategy: ...}",
    "rollback.strategy": "describe in plain language how the window is restored",
    "gates": "define row_count_parity, duplicates, metrics and contract",
    "gates.row_count_parity": "give {max_diff_pct: N}",
    "gates.row_count_parity.max_diff_pct": "give a percentage between 0 and 100",
    "gates.duplicates": "give {max_rows: N}",
    "gates.duplicates.max_rows": "give an integer >= 0 (usually 0)",
    "gates.source_duplicates": "give {max_rows: N}",
    "gates.source_duplicates.max_rows": "give an integer >= 0 (usually 0)",
    "gates.metrics": "list [{name: ..., tolerance_abs: 0}], at least one",
    "gates.metrics.name": "name a metric the target declares, e.g. net_revenue",
    "gates.metrics.tolerance_pct": "give a percentage of the source figure between 0 and 100 "
                                    "(0.01 means 0.01%), or leave it out for exact",
    "gates.metrics.tolerance_abs": "give an amount >= 0 in the metric's unit, or leave it out for exact",
    "gates.metrics.tolerance": "name the unit: tolerance_pct (percent) or tolerance_abs (amount)",
    "gates.contract": "give {enforce: true}",
    "gates.contract.enforce": "must be true: the contract gate cannot be switched off",
    "expect": "give {changes: [{name: COLUMN_OR_METRIC}], rows_added: false, rows_removed: false}",
    "expect.changes": "list what may change as [{name: net_revenue, direction: up}]",
    "expect.changes.name": "name a value column or a metric of the target, e.g. net_revenue",
    "expect.changes.direction": "use up or down, or leave it out (either way)",
    "expect.changes.per_partition": "give {max_abs: N} and/or {max_pct: N}, or leave it out",
    "expect.changes.window": "give {max_abs: N} and/or {max_pct: N}, or leave it out",
    "expect.changes.per_partition.max_abs": "give an amount >= 0 in the metric's unit",
    "expect.changes.per_partition.max_pct": "give a percentage >= 0 of the figure before the replay",
    "expect.changes.window.max_abs": "give an amount >= 0 in the metric's unit",
    "expect.changes.window.max_pct": "give a percentage >= 0 of the window's figure before the replay",
    "expect.partitions": "list the partition keys that may change, inside the window, or leave it out",
    "expect.rows_added": "use true or false: may keys appear that were not there before",
    "expect.rows_removed": "use true or false: may keys disappear",
    "scenario": "give {kind: incident, incident_id: ..., link: ...}, {kind: logic_change, "
                "old_code_version: ..., new_code_version: ...}, {kind: repair, failure: ...}, "
                "{kind: late_data, arrived: ...} or {kind: cutover, shadow_days: N, tolerance: {abs: 0}}",
    "scenario.kind": "use one of incident, logic_change, repair, late_data, cutover",
    "scenario.incident_id": "give the incident's id, e.g. INC-2291 (printable, no spaces)",
    "scenario.link": "give the incident's http(s) URL",
    "scenario.old_code_version": "give the code version the window was written with, e.g. 1",
    "scenario.new_code_version": "give the code version the replay writes (the table's code_version)",
    "scenario.failure": "say what failed or was published partially",
    "scenario.arrived": "say what data arrived late, and when",
    "scenario.shadow_days": "give the number of consecutive matching partitions the cutover waits for, >= 1",
    "scenario.tolerance": "give {abs: N} (the metric's unit) and/or {pct: N} (percent of the published "
                          "figure); {abs: 0} is exact",
    "scenario.tolerance.abs": "give an amount >= 0 in the metric's unit (0: exact)",
    "scenario.tolerance.pct": "give a percentage of the published figure between 0 and 100 (0.01 means 0.01%)",
    "approvals": "give {required: N, granted: []}",
    "approvals.required": "give an integer from 1 to 20",
    "approvals.granted": "leave it to `backfill plan approve`; entries need a valid SSH signature",
}


def _current_path(path: str) -> str:
    for old, new in RENAMED.items():
        if path == old or path.startswith(old + "."):
            return new + path[len(old):]
    return path


def fix_for(path: str) -> str:
    parts = _current_path(path).split(".")
    while parts:
        candidate = ".".join(p for p in parts if not p.isdigit())
        if candidate in FIXES:
            return FIXES[candidate]
        parts.pop()
    return "remove it or check its spelling against templates/backfill-plan.yaml"


def max_window_partitions() -> int:
    return whole_number(MAX_WINDOW_ENV, DEFAULT_MAX_WINDOW, 1, 1_000_000, "partitions")


def read_plan_document(path: str | Path) -> dict[str, Any]:
    """Parse the file into plain data (bounded, strict YAML); a PlanReadError (exit 2) otherwise."""
    _refuse_link_out(Path(path))
    return read_yaml_file(Path(path))


def _refuse_link_out(path: Path) -> None:
    """A plan file is a pull request's data: one that is (or lies under) a symbolic link resolving out
    of the git work tree that holds it, or into its `.git`, is refused unread. `plan validate`, `plan
    show` and the guard followed `plans/x.yaml` committed as a link to the CI machine's
    `~/.docker/config.json` and printed its unknown key's value, a registry login, in the job's log
    (found by an attack). A link inside the work tree (the team's own `plans/current.yaml`) reads."""
    given = Path(os.path.abspath(path))
    try:
        resolved = given.resolve()
    except (OSError, RuntimeError):  # a loop of links: read_yaml_file says what it is
        return
    if resolved == given:
        return
    # the work tree holding the path as written: a folder that is itself a link is no root of it (a
    # `drafts` linked to another checkout's root found that checkout's `.git` and read its files as
    # the tree's own: found by an attack)
    top = next((p for p in given.parents if not os.path.islink(p) and os.path.lexists(p / ".git")), None)
    if top is None:
        return  # no work tree to hold it: the operator's own files (a checkout without .git is refused elsewhere)
    top = top.resolve()
    where = None
    if not resolved.is_relative_to(top):
        where = f"outside its git work tree {top}"
    elif resolved.is_relative_to(top / ".git"):
        where = "inside its git work tree's .git, outside the files git tracks"
    if where is not None:
        raise PlanReadError(f"{printable(str(path))} is a symbolic link to a file {printable(where)}: a link a pull "
                            "request commits would have this command read (and print) a file of this machine",
                            fix="commit the plan file itself in the repository, not a link out of it")


def _todo_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every value that is still a TODO placeholder (the loader bounds the size)."""
    found: list[tuple[Any, ...]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _todo_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += _todo_paths(value, (*prefix, i))
    elif isinstance(node, str) and _TODO.search(node):
        found.append(prefix)
    return found


def _dotted(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path)


def _without(document: Any, path: tuple[Any, ...]) -> None:
    node = document
    for part in path[:-1]:
        node = node[part]
    if isinstance(node, list):
        node[path[-1]] = None
    else:
        del node[path[-1]]


def _value_at(document: Any, loc: tuple[Any, ...]) -> Any:
    node = document
    for part in loc:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            return MISSING
    return node


def _old_spellings_used(document: dict[str, Any]) -> dict[tuple[str, ...], tuple[str, ...]]:
    """New path -> old path of each renamed key the document spells the old way (and not the new)."""
    used = {}
    for old, new in RENAMED.items():
        *parents, old_key = old.split(".")
        node: Any = document
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and old_key in node and new.split(".")[-1] not in node:
            used[tuple(new.split("."))] = tuple(old.split("."))
    return used


def _as_given(loc: tuple[Any, ...], given_as: dict[tuple[str, ...], tuple[str, ...]]) -> tuple[Any, ...]:
    """A problem's location in the document's own spelling, so it names the key the file has."""
    for new, old in given_as.items():
        if loc[:len(new)] == new:
            return old + loc[len(new):]
    return loc


def collect_problems(document: dict[str, Any]) -> tuple[Plan | None, list[PlanProblem]]:
    """Validate a parsed document; return the plan (when valid) and every problem found."""
    problems: list[PlanProblem] = []
    todo = _todo_paths(document)
    for todo_path in todo:
        problems.append(PlanProblem(_dotted(todo_path), "TODO", f"still a placeholder; {fix_for(_dotted(todo_path))}"))
        _without(document, todo_path)
    todo_paths = {_dotted(p) for p in todo}
    given_as = _old_spellings_used(document)
    plan: Plan | None = None
    try:
        plan = Plan.model_validate(document)
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            loc = _as_given(tuple(error["loc"]), given_as)
            path = _dotted(loc)
            if any(path == t or path.startswith(t + ".") for t in todo_paths):
                continue
            if error["type"] == "extra_forbidden" and path in RENAMED:
                problems.append(PlanProblem(path, _value_at(document, loc),
                                            f"the old spelling of {RENAMED[path]}, given too; keep only "
                                            f"{RENAMED[path].split('.')[-1]}"))
            elif error["type"] == "extra_forbidden":
                problems.append(PlanProblem(path, _value_at(document, loc), fix_for(path)
                                            if path.split(".")[-1] in ("max_concurrent_partitions",
                                                                      "tolerance")
                                            else "unknown key; remove it or check its spelling "
                                                 "against templates/backfill-plan.yaml"))
            elif error["type"] == "missing":
                problems.append(PlanProblem(path, MISSING, f"required; {fix_for(path)}"))
            elif path == "scenario" and error["type"] == "value_error":
                # a kind's fields, all named in one line (the message says which and how)
                given = error.get("input")
                problems.append(PlanProblem(path, given.get("kind") if isinstance(given, dict) else given,
                                            str(error["msg"]).removeprefix("Value error, ")))
            else:
                message = str(error["msg"]).removeprefix("Value error, ")
                problems.append(PlanProblem(path, error.get("input"), f"{message}; {fix_for(path)}"))
    # the cross-key rules run on whatever parsed, so they are reported beside schema problems
    problems += _rule_problems(document)
    return (plan if not problems else None), problems


def _day(value: Any) -> dt.date | None:
    if isinstance(value, str) and _DAY.match(value.strip()):
        try:
            return dt.date.fromisoformat(value.strip())
        except ValueError:
            return None
    return None


def estimate_window(start: Any, end: Any) -> int | None:
    """Partitions between two keys when their form tells (days or hours), else None."""
    first, last = _day(start), _day(end)
    if first and last:
        return (last - first).days + 1
    if isinstance(start, str) and isinstance(end, str):
        a, b = _HOUR.match(start.strip()), _HOUR.match(end.strip())
        if a and b and _day(a.group(1)) and _day(b.group(1)):
            try:
                t0 = dt.datetime.fromisoformat(f"{a.group(1)}T{a.group(2)}:{a.group(3)}")
                t1 = dt.datetime.fromisoformat(f"{b.group(1)}T{b.group(2)}:{b.group(3)}")
            except ValueError:
                return None
            return int((t1 - t0).total_seconds() // 3600) + 1
    return None


def _block(document: dict[str, Any], name: str) -> dict[str, Any]:
    value = document.get(name)
    return value if isinstance(value, dict) else {}


def _rule_problems(document: dict[str, Any], today: dt.date | None = None) -> list[PlanProblem]:
    """Rules that span keys: a bounded, past window and proof partitions inside it."""
    today = today or dt.datetime.now(dt.UTC).date()
    problems = []
    window = _block(document, "window")
    start, end = window.get("start"), window.get("end")
    first, last = _day(start), _day(end)
    if first and last and first > last:
        problems.append(PlanProblem("window", f"{first}..{last}", "start is after end; swap them"))
    if last and last > today:
        problems.append(PlanProblem("window.end", str(last), f"is in the future (today is {today}); "
                                    "end on or before today"))
    # the table's partitioning decides the count (`plan.fit`, exact); before it is known, a window of
    # dates is refused only when no date partitioning (monthly at the coarsest) fits it in the limit
    size = estimate_window(start, end)
    limit = max_window_partitions()
    least = -(-size // 31) if size is not None and first and last else size
    if least is not None and least > limit:
        counted = (f"spans {size:,} days, at least {least:,} partitions" if first and last
                   else f"spans {size:,} partitions")
        problems.append(PlanProblem("window", f"{start}..{end}", f"{counted}, more than the limit of {limit:,}; "
                                    f"split it into bounded plans (or raise {MAX_WINDOW_ENV})"))
    expect = _block(document, "expect")
    problems += _outside_window("execution.proof_partitions", _block(document, "execution").get("proof_partitions"),
                                first, last)
    gates = _block(document, "gates") or _block(document, "checks")  # checks: its spelling before 0.3
    problems += _listed_twice("gates.metrics.name", gates.get("metrics"))
    problems += _listed_twice("expect.changes.name", expect.get("changes"))
    problems += _outside_window("expect.partitions", expect.get("partitions"), first, last)
    return problems


def _outside_window(field: str, keys: object, first: dt.date | None, last: dt.date | None) -> list[PlanProblem]:
    """The keys of a list field that fall outside a well-formed window."""
    if not (first and last and first <= last and isinstance(keys, list)):
        return []
    days = [d for d in map(_day, keys) if d]
    return [PlanProblem(field, str(d), f"is outside the window {first}..{last}; pick keys inside it")
            for d in days if not first <= d <= last]


def _listed_twice(field: str, items: object) -> list[PlanProblem]:
    """The names given to more than one entry of a list of mappings."""
    names = [i.get("name") for i in items if isinstance(i, dict)] if isinstance(items, list) else []
    return [PlanProblem(field, n, "listed twice; keep one")
            for n in sorted({n for n in names if isinstance(n, str) and names.count(n) > 1})]


def load_plan(path: str | Path) -> Plan:
    """Load and validate a plan file, raising with every problem when it is not complete."""
    plan, problems = collect_problems(read_plan_document(path))
    if problems or plan is None:
        raise PlanInvalidError(str(path), problems)
    return plan
