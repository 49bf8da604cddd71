"""Where the tests' time goes, by what they ask of the product: a pytest plugin that times each
DuckDB statement (grouped by its first words), each CLI command the tests run in their process
(grouped by its first two words) and each Dagster run, and prints the totals when the session ends.

    PYTHONPATH=benchmarks:. .venv/bin/pytest -q -p suite_statements tests/test_permission.py tests/test_gates.py
    SUITE_STATEMENTS_OUT=/tmp/where.txt PYTHONPATH=benchmarks:. .venv/bin/pytest -q -p suite_statements ...

Run it on a few in-process modules without `-n` (a worker's totals would be its own). Each
statement's time is DuckDB's call alone; a command's includes its statements and runs. A benchmark,
not a test.
"""

from __future__ import annotations

import collections
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any

_statements: collections.defaultdict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])
_commands: collections.defaultdict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0])


def _timed(table: collections.defaultdict[str, list[float]], key: Callable[..., str],
           real: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            entry = table[key(*args, **kwargs)]
            entry[0] += 1
            entry[1] += time.perf_counter() - started
    return wrapper


def _command(argv: list[str] | None = None) -> str:
    words = [a for a in (argv or []) if not a.startswith(("/", "--home"))]
    return "backfill " + " ".join(words[:2])


def pytest_configure(config: Any) -> None:
    from dagster._core.execution import execute_in_process

    import backfill_assets.cli as cli
    from backfill_assets.warehouse import duckdb_engine

    duckdb_engine.DuckDBSession._run = _timed(  # type: ignore[method-assign]
        _statements, lambda self, sql, params: re.sub(r"\s+", " ", sql.strip())[:100],
        duckdb_engine.DuckDBSession._run)
    execute_in_process.core_execute_in_process = _timed(  # type: ignore[assignment]
        _commands, lambda *a, **k: "a Dagster run (in a command or a test)", execute_in_process.core_execute_in_process)
    main = _timed(_commands, _command, cli.main)
    cli.main = main  # type: ignore[assignment]
    for name in ("tests.world", "tests.conftest"):  # the tests' own references to `main`
        module = sys.modules.get(name) or __import__(name, fromlist=["cli_main"])
        module.cli_main = main  # type: ignore[attr-defined]


def _table(title: str, table: dict[str, list[float]], top: int) -> list[str]:
    total_n, total_s = sum(int(v[0]) for v in table.values()), sum(v[1] for v in table.values())
    lines = [f"{title}: {total_n:,} in {total_s:.2f} s", "  count  seconds  each ms"]
    for text, (n, s) in sorted(table.items(), key=lambda kv: -kv[1][1])[:top]:
        lines.append(f"  {int(n):5d}  {s:7.2f}  {s / n * 1000:7.2f}  {text}")
    return lines


def pytest_sessionfinish(session: Any) -> None:
    lines = [*_table("DuckDB statements", _statements, 25), "", *_table("commands and runs", _commands, 15)]
    out = os.environ.get("SUITE_STATEMENTS_OUT")
    if out:
        with open(out, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    sys.stdout.write("\n" + "\n".join(lines) + "\n")
