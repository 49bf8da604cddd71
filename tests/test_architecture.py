"""The package's imports run one way: no module reaches, however indirectly, back to itself, and the
lower layers do not know the upper ones.

The same reading keeps each concern behind one door: only the lifecycle moves a plan's phase or
hold, only the relay delivers notices.

Read from the source with `ast`, so the test needs no import of the package (a circle can hide
behind an import that Python has already cached). Imports inside functions count: a lazy import
only delays a circle to the first call. The circle test leaves out imports under
`if TYPE_CHECKING:`, because they never run; the floors count them, because a type name taken from
a floor above is knowledge of it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = "backfill_assets"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

# warehouse/ is the engine seam: it is handed plain values and knows nothing of the record, the
# gates or the layers that drive them, so a new engine is written against it alone.
WAREHOUSE_MUST_NOT_IMPORT = ("control", "gates", "execution", "defs", "cli", "publish")


def _modules() -> dict[str, Path]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _import_nodes(node: ast.AST, types: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under node, at any depth, but (unless `types`) those that only a type
    checker runs."""
    for child in ast.iter_child_nodes(node):
        if not types and isinstance(child, ast.If) and _is_type_checking(child.test):
            kept: list[ast.stmt] = child.orelse
        else:
            kept = [child]  # type: ignore[list-item]
        for statement in kept:
            if isinstance(statement, ast.Import | ast.ImportFrom):
                yield statement
            yield from _import_nodes(statement, types)


def _imported_from(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a `from ... import` reads from `package` (relative levels resolved)."""
    base = node.module or ""
    if not node.level:
        return base
    anchor = package
    for _ in range(node.level - 1):
        anchor = anchor.rpartition(".")[0]
    return f"{anchor}.{base}" if base else anchor


def _owning_module(name: str) -> str | None:
    """`a.b.c` names module a.b.c, or a name defined in a.b (or higher): the nearest that is a module."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports_of(module: str, types: bool = False) -> set[str]:
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)), types):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = _imported_from(node, package)
            # `from pkg import sub` imports the submodule; `from mod import name` the module itself
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                       for alias in node.names]
        found.update(owner for target in targets if (owner := _owning_module(target)))
    found.discard(module)
    return found


GRAPH = {module: _imports_of(module) for module in MODULES}
# the same with the imports only a type checker runs: a type name taken from a layer is knowledge of it
TYPED_GRAPH = {module: _imports_of(module, types=True) for module in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module, each as one loop through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_loop_in(component, graph) for component in components]


def _loop_in(component: set[str], graph: dict[str, set[str]]) -> list[str]:
    """The shortest way from the component's first module back to itself, to name in the failure,
    then (after `...`) the component's other members, caught in the same knot by other loops."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    loop = paths[node] + [start]
                    rest = sorted(component - set(loop))
                    return loop + (["...", *rest] if rest else [])
                if target not in paths:
                    paths[target] = paths[node] + [target]
                    following.append(target)
        frontier = following
    return sorted(component)  # unreachable for a strongly connected component


def test_the_reader_sees_the_whole_package() -> None:
    # a guard on the test itself: an import graph of nothing has no circles either
    assert len(MODULES) > 50
    assert "backfill_assets.errors" in GRAPH["backfill_assets.warehouse.duckdb_engine"]


def test_no_module_imports_itself_back() -> None:
    cycles = _cycles(GRAPH)
    assert not cycles, "import circles:\n" + "\n".join("  " + " -> ".join(loop) for loop in cycles)


def test_the_cycle_finder_finds_a_lazy_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    source = "def f():\n    from backfill_assets import errors\nif TYPE_CHECKING:\n    import backfill_assets.cli\n"
    nodes = list(_import_nodes(ast.parse(source)))
    assert [type(node).__name__ for node in nodes] == ["ImportFrom"]


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


@pytest.mark.parametrize("module", sorted(m for m in MODULES if _layer(m) == "warehouse"))
def test_the_warehouse_knows_no_upper_layer(module: str) -> None:
    upward = sorted(target for target in GRAPH[module] if _layer(target) in WAREHOUSE_MUST_NOT_IMPORT)
    assert not upward, f"{module} imports {upward}: the engine seam must not know the layers above it"


def test_only_the_cli_imports_the_cli() -> None:
    # and its console script, which sets the collector up before the CLI's imports
    users = sorted(f"{module} -> {target}" for module, targets in GRAPH.items()
                   if _layer(module) not in ("cli", "console") for target in targets if _layer(target) == "cli")
    assert not users, "the CLI is the top floor; these import it:\n  " + "\n  ".join(users)


# --- the floors ----------------------------------------------------------------------------------
# The package's layers, top to bottom. A module imports only from its own floor or a lower one,
# type names too (a type taken from a floor above is knowledge of it), lazy imports too. Every
# top-level module or package of backfill_assets stands on exactly one floor: a new one is placed
# here, deliberately. Modules on one floor are peers (the circle test keeps them from importing
# each other both ways).
FACE = "__init__"  # backfill_assets/__init__.py
LAYERS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("console", "cli"), "the `backfill` command: its console script, arguments in, the floors below called; "
                         "nothing imports it"),
    (("demo",), "the demo pipeline and its story: a team's code, using the library as any team would"),
    ((FACE,), "the package's face: the names a team imports, handed on from defs/ and table"),
    (("defs",), "the Dagster definitions: assets, checks, sensors, the run coordinator host the floors below"),
    (("status",), "one answer about a plan's state, for the CLI and the plans shown on the target asset"),
    (("execution", "approving"), "the acts on a plan: running, judging, advancing, rolling back; approving"),
    (("publish",), "write-audit-publish: the publish rule, what consumers see, the notices to their owners"),
    (("permission", "evidence", "impact", "lifecycle"),
     "what the record allows and tells: a write's permission, the evidence, an impact, a phase move"),
    (("control",), "the control record: plans, ledger, evidence chain, outbox, leases, and what they decide"),
    (("gates",), "the reconciliation gates: names, thresholds, verdicts on the warehouse's figures"),
    (("plan",), "the replay plan: model, loading, identity, the plan file's signatures, fit, phases"),
    (("trust",), "the team's policy and the trust root that counts signatures under it"),
    (("loaded_defs",), "finding a team's Dagster definitions from the CLI (`--defs`) and their tables"),
    (("graph", "warehouse", "dagster_setup"),
     "the doors to the outside: the asset graph Dagster holds, the warehouse engine, the Dagster instance"),
    (("table", "signing", "terminal", "yaml_document"),
     "values and readers the floors above share: a table's declaration, signatures, output, strict YAML"),
    (("identifiers", "bounded", "environment", "settings", "partitions", "home"),
     "checks of what users and the machine give: identifiers, files, the machine, settings, partitions, homes"),
    (("faults", "errors", "dagster_storage", "event_json", "dagster_inprocess", "tags"),
     "the ground, importing nothing of the package: errors, crash points, run tag names, the storage we "
     "extend and its events' JSON, the in-process runs we build once"),
)
FLOOR = {name: index for index, (names, _) in enumerate(LAYERS) for name in names}


def _floor_name(module: str) -> str:
    return _layer(module) or FACE


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of `graph` from a floor to a higher one, named with both floors."""
    found = []
    for module, targets in sorted(graph.items()):
        here = _floor_name(module)
        for target in sorted(targets):
            there = _floor_name(target)
            if here in FLOOR and there in FLOOR and FLOOR[there] < FLOOR[here]:
                found.append(f"{module} (floor {FLOOR[here] + 1}, {here}) imports {target} "
                             f"(floor {FLOOR[there] + 1}, {there}: above it)")
    return found


def test_the_floors_are_declared_once() -> None:
    names = [name for names, _ in LAYERS for name in names]
    assert len(names) == len(set(names)), "a name stands on two floors"


def test_every_module_stands_on_a_declared_floor() -> None:
    unplaced = sorted(m for m in MODULES if _floor_name(m) not in FLOOR)
    assert not unplaced, ("place these on a floor of LAYERS (a new top-level module or package is placed "
                          "deliberately):\n  " + "\n  ".join(unplaced))
    gone = sorted(name for name in FLOOR if not any(_floor_name(m) == name for m in MODULES))
    assert not gone, f"LAYERS names {gone}, which no module of the package is"


def test_every_import_runs_down_the_floors() -> None:
    upward = upward_imports(TYPED_GRAPH)
    assert not upward, ("imports that run back up the layers (move the code to the floor it belongs to; a lazy "
                        "or type-only import still counts):\n  " + "\n  ".join(upward))


def test_the_floor_finder_sees_an_import_up() -> None:
    graph = {"backfill_assets.table": {"backfill_assets.warehouse.ddl"},
             "backfill_assets.warehouse.ddl": {"backfill_assets.table", "backfill_assets.errors"},
             "backfill_assets.defs.sensor": {"backfill_assets.publish.notify", "backfill_assets"}}
    assert upward_imports(graph) == [
        "backfill_assets.defs.sensor (floor 4, defs) imports backfill_assets (floor 3, __init__: above it)",
        f"backfill_assets.table (floor {FLOOR['table'] + 1}, table) imports backfill_assets.warehouse.ddl "
        f"(floor {FLOOR['warehouse'] + 1}, warehouse: above it)"]
    # a type name counts here, though the circle test leaves it out
    source = "if TYPE_CHECKING:\n    from backfill_assets.defs.replayable import ReplayableTable\n"
    assert [n.module for n in _import_nodes(ast.parse(source), types=True)] == ["backfill_assets.defs.replayable"]
    assert list(_import_nodes(ast.parse(source))) == []


# --- all SQL behind the seam ---------------------------------------------------------------------
# Outside warehouse/ no module writes SQL: the control record's statements are the state store's
# (warehouse/state_store/), the data's are the warehouse's, so a new engine is written against
# warehouse/ alone. A string reads as SQL when it starts like a statement or holds the joints of
# one (FROM ... WHERE, a join's ON, GROUP BY, a bound `= ?`); prose in messages does neither.
_SQL_START = re.compile(r"""^\s*(?:
    SELECT\s+\S | (?i:select)\s.*?\s(?i:from)\s
    | (?i:INSERT\s+INTO\s+[\w."]+\s*(?:\(|VALUES|SELECT)) | (?i:UPDATE)\s+[\w."]+\s+(?i:SET)\b
    | (?i:DELETE\s+FROM\s+[\w."]+\s*(?:$|WHERE\b|;))
    | (?i:(?:CREATE|DROP|ALTER)\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+|UNIQUE\s+)?
          (?:TABLE|SCHEMA|SEQUENCE|INDEX|VIEW))\b
    | (?i:WITH\s+(?:RECURSIVE\s+)?\w+\s+AS\s*\() | (?i:MERGE\s+INTO)\b | TRUNCATE\b)""", re.X | re.S)
_SQL_INSIDE = re.compile(r"""\sFROM\s.*\sWHERE\s | \bINSERT\s+INTO\s | \bDELETE\s+FROM\s
    | \bUPDATE\s+[\w."]+\s+SET\s | \bGROUP\s+BY\b | \bORDER\s+BY\b | \bJOIN\s.*\sON\s | \bON\s+CONFLICT\b
    | \bnextval\( | [\w.)]\s*(?:=|<>|<=|>=|<|>)\s*\? | \bANY\(\?\) | \bIN\s*\(\?""", re.X | re.S)

# user SQL handed to the library, not the library's own: the demo's tables declare their
# `select_sql`, and its story seeds and inspects its own source tables, as any team's code would
SQL_ALLOWED = ("backfill_assets.demo",)

# modules whose SQL has not moved behind the seam yet: this list only shrinks
SQL_NOT_YET_MOVED: tuple[str, ...] = ()


def reads_as_sql(text: str) -> bool:
    return bool(_SQL_START.search(text) or _SQL_INSIDE.search(text))


def _string_texts(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, text) of every string constant but docstrings; an f-string as one text, each of its
    formatted values standing in as `x` (so `UPDATE {table} SET` reads as the statement it is)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        if isinstance(node, ast.JoinedStr):
            skip.update(id(part) for part in node.values)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value
        elif isinstance(node, ast.JoinedStr):
            yield node.lineno, "".join(part.value if isinstance(part, ast.Constant) else "x"
                                       for part in node.values)


def _sql_outside_the_seam() -> list[str]:
    found = []
    for module, path in MODULES.items():
        if _layer(module) == "warehouse" or module.startswith(SQL_ALLOWED + SQL_NOT_YET_MOVED):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found += [f"{module}:{line}: {text.strip()[:70]!r}" for line, text in sorted(_string_texts(tree))
                  if reads_as_sql(text)]
    return found


def test_no_sql_outside_the_warehouse() -> None:
    found = _sql_outside_the_seam()
    assert not found, ("SQL outside backfill_assets/warehouse/ (move it behind the seam: the state store "
                       "for the control record, a warehouse module for the data):\n  " + "\n  ".join(found))


@pytest.mark.parametrize("text", [
    "SELECT value FROM backfill_control.meta WHERE key = ?", "  insert into t values (?)",
    "UPDATE x.plans SET phase = ?", "DELETE FROM x.leases", "DELETE FROM orders WHERE a = 1",
    "CREATE TABLE IF NOT EXISTS x (a INT)",
    "WITH w AS (SELECT 1) SELECT * FROM w", "AND plan_id = ?", " AND partition_key = ANY(?)",
    "LEFT JOIN x AS r ON r.notice_id = o.notice_id", "DROP INDEX IF EXISTS x.i", "x >= ? AND x < ?",
])
def test_the_sql_finder_finds_statements_and_their_pieces(text: str) -> None:
    assert reads_as_sql(text)


@pytest.mark.parametrize("text", [
    "the plan is not in the control record", "select a plan first with `backfill plan approve`",
    "Update the policy, then pin it again", "delete from the home folder by hand",
    "with the quorum's signatures", "plan {plan_id} has no approved version yet",
    "rows of backfill_control.writes recorded with evidence row 3 differ from what that row sealed",
    "drop the table with `backfill close`", "create a fresh BACKFILL_HOME",
])
def test_the_sql_finder_leaves_prose_alone(text: str) -> None:
    assert not reads_as_sql(text)


# --- the README's list of what a new engine implements ---------------------------------------------
README = ROOT.parent / "README.md"
_SEAM_SECTION = ("**A warehouse engine seam.**", "**PostgreSQL** is chosen by")


def _methods(path: Path, classes: set[str] | None = None, abstract_only: bool = False) -> set[str]:
    """Public and transaction methods of the classes in `path` (those named, or every one)."""
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(node, ast.ClassDef) or (classes is not None and node.name not in classes):
            continue
        for item in node.body:
            if isinstance(item, ast.FunctionDef) and item.name not in ("__init__",) and (
                    not item.name.startswith("_") or item.name in ("_begin", "_commit", "_rollback")):
                if not abstract_only or any(isinstance(d, ast.Name) and d.id == "abstractmethod"
                                            for d in item.decorator_list):
                    found.add(item.name)
            elif isinstance(item, ast.Assign | ast.AnnAssign) and not abstract_only:
                target = item.targets[0] if isinstance(item, ast.Assign) else item.target
                if isinstance(target, ast.Name) and target.id != "name":
                    found.add(target.id)
    return found


def test_the_readme_lists_what_a_new_engine_implements() -> None:
    text = README.read_text(encoding="utf-8")
    start, end = (text.index(mark) for mark in _SEAM_SECTION)
    section = text[start:end]
    warehouse = ROOT / "warehouse"
    # every abstract method, and every one the two engines override, is in the tables
    wanted = _methods(warehouse / "engine.py", {"Engine", "Session"}, abstract_only=True)
    wanted |= _methods(warehouse / "duckdb_engine.py", {"DuckDBEngine", "DuckDBSession"})
    wanted |= _methods(warehouse / "postgres_engine.py", {"PostgresEngine", "PostgresSession"})
    wanted |= _methods(warehouse / "postgres_spelling.py", {"PostgresSpelling"})
    missing = sorted(m for m in wanted if f"`{m}`" not in section and f"`{m}(" not in section
                     and f", {m}`" not in section and f"`{m}," not in section)
    assert not missing, f"README's engine tables do not list {missing}"
    stores = sorted(p.stem for p in (warehouse / "state_store").glob("*.py") if p.stem != "__init__")
    unlisted = [s for s in stores if f"`{s}`" not in section]
    assert not unlisted, f"README's state store list lacks {unlisted}"


def test_every_test_module_the_readme_names_exists() -> None:
    """The README's claims name the module that shows each; a module renamed left a claim naming a
    file no one could open (`tests/test_attack_cutover.py`)."""
    named = set(re.findall(r"tests/(test_\w+\.py)", README.read_text(encoding="utf-8")))
    missing = sorted(n for n in named if not (README.parent / "tests" / n).is_file())
    assert not missing, f"README names test modules that do not exist: {missing}"


# the low-level writers of a plan's phase and hold: only the lifecycle decides when they are called
LIFECYCLE = f"{PACKAGE}.lifecycle"
PHASE_WRITERS = frozenset({f"{PACKAGE}.control.record.transition", f"{PACKAGE}.control.record.set_hold"})


def _bindings(module: str, tree: ast.AST) -> dict[str, str]:
    """Each name an import binds in the module (at any depth), to the dotted name it stands for."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    bound: dict[str, str] = {}
    for node in _import_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                # `import a.b` binds `a`; `import a.b as c` binds c to a.b
                name = alias.name if alias.asname else alias.name.partition(".")[0]
                bound[alias.asname or name] = name
            continue
        base = _imported_from(node, package)
        for alias in node.names:
            bound[alias.asname or alias.name] = f"{base}.{alias.name}"
    return bound


def _dotted(node: ast.expr, bound: dict[str, str], module: str, defined: set[str]) -> str | None:
    """The dotted name a call's callee stands for (`record.transition` -> its full name), if any."""
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value, bound, module, defined)
        return f"{base}.{node.attr}" if base else None
    if isinstance(node, ast.Name):
        if node.id in bound:
            return bound[node.id]
        return f"{module}.{node.id}" if node.id in defined else None
    return None


def calls_to(module: str, source: str, callees: frozenset[str]) -> list[str]:
    """`module:line name` of every call in `source` to one of `callees` (dotted names)."""
    tree = ast.parse(source)
    bound = _bindings(module, tree)
    defined = {n.name for n in ast.iter_child_nodes(tree) if isinstance(n, ast.FunctionDef)}
    calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    return [f"{module}:{node.lineno} {name.rpartition('.')[2]}" for node in sorted(calls, key=lambda c: c.lineno)
            if (name := _dotted(node.func, bound, module, defined)) in callees]


def phase_writes(module: str, source: str) -> list[str]:
    """Every call in `source` to a phase or hold writer of the record."""
    return calls_to(module, source, PHASE_WRITERS)


def test_only_the_lifecycle_moves_a_plan() -> None:
    assert LIFECYCLE in MODULES, "the lifecycle module decides every phase move and hold"
    calls = [call for module, path in MODULES.items() if module != LIFECYCLE
             for call in phase_writes(module, path.read_text(encoding="utf-8"))]
    assert not calls, ("a plan's phase and hold move only through backfill_assets.lifecycle (one function "
                       "per event); these call the record's writers themselves:\n  " + "\n  ".join(calls))


def test_the_phase_write_finder_sees_every_spelling() -> None:
    source = ("from backfill_assets.control import record\n"
              "from backfill_assets.control import record as r\n"
              "import backfill_assets.control.record\n"
              "def f(s):\n"
              "    from backfill_assets.control.record import set_hold as hold\n"
              "    record.transition(s, 'p', 'x', 'a')\n"
              "    r.set_hold(s, 'p', None, 'a')\n"
              "    backfill_assets.control.record.transition(s, 'p', 'x', 'a')\n"
              "    hold(s, 'p', None, 'a')\n"
              "    record.require(s, 'p')\n")
    assert [c.partition(" ")[2] for c in phase_writes("backfill_assets.execution.advance", source)] == \
        ["transition", "set_hold", "transition", "set_hold"]
    # inside the record itself, a bare call of its own writer counts too
    assert phase_writes("backfill_assets.control.record", "def transition(): ...\ndef adopt():\n    transition()\n") \
        == ["backfill_assets.control.record:3 transition"]


def test_only_the_relay_delivers_notices() -> None:
    # the reopen sensor requests and reports: delivery is the relay's, whoever hosts it (CLI, relay sensor)
    relay = f"{PACKAGE}.publish.notify"
    calls = [call for module, path in MODULES.items() if module != relay
             for call in calls_to(module, path.read_text(encoding="utf-8"),
                                  frozenset({f"{PACKAGE}.control.outbox.relay"}))]
    assert not calls, ("notices are delivered only through publish.notify.deliver_pending (the relay); "
                       "these call the outbox's delivery themselves:\n  " + "\n  ".join(calls))


def test_the_relay_has_two_hosts() -> None:
    # the CLI after its command, and the relay sensor on its ticks; the reopen sensor requests runs
    # and reports, and delivers nothing
    deliver = frozenset({f"{PACKAGE}.publish.notify.deliver_pending"})
    hosts = sorted({call.partition(":")[0] for module, path in MODULES.items()
                    for call in calls_to(module, path.read_text(encoding="utf-8"), deliver)})
    assert hosts == [f"{PACKAGE}.cli", f"{PACKAGE}.defs.relay"], f"the relay is hosted by {hosts}"
