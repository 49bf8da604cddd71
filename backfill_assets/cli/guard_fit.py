"""The guard's fit of a plan to its table, in a child process: `python -m backfill_assets.cli.guard_fit`.

Checking that a plan fits its table imports the repository's definitions, which a pull request may
have changed; code imported into the process that counts signatures could change how they are
counted (found by an attack: a definitions module that patched the tally got ALLOWED for an
unsigned plan). So the definitions are loaded in a process of their own (a fork of the guard
where it runs one thread, else a new interpreter), which answers with one JSON line: the fit's
problems, a note when they could not be checked, and the table's code identity. The guard counts
the signatures in its own process, under files it read before the child started. What the child
answers is the pull request's claim, and the guard says so; the run checks the code identity
against the deployed code every time.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from backfill_assets.errors import BackfillError, PlanProblem, UsageError

MARK = "backfill-guard-fit: "
TIMEOUT_SECONDS = 600
ANSWER_BYTES = 1024 * 1024


def fit_in_child(plan_file: Path, defs: str | None) -> tuple[list[PlanProblem], str | None, str | None]:
    """(problems, a note why the fit was not checked, the table's code identity), from a child: a
    fork where this process runs one thread (it has imported what the fit needs: ~1 s less than a
    new interpreter), else a new interpreter."""
    # always a child, even for this package's own definitions: loading any of them puts the current
    # folder (a pull request's checkout) first on the import path, and a module there named like one
    # the definitions import later (`_strptime.py`) would run here (found by an attack)
    try:
        if hasattr(os, "fork") and threading.active_count() == 1:
            code, out, err = _forked(plan_file, defs)
        else:
            done = subprocess.run([sys.executable, "-m", "backfill_assets.cli.guard_fit", str(plan_file),
                                   defs or ""], capture_output=True, text=True, timeout=TIMEOUT_SECONDS,
                                  env=dict(os.environ), stdin=subprocess.DEVNULL)
            code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired:
        return [], f"not checked against its table: loading the definitions took over {TIMEOUT_SECONDS} s", None
    lines = [line[len(MARK):] for line in out.splitlines() if line.startswith(MARK)]
    if code != 0 or len(lines) != 1:
        said = [line.strip() for line in err.splitlines() if line.strip()]
        return [], (f"not checked against its table: loading the definitions failed (exit {code}"
                    + (f": {one_line(said[-1], 200)}" if said else "") + ")"), None
    try:
        return _read_answer(json.loads(lines[0]))
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        # the child runs the pull request's code, which may answer anything: never a crash here
        return [], "not checked against its table: the definitions' process gave a malformed answer", None


def one_line(text: object, limit: int = 500) -> str:
    """A child's text as one printable line: its newlines and terminal escapes would print lines
    of their own (a fake `ALLOWED: ...`, found by an attack)."""
    shown = " ".join("".join(c if c.isprintable() else " " for c in str(text)).split())
    return shown if len(shown) <= limit else shown[:limit - 3] + "..."


def _read_answer(answer: object) -> tuple[list[PlanProblem], str | None, str | None]:
    if not isinstance(answer, dict):
        raise TypeError("the answer is not an object")
    if answer.get("error"):
        raise UsageError(one_line(answer["error"]), fix=one_line(answer.get("fix") or "check --defs"))
    found = answer.get("problems", [])
    if not isinstance(found, list):
        raise TypeError("problems is not a list")
    problems = [PlanProblem(one_line(p["key"]), p["value"] if isinstance(p["value"], int | float | bool) or
                            p["value"] is None else one_line(p["value"]), one_line(p["fix"])) for p in found]
    note, code = answer.get("note"), answer.get("code")
    if note is None and code is None:  # the fit either names the table's code or says why it could not
        raise TypeError("neither a code identity nor a note")
    return problems, None if note is None else one_line(note), None if code is None else one_line(code)


def _forked(plan_file: Path, defs: str | None) -> tuple[int, str, str]:
    """(exit code, its answer, why it failed) of a forked child that fits the plan; its own output
    goes nowhere, as a new interpreter's would be captured."""
    sys.stdout.flush()
    sys.stderr.flush()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns, never runs this process's exit handlers
        code = 1
        try:
            os.close(read)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            try:
                text = MARK + json.dumps(_fit(plan_file, defs), default=str) + "\n"
                code = 0
            except BaseException as exc:  # noqa: BLE001 - said to the parent, which decides
                text = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            with os.fdopen(write, "w") as out:
                out.write(text)
        finally:
            os._exit(code)
    os.close(write)
    chunks: list[bytes] = []
    deadline = time.monotonic() + TIMEOUT_SECONDS
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired("guard fit", TIMEOUT_SECONDS)
            chunk = os.read(read, 65536)
            if not chunk:
                break
            chunks.append(chunk)
            if sum(map(len, chunks)) > ANSWER_BYTES:  # an answer is a line; more is not an answer
                os.kill(pid, signal.SIGKILL)
                chunks = [b"the answer was larger than 1 MB"]
                break
    finally:
        os.close(read)
        _, status = os.waitpid(pid, 0)
    text = b"".join(chunks).decode("utf-8", "replace")
    code = os.waitstatus_to_exitcode(status)
    return (code, text, "") if code == 0 else (code, "", text)


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
