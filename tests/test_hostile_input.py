"""Hostile plan files (issue 10): through the real `backfill` command and the guard hook, every one
is a short answer with the right exit code, never a traceback, a hang or a stray file."""

from __future__ import annotations

import re
import resource
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backfill_assets.errors import BackfillError, PlanProblem
from backfill_assets.plan.loading import collect_problems
from backfill_assets.yaml_document import read_yaml_text
from tests.conftest import BIN, ROOT
from tests.plans import complete_plan, write_plan

HOOK = ROOT / "hooks" / "backfill-guard.sh"
READERS = (("plan", "validate"), ("guard",), ("plan", "show"))
NO_DEFS = {"BACKFILL_DEFS": ""}  # the plan alone, before any table is loaded (and faster)


def plan_text(**changes) -> str:
    return yaml.safe_dump(complete_plan(**changes), sort_keys=False)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def one_short_line(err: str) -> str:
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert len(err) < 300 and "Traceback" not in err, err
    return err.strip()


def billion_laughs_plan() -> str:
    """The classic nine-level bomb (10^9 "lol"s once expanded) as a plan's reason: 491 bytes."""
    lines = ["plan_id: lol", "owner: mallory", "reason:",
             "  a: &a [" + ",".join(['"lol"'] * 9) + "]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"  {name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    body = "\n".join(lines) + "\n"
    head = "# the replay we were asked to approve\n"
    text = head + "#" * (491 - len(head) - len(body) - 1) + "\n" + body
    assert len(text.encode()) == 491
    return text


def bomb_under_an_unknown_key() -> str:
    lines = ["lol_payload:", "  a: &a [" + ", ".join(['"lol"'] * 9) + "]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines += [f"  {name}: &{name}"] + [f"    - *{prev}"] * 9
    text = plan_text() + "\n".join(lines) + "\n"
    assert 1700 < len(text.encode()) < 1900  # 1.8 KB
    return text


def argv(command: str, path: Path) -> list[str]:
    if command == "hook":
        return [str(HOOK), str(path)]
    return [str(BIN / "backfill"), *command.split(), str(path)]


def timed(run_subprocess, command: list[str]):
    """The result, the wall time, and the CPU time the command itself used (unaffected by a busy host)."""
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    result = run_subprocess(command=command, timeout=30)
    wall, after = time.perf_counter() - started, resource.getrusage(resource.RUSAGE_CHILDREN)
    return result, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


@pytest.mark.parametrize("bomb", ["billion-laughs", "under-an-unknown-key"])
def test_alias_bombs_exit_2_fast_with_one_short_line_everywhere(tmp_path, run_subprocess, bomb):
    text = billion_laughs_plan() if bomb == "billion-laughs" else bomb_under_an_unknown_key()
    path = write(tmp_path, "bomb.yaml", text)
    # the command's own start-up (Python, imports) is the floor; a loaded machine can stretch it
    _, startup, _ = timed(run_subprocess, argv("plan validate", write(tmp_path, "broken.yaml", "{unclosed")))
    for command in ("plan validate", "guard", "plan show", "hook"):
        result, wall, cpu = timed(run_subprocess, argv(command, path))
        assert result.code == 2, (command, result)
        line = one_short_line(result.err)
        assert line.startswith(f"backfill: {path}: anchors and aliases are not allowed in a plan"), line
        assert result.out == ""
        assert cpu < 2.0, (command, cpu)  # expanding the bomb would take far more
        assert wall < max(2.0, 2 * startup + 1.0), (command, wall, startup)


INVALID_DATES = ["2026-02-30", "2026-13-01"]


@pytest.mark.parametrize("day", INVALID_DATES)
def test_a_date_that_does_not_exist_is_one_problem_naming_window_start(tmp_path, run_subprocess, day):
    path = write(tmp_path, "p.yaml", plan_text().replace("start: '2026-01-01'", f"start: {day}"))
    expected = f"  - window.start = '{day}': {day} is not a real date; give the first partition key"
    for command in (("plan", "validate"), ("plan", "show"),
                    ("plan", "approve", "--by", "alice", "--key", str(tmp_path / "no-key"))):
        result = run_subprocess(*command[:2], str(path), *command[2:])
        assert result.code == 1, (command, result)
        assert result.err.splitlines() == [f"backfill: {path}: {expected[4:]}, e.g. 2026-01-05"]
        assert "Traceback" not in result.err
    guard = run_subprocess("guard", str(path))
    assert guard.code == 1 and guard.err == ""
    bounded = [ln for ln in guard.out.splitlines() if "affected window and partitions bounded" in ln]
    assert bounded == [f"- [ ] affected window and partitions bounded: {expected[4:]}, e.g. 2026-01-05"]


def test_odd_top_level_keys_are_one_line_never_a_key_error(tmp_path, run_subprocess):
    dotted = write(tmp_path, "dotted.yaml", plan_text() + '"a.b": TODO\n')
    for command in (("plan", "validate"), ("plan", "show")):
        result = run_subprocess(*command, str(dotted))
        assert result.code == 1, result
        assert result.err.splitlines() == [
            f"backfill: {dotted}: a.b = 'TODO': still a placeholder; remove it or check its spelling against "
            "templates/backfill-plan.yaml"]
        assert "KeyError" not in result.err and "Traceback" not in result.err
    numeric = write(tmp_path, "numeric.yaml", plan_text() + "5: TODO\n")
    for command in READERS:
        result = run_subprocess(*command, str(numeric))
        assert result.code == 2, result
        line = one_short_line(result.err)
        assert "key 5 at line 41 is int, not a name" in line and "KeyError" not in line


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("partitions_per_run: 2", "partitions_per_run: 99999999999999999999999",
     "  - execution.partitions_per_run = 99999999999999999999999: Input should be less than or equal to "
     "1000; give an integer from 1 to 1000 (30 is a fast default)"),
    ("required: 2", "required: true",
     "  - approvals.required = True: Input should be a valid integer; give an integer from 1 to 20"),
    ("required: 2", 'required: "2"',
     "  - approvals.required = '2': Input should be a valid integer; give an integer from 1 to 20"),
    ("required: 2", "required: 2.0",
     "  - approvals.required = 2.0: Input should be a valid integer; give an integer from 1 to 20"),
])
def test_numbers_are_strict_and_bounded_one_line_each(tmp_path, run_subprocess, old, new, expected):
    text = plan_text()
    assert old in text
    path = write(tmp_path, "p.yaml", text.replace(old, new))
    result = run_subprocess("plan", "validate", str(path))
    assert result.code == 1
    assert result.err.splitlines() == [f"backfill: {path}: {expected[4:]}"]


def test_an_integer_of_thousands_of_digits_is_one_line_not_a_value_error(tmp_path, run_subprocess):
    # CPython refuses int() past 4300 digits with a bare ValueError; the reader must refuse first
    path = write(tmp_path, "p.yaml", plan_text().replace("partitions_per_run: 2", "partitions_per_run: "
                                                         + "9" * 5000))
    result = run_subprocess("plan", "validate", str(path))
    assert result.code == 2
    assert one_short_line(result.err) == (f"backfill: {path}: integer at line 18 has more than 4300 digits: "
                                          "use a realistic number")


def test_a_word_that_contains_todo_is_not_a_placeholder(tmp_path, run_subprocess):
    path = write(tmp_path, "p.yaml", plan_text().replace("owner: olivia", "owner: NOTODOS"))
    result = run_subprocess("plan", "validate", str(path), env=NO_DEFS)
    assert result.code == 0, result.err
    assert "complete (plan revenue-refund-fix" in result.out and "placeholder" not in result.out + result.err


def test_a_key_holding_a_line_break_cannot_forge_extra_problem_lines(tmp_path, run_subprocess):
    # a reviewer reads the problem list; a crafted key must not add lines that look like more problems
    for key in ('"evil\\n  - approvals are fine"', '"evil\\u2028  - approvals are fine"'):
        path = write(tmp_path, "p.yaml", plan_text() + f"{key}: 1\n")
        result = run_subprocess("plan", "validate", str(path))
        assert result.code == 1
        lines = result.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"backfill: {path}: evil") and "unknown key" in lines[0], lines
        guard = run_subprocess("guard", str(path))
        assert guard.code == 1 and len(guard.out.splitlines()) == 12, guard.out


def test_a_thousand_year_window_is_refused_and_not_ticked_bounded(tmp_path, run_subprocess):
    path = write_plan(tmp_path / "millennium.yaml", complete_plan(start="1026-01-01", end="2026-01-06"))
    result = run_subprocess("plan", "validate", str(path), env=NO_DEFS)
    assert result.code == 1
    assert result.err.splitlines() == [
        f"backfill: {path}: window = '1026-01-01..2026-01-06': spans 365,249 days, at least 11,783 partitions, "
        "more than the limit of 3,660; split it into bounded plans (or raise BACKFILL_MAX_WINDOW_PARTITIONS)"]
    guard = run_subprocess("guard", str(path), env=NO_DEFS)
    assert guard.code == 1
    assert "- [ ] affected window and partitions bounded: window = '1026-01-01..2026-01-06': spans 365,249 " \
           "days, at least 11,783 partitions, more than the limit of 3,660" in guard.out
    # the limit is a setting: raised, the millennium is no longer "more than the limit"
    raised = {**NO_DEFS, "BACKFILL_MAX_WINDOW_PARTITIONS": "400000"}
    shown = run_subprocess("plan", "show", str(path), env=raised)
    assert shown.code == 0 and "window     1026-01-01..2026-01-06  (365,249 partitions)" in shown.out
    again = run_subprocess("plan", "validate", str(path), env=raised)
    assert again.code == 0 and "plan revenue-refund-fix" in again.out, again.err


def test_the_window_limit_counts_the_tables_own_partitions(monkeypatch):
    """323 months span 9,802 days: a monthly table's window is 323 partitions, not 9,802."""
    import dagster as dg

    from backfill_assets.errors import PlanProblem
    from backfill_assets.partitions import scheme_for
    from backfill_assets.plan.fit import fit
    from backfill_assets.plan.loading import collect_problems
    from backfill_assets.table import Column, Metric, TableSpec

    spec = TableSpec(name="monthly", source="events", select_sql="SELECT 1", partition_column="month",
                     source_partition_column="month", business_keys=("month",),
                     contract=(Column("month", "DATE"),), metrics=(Metric("n", "count(*)", "count(*)"),),
                     publish_as="published_monthly")
    scheme = scheme_for(dg.MonthlyPartitionsDefinition(start_date="1999-01-01"), "DATE", name="monthly")
    document = complete_plan(start="1999-01-01", end="2025-11-01", proof=("2000-01-01",), target="monthly",
                             source="events")
    document["gates"]["metrics"] = [{"name": "n"}]
    plan, problems = collect_problems(document)
    assert problems == [] and plan is not None
    fitted = fit(plan, spec, scheme)
    assert fitted.ok, fitted.problems
    assert len(fitted.keys) == 323
    monkeypatch.setenv("BACKFILL_MAX_WINDOW_PARTITIONS", "300")
    refused = fit(plan, spec, scheme).problems
    assert [p.fix for p in refused if isinstance(p, PlanProblem) and p.key == "window"] == [
        "spans 323 partitions of monthly, more than the limit of 300; split it into bounded plans (or raise "
        "BACKFILL_MAX_WINDOW_PARTITIONS)"]


def test_the_window_limit_setting_bounds_a_window_of_real_partitions(tmp_path, run_subprocess):
    # eight daily partitions of daily_revenue, all of them real: the limit alone decides
    path = write_plan(tmp_path / "week.yaml", complete_plan(start="2026-01-01", end="2026-01-08"))
    # (the guard fits only a signed plan: a draft's fit is `plan validate`'s)
    tight = run_subprocess("plan", "validate", str(path), env={"BACKFILL_MAX_WINDOW_PARTITIONS": "7"})
    assert tight.code == 1
    assert "spans 8 partitions of daily_revenue, more than the limit of 7" in tight.err, tight
    enough = run_subprocess("plan", "validate", str(path), env={"BACKFILL_MAX_WINDOW_PARTITIONS": "8"})
    assert enough.code == 0 and "complete and fits daily_revenue" in enough.out, enough


@pytest.mark.parametrize("reader", ["head -1", "true"])
def test_plan_show_into_a_pipe_that_closes_early_ends_quietly(tmp_path, reader):
    # `true` leaves before reading a byte, so every write meets a closed pipe
    path = write_plan(tmp_path / "p.yaml", complete_plan())
    err = tmp_path / "stderr.txt"
    script = (f'"{BIN / "backfill"}" plan show "{path}" 2>"{err}" | {reader}; '
              'echo "backfill exited ${PIPESTATUS[0]}"')
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    expected_head = "plan       revenue-refund-fix  (owner olivia)\n" if reader == "head -1" else ""
    assert proc.stdout == expected_head + "backfill exited 0\n"
    assert err.read_text() == "" and proc.stderr == ""


def test_status_with_a_mistyped_home_says_so_in_one_line_and_creates_nothing(tmp_path, run_subprocess):
    typo, empty = tmp_path / "hmoe", tmp_path / "elsewhere"
    empty.mkdir()
    for where, command in [(typo, ("status",)), (typo, ("status", "fix", "--json")),
                           (typo, ("evidence", "verify")), (empty, ("status",))]:
        result = run_subprocess("--home", str(where), *command)
        assert result.code != 0 and result.out == "", (command, result)
        line = one_short_line(result.err)
        assert str(where) in line and "pass --home" in line, line
    assert not typo.exists() and list(empty.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere"]


# --- generated documents, in process -----------------------------------------------------------------

VALID = plan_text()
TEMPLATE = (ROOT / "backfill_assets" / "templates" / "backfill-plan.yaml").read_text(encoding="utf-8")
PATHS = [("window", "start"), ("window", "end"), ("execution", "proof_partitions"), ("owner",),
         ("execution", "partitions_per_run"), ("approvals", "required"), ("gates", "metrics"),
         ("approvals", "granted"), ("downstream",), ("publish", "freeze"), ("gates", "row_count_parity"),
         ("plan_id",), ("reason",), ("execution",), ("window",), ("publish", "notify"),
         ("gates", "metrics", 0, "tolerance_pct"), ("downstream", 0, "owners"), ("approvals",)]

impossible_dates = st.builds(
    lambda y, m, d: f"{y:04d}-{m:02d}-{d:02d}", st.integers(0, 9999), st.integers(0, 99), st.integers(0, 99))
hours = st.builds(lambda day, h, m: f"{day}-{h:02d}:{m:02d}",
                  st.sampled_from(["2026-01-01", "2026-02-30", "2025-12-31"]), st.integers(0, 99),
                  st.integers(0, 99))
partition_keys = st.one_of(impossible_dates, hours, st.text(max_size=20), st.sampled_from(
    ["2026-01-02", "\u0662\u0660\u0662\u0666-\u0660\u0661-\u0660\u0662", "2026-01-02T00:00", "0000-01-01",
     "9999-12-31", " 2026-01-03 ", "TODO"]))
# digits: ordinary, around CPython's 4300-digit int() limit, and past it
huge_ints = st.one_of(st.integers(1, 40), st.integers(4290, 4310), st.integers(4311, 6000)).map(lambda n: "9" * n)
odd_keys = st.one_of(st.sampled_from(["a.b", "", "~", "5", "TODO", "window.start", "__class__",
                                      "0", "granted", "\u2028", "é", "NOTODOS"]), st.text(max_size=12))
scalars = st.one_of(
    st.integers(-(10**30), 10**30), st.floats(), st.booleans(), st.none(), st.text(max_size=40),
    partition_keys, st.sampled_from(["TODO", "NOTODOS", "x TODO y", "yes", "0x1F", "1_000", ".inf",
                                     "2026-01-01T10:00:00Z", "olivia"]))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(odd_keys, inner, max_size=4), max_leaves=25)


def _parent(document: dict, path: tuple) -> dict | list | None:
    node = document
    for step in path[:-1]:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return None
    return node if isinstance(node, dict | list) else None


@st.composite
def mutated_document(draw) -> str:
    """A valid plan (or the blank template), mutated in its data and then in its text."""
    text = draw(st.sampled_from([VALID, TEMPLATE, plan_text(start="2026-01-31", end="2026-03-01")]))
    document = yaml.safe_load(text)
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["set", "list", "window", "set", "drop", "list", "add", "set", "window",
                                   "set", "list", "share"]))
        path = draw(st.sampled_from(PATHS))
        parent = _parent(document, path)
        if op == "window":  # both ends at once, so the cross-key rules see odd pairs
            document["window"] = {"start": draw(partition_keys), "end": draw(partition_keys)}
        elif parent is None or (isinstance(parent, list) and not isinstance(path[-1], int)):
            continue
        elif isinstance(parent, list) and path[-1] >= len(parent):
            parent.append(draw(values))
        elif op == "set":
            parent[path[-1]] = draw(values)
        elif op == "list":
            parent[path[-1]] = draw(st.lists(st.one_of(scalars, values), max_size=5))
        elif op == "drop" and isinstance(parent, dict):
            parent.pop(path[-1], None)
        elif op == "add" and isinstance(parent, dict):
            parent[draw(odd_keys)] = draw(values)
        elif op == "share":  # the same object twice: safe_dump writes an anchor and an alias
            document["window"] = document["copy_of_it"] = {"start": "2026-01-02", "end": "2026-01-03"}
    try:
        text = yaml.safe_dump(document, sort_keys=draw(st.booleans()), allow_unicode=draw(st.booleans()))
    except (ValueError, RecursionError, yaml.YAMLError):  # e.g. a structure PyYAML cannot dump
        pass
    lines = text.splitlines()
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))):  # most documents still parse
        at = draw(st.integers(0, len(lines)))
        kind = draw(st.sampled_from(["huge", "insert", "date", "duplicate", "nest", "huge", "tab"]))
        if kind == "duplicate" and lines:
            lines.insert(at, lines[min(at, len(lines) - 1)])
        elif kind == "insert":
            lines.insert(at, draw(st.sampled_from([
                '"a.b": TODO', "5: TODO", "<<: {a: 1}", "x: &a [1, 2]", "y: *a", "? [k]\n: v",
                "z: !!python/object/apply:os.system ['true']", "%YAML 1.1", "---", "owner: mallory",
                "w: {start: 2026-02-30, end: 2026-13-01}", "  start: 2026-02-29", "\ttab: 1",
                "k: 'unterminated", "- item", "'\\ud800': x", '"\\ud800": x'])))
        elif kind == "huge":
            lines.insert(at, f"n{at}: {draw(huge_ints)}")
        elif kind == "date" and lines:
            i = min(at, len(lines) - 1)
            lines[i] = re.sub(r"\d{4}-\d{2}-\d{2}", draw(impossible_dates), lines[i])
        elif kind == "nest":
            depth = draw(st.integers(1, 60))
            lines.insert(at, f"deep{at}: " + "[" * depth + "x" + "]" * depth)
        elif kind == "tab" and lines:
            i = min(at, len(lines) - 1)
            lines[i] = lines[i].replace("  ", "\t", 1)
    return "\n".join(lines) + "\n"


def validate_in_process(text: str) -> list[PlanProblem] | BackfillError:
    try:
        _plan, problems = collect_problems(read_yaml_text(text, "plans/generated.yaml"))
    except BackfillError as error:  # the product's own errors are answers too
        return error
    return problems


@settings(deadline=1000, max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_document())
def test_generated_plan_documents_only_raise_our_errors_or_return_problems(text):
    answer = validate_in_process(text)  # anything but a BackfillError propagates and fails the test
    if isinstance(answer, BackfillError):
        assert type(answer).__module__ == "backfill_assets.errors"
        assert len(str(answer).splitlines()) == 1 and len(str(answer)) < 300, str(answer)
    else:
        assert all(isinstance(p, PlanProblem) for p in answer)


LINE_BREAKS = ["\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


@pytest.mark.parametrize("where", ["top", "window", "downstream item"])
def test_a_problem_naming_a_key_with_a_line_break_stays_one_line(where):
    for mark in LINE_BREAKS:
        document = complete_plan()
        node = {"top": document, "window": document["window"], "downstream item": document["downstream"][0]}
        node[where][f"evil{mark}  - approvals are fine"] = 1
        _plan, problems = collect_problems(document)
        assert len(problems) == 1
        assert len(str(problems[0]).splitlines()) == 1, (repr(mark), str(problems[0]))


@pytest.mark.parametrize("value", ["abc", "0", "3601"])
def test_a_bad_reopen_interval_is_one_line_naming_the_setting(run_subprocess, value):
    # a subprocess: the setting is read when the definitions are built, once per process
    result = run_subprocess("run", "some-plan", env={"BACKFILL_REOPEN_INTERVAL_SECONDS": value})
    assert result.code == 2, result
    assert result.err.strip() == (f"backfill: BACKFILL_REOPEN_INTERVAL_SECONDS={value!r} is not a whole number "
                                  "of seconds from 1 to 3600: set it to one, or unset it for 30"), result.err
    assert result.out == ""


def test_the_reopen_interval_setting_reaches_the_sensor(monkeypatch):
    from backfill_assets.demo.definitions import build_definitions
    from backfill_assets.demo.revenue import DAILY_REVENUE

    monkeypatch.setenv("BACKFILL_REOPEN_INTERVAL_SECONDS", "7")
    sensor = build_definitions(DAILY_REVENUE).resolve_sensor_def("daily_revenue__reopen_publish")
    assert sensor.minimum_interval_seconds == 7
    monkeypatch.delenv("BACKFILL_REOPEN_INTERVAL_SECONDS")
    sensor = build_definitions(DAILY_REVENUE).resolve_sensor_def("daily_revenue__reopen_publish")
    assert sensor.minimum_interval_seconds == 30


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bad_lock_wait_is_one_line_naming_the_setting(run_cli, home, monkeypatch, value):
    monkeypatch.setenv("BACKFILL_LOCK_WAIT_SECONDS", value)
    result = run_cli("init")
    assert not home.exists()  # refused before anything was created
    assert result.code == 2, result
    assert result.err.strip() == (f"backfill: BACKFILL_LOCK_WAIT_SECONDS={value!r} is not a number of seconds "
                                  "from 0 to 86400: set it to one, or unset it for 120"), result.err


@pytest.mark.parametrize("value", ["many", "-1", "2000"])
def test_a_bad_duckdb_threads_setting_is_one_line_naming_it(run_cli, home, monkeypatch, value):
    monkeypatch.setenv("BACKFILL_DUCKDB_THREADS", value)
    result = run_cli("init")
    assert not (home / "warehouse.duckdb").exists()  # refused before the warehouse was opened
    assert result.code == 2, result
    assert result.err.strip() == (f"backfill: BACKFILL_DUCKDB_THREADS={value!r} is not a whole number of threads "
                                  "from 0 to 1024: set it to one, or unset it for 0"), result.err


@pytest.mark.parametrize("value", ["3", ""])
def test_the_duckdb_threads_setting_reaches_the_database(tmp_path, monkeypatch, value):
    import duckdb

    from backfill_assets.warehouse import engine_for

    monkeypatch.setenv("BACKFILL_DUCKDB_THREADS", value)
    with engine_for(f"duckdb:///{tmp_path / 'w.duckdb'}").session() as session:
        threads = int(session.scalar("SELECT current_setting('threads')"))
    default = duckdb.connect().execute("SELECT current_setting('threads')").fetchone()[0]
    assert threads == (3 if value else int(default))  # unset: DuckDB's own default


@pytest.mark.parametrize(("value", "said"), [
    ("lots", "is not a whole number of megabytes from 0 to 16777216: set it to one, or unset it for 0"),
    ("32", "is under the 64 megabytes a run's writes need: set it to 64 or more, or unset it for "
           "DuckDB's default")])
def test_a_bad_duckdb_memory_setting_is_one_line_naming_it(run_cli, home, monkeypatch, value, said):
    monkeypatch.setenv("BACKFILL_DUCKDB_MEMORY_MB", value)
    result = run_cli("init")
    assert not (home / "warehouse.duckdb").exists()  # refused before the warehouse was opened
    assert result.code == 2, result
    shown = repr(value) if not value.isdigit() else value
    assert result.err.strip() == f"backfill: BACKFILL_DUCKDB_MEMORY_MB={shown} {said}", result.err


@pytest.mark.parametrize("value", ["64", ""])
def test_the_duckdb_memory_setting_reaches_the_database(tmp_path, monkeypatch, value):
    import duckdb

    from backfill_assets.warehouse import engine_for

    monkeypatch.setenv("BACKFILL_DUCKDB_MEMORY_MB", value)
    with engine_for(f"duckdb:///{tmp_path / 'w.duckdb'}").session() as session:
        limit = session.scalar("SELECT current_setting('memory_limit')")
    default = duckdb.connect().execute("SELECT current_setting('memory_limit')").fetchone()[0]
    assert limit == ("61.0 MiB" if value else default), limit  # 64 MB as DuckDB prints it; unset: its own


@pytest.mark.parametrize("value", ["abc", "0", "\u00b2"])
def test_a_bad_window_limit_is_one_line_naming_the_setting(run_cli, monkeypatch, tmp_path, value):
    path = write_plan(tmp_path / "plans" / "p.yaml", complete_plan(plan_id="p"))
    monkeypatch.setenv("BACKFILL_MAX_WINDOW_PARTITIONS", value)
    result = run_cli("plan", "validate", str(path))
    assert result.code == 2, result
    assert result.err.strip() == (f"backfill: BACKFILL_MAX_WINDOW_PARTITIONS={value!r} is not a whole number of "
                                  "partitions from 1 to 1000000: set it to one, or unset it for 3660"), result.err


def test_a_home_under_an_unknown_user_is_one_line(monkeypatch, capfd):
    monkeypatch.setenv("BACKFILL_HOME", "~nosuchuser/x")
    for command in (("status",), ("guard", "plans/p.yaml")):
        result = _in_process(capfd, *command)
        assert result.code == 2, result
        assert result.err.startswith("backfill: cannot use '~nosuchuser/x' as the backfill home"), result.err
        assert result.err.count("\n") == 1 and "Traceback" not in result.err


@pytest.mark.parametrize("command", [("rollback", "foo", "--dry-run"), ("run", "foo", "--dry-run"),
                                     ("plan", "withdraw", "foo")])
def test_a_mistyped_home_for_a_writing_command_is_one_line_and_creates_nothing(tmp_path, run_cli, command):
    result = run_cli(*command)  # run_cli passes --home tmp_path/home, which does not exist
    assert result.code == 2, result
    assert result.err.strip().startswith(f"backfill: no warehouse at {tmp_path / 'home'}"), result.err
    assert "pass --home" in result.err and result.err.count("\n") == 1
    assert not (tmp_path / "home").exists()


def test_endless_signature_key_and_evidence_files_are_one_line_without_reading_them_whole(world, run_cli, tmp_path):
    path = world.plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    huge = tmp_path / "huge"
    with huge.open("wb") as handle:  # sparse: 100 MB that take no disk
        handle.truncate(100 * 1024 * 1024)
    statement = world.root / "statement.txt"
    statement.write_text("x\n")
    started = time.monotonic()
    for named, problem in [("/dev/zero", "is a character device, not a regular file"),
                           (str(huge), "is larger than ")]:
        for args, what in [(("plan", "approve", str(path), "--by", "alice", "--signature", named, "--statement",
                             str(statement)), "signature file"),
                           (("plan", "approve", str(path), "--by", "alice", "--signature", str(statement),
                             "--statement", named), "statement file"),
                           (("plan", "approve", str(path), "--by", "alice", "--key", named), "private key"),
                           (("evidence", "verify", "--against", named), "evidence file")]:
            result = run_cli(*args)
            assert result.code == 2, (args, result)
            assert result.err.startswith(f"backfill: {what} {named} {problem}"), result.err
            assert result.err.count("\n") == 1
    assert time.monotonic() - started < 30
    assert "signature:" not in path.read_text()  # nothing was approved


@pytest.mark.parametrize("setting, commands, expected", [
    ({"BACKFILL_HOME": "{tmp}/a-file"}, ["init"], "cannot create the warehouse folder {tmp}/a-file (File exists)"),
    ({"BACKFILL_WAREHOUSE_URL": "postgresql://u:p%ZZ@h/db"}, ["init", "status"],
     "cannot connect to postgresql://h:5432/db: "),
    ({"BACKFILL_WAREHOUSE_URL": "postgresql://u:pw@127.0.0.1:1/db"}, ["init", "status"],
     "cannot connect to postgresql://127.0.0.1:1/db"),
])
def test_a_home_that_is_a_file_or_a_bad_server_url_is_one_line_naming_it(tmp_path, monkeypatch, capfd, setting,
                                                                          commands, expected):
    (tmp_path / "a-file").write_text("not a folder")
    for name, value in setting.items():
        monkeypatch.setenv(name, value.format(tmp=tmp_path))
    if "BACKFILL_HOME" not in setting:
        monkeypatch.setenv("BACKFILL_HOME", str(tmp_path / "home"))
    for command in [(c,) for c in commands]:
        result = _in_process(capfd, *command)
        assert result.code != 0 and result.out == "", (command, result)
        assert result.err.startswith("backfill: " + expected.format(tmp=tmp_path)), result.err
        assert result.err.count("\n") == 1 and "internal error" not in result.err


def test_evidence_out_to_a_folder_is_one_line(world, run_cli):
    world.approved_plan("fix", start="2026-01-01", end="2026-01-02", proof=("2026-01-01",))
    result = run_cli("evidence", "fix", "--out", str(world.root))
    assert result.code == 2 and result.err.startswith(f"backfill: cannot write the evidence to {world.root}"), result
    assert result.err.count("\n") == 1


def test_definitions_that_exit_on_import_are_an_error_not_a_silent_success(tmp_path, run_cli):
    defs = tmp_path / "defs.py"
    defs.write_text("raise SystemExit(0)\n")
    result = run_cli("run", "fix", "--defs", str(defs))
    assert result.code == 2, result
    assert result.err.startswith("backfill: loading the definitions failed: SystemExit"), result.err


def _in_process(capfd, *args: str):
    """The CLI's `main` in this process without --home, with what it printed (the environment is
    read per call, so a setting made with monkeypatch applies)."""
    from backfill_assets.cli import main
    from tests.conftest import Result

    capfd.readouterr()
    code = main(list(args))
    printed = capfd.readouterr()
    return Result(code, printed.out, printed.err)


GOOD_ENTRY = "  - python_module: backfill_assets.demo.daily\n"


@pytest.mark.parametrize("entry, said", [
    ("  - grpc_server: {host: localhost, port: 4266}\n",
     "load_from entry 2 (grpc_server) is not a python_module, python_file or python_package"),
    ("  - python_module: {working_directory: .}\n", "load_from entry 2 (python_module) names no module_name"),
    ("  - python_file: {relative_path: 7}\n", "load_from entry 2 (python_file) names no relative_path"),
    ("  - 42\n", "load_from entry 2 (42) is not a python_module, python_file or python_package"),
])
def test_a_workspace_entry_the_cli_cannot_load_is_one_line_never_skipped(tmp_path, monkeypatch, entry, said):
    """A location the CLI skipped would hide its tables: `X is not a replayable table` for a table
    the workspace does declare."""
    from backfill_assets.errors import UsageError
    from backfill_assets.loaded_defs import load_defs

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BACKFILL_DEFS", raising=False)
    (tmp_path / "workspace.yaml").write_text("load_from:\n" + GOOD_ENTRY + entry)
    with pytest.raises(UsageError) as raised:
        load_defs()
    assert said in raised.value.message and "workspace.yaml" in raised.value.message, raised.value.message
    assert "--defs" in (raised.value.fix or "")


def test_a_workspace_python_package_entry_and_its_attribute_load_as_dagster_loads_them(tmp_path, monkeypatch):
    from backfill_assets.loaded_defs import load_defs

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BACKFILL_DEFS", raising=False)
    (tmp_path / "workspace.yaml").write_text(
        "load_from:\n  - python_package: {package_name: backfill_assets.demo.daily, attribute: defs}\n")
    assert sorted(load_defs().tables) == ["daily_revenue"]
    (tmp_path / "workspace.yaml").write_text(
        "load_from:\n  - python_module: {module_name: backfill_assets.demo.daily, attribute: nothing_here}\n")
    from backfill_assets.errors import UsageError

    with pytest.raises(UsageError, match="has no attribute nothing_here"):
        load_defs()
