"""The guard's fit of a plan to its table, in a child process: `python -m backfill_assets.cli.guard_fit`.

Checking that a plan fits its table imports the repository's definitions, which a pull request may
have changed; code imported into the process that counts signatures could change how they are
counted (found by an attack: a definitions module that patched the tally got ALLOWED for an
unsigned plan). So the definitions are loaded here, in a process of their own, which answers with
one JSON line: the fit's problems, a note when they could not be checked, and the table's code
identity. The guard counts the signatures in its own process, under files it read before this one
started. What this process answers is the pull request's claim, and the guard says so; the run
checks the code identity against the deployed code every time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from backfill_assets.errors import BackfillError, PlanProblem, UsageError

MARK = "backfill-guard-fit: "
TIMEOUT_SECONDS = 600


def fit_in_child(plan_file: Path, defs: str | None) -> tuple[list[PlanProblem], str | None, str | None]:
    """(problems, a note why the fit was not checked, the table's code identity), from a child."""
    try:
        done = subprocess.run([sys.executable, "-m", "backfill_assets.cli.guard_fit", str(plan_file), defs or ""],
                              capture_output=True, text=True, timeout=TIMEOUT_SECONDS, env=dict(os.environ),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return [], f"not checked against its table: loading the definitions took over {TIMEOUT_SECONDS} s", None
    lines = [line[len(MARK):] for line in done.stdout.splitlines() if line.startswith(MARK)]
    if done.returncode != 0 or len(lines) != 1:
        said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        return [], (f"not checked against its table: loading the definitions failed (exit {done.returncode}"
                    + (f": {said[-1][:200]}" if said else "") + ")"), None
    answer: dict[str, Any] = json.loads(lines[0])
    if answer.get("error"):
        raise UsageError(str(answer["error"]), fix=str(answer.get("fix") or "check --defs"))
    problems = [PlanProblem(str(p["key"]), p["value"], str(p["fix"])) for p in answer.get("problems", [])]
    note, code = answer.get("note"), answer.get("code")
    return problems, None if note is None else str(note), None if code is None else str(code)


def _fit(plan_file: Path, defs: str | None) -> dict[str, Any]:
    from backfill_assets.loaded_defs import load_defs
    from backfill_assets.plan.fit import fit
    from backfill_assets.plan.loading import collect_problems, read_plan_document

    plan, _ = collect_problems(read_plan_document(plan_file))
    if plan is None:
        return {"problems": [], "note": None, "code": None}
    try:
        table = load_defs(defs).table(plan.target)
    except BackfillError as exc:
        if defs:
            return {"error": exc.message, "fix": exc.fix}
        return {"problems": [], "code": None,
                "note": (f"not checked against {plan.target}: {exc.message}; run the guard where the "
                         "definitions are found (workspace.yaml) or pass --defs")}
    fitted = fit(plan, table.spec, table.scheme(), table.graph, drafting=True)
    return {"problems": [{"key": p.key, "value": p.value, "fix": p.fix} for p in fitted.problems],
            "note": None, "code": table.code_identity(plan.assets)}


def main(argv: list[str]) -> int:
    answer = _fit(Path(argv[0]), argv[1] or None)
    print(MARK + json.dumps(answer, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
