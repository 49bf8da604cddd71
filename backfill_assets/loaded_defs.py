"""Finding a team's definitions from the CLI, the way Dagster finds them.

`--defs` (or $BACKFILL_DEFS) takes a Python file (`defs.py`, like `dagster -f`) or a module
(`package.module`, like `dagster -m`), optionally `:attribute`. Without it, the code locations of
`workspace.yaml` in the current directory are loaded, else the `dg` project's root module named
in `pyproject.toml`. The replayable tables are read from the specs their targets carry, so the
CLI uses exactly the spec the loaded runs use.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from types import ModuleType
from typing import Any

import dagster as dg
import yaml

from backfill_assets.bounded import read_bounded, refuse_non_regular
from backfill_assets.errors import BackfillError, UsageError
from backfill_assets.graph import TableGraph, find_tables
from backfill_assets.partitions import PartitionScheme, scheme_for
from backfill_assets.table import TableSpec

DEFS_ENV = "BACKFILL_DEFS"
FIX = ("pass --defs path/to/definitions.py or --defs package.module (importable: run from the project "
       "folder or add it to PYTHONPATH), or set BACKFILL_DEFS")


@dataclass(frozen=True)
class LoadedTable:
    spec: TableSpec
    partitions_def: dg.PartitionsDefinition
    graph: TableGraph | None = None  # the loaded definitions' replayable tables, for plans over a graph

    def scheme(self) -> PartitionScheme:
        return scheme_for(self.partitions_def, self.spec.column(self.spec.partition_column).type,
                          name=self.spec.name)

    def code_identity(self, assets: Sequence[str]) -> str:
        """What a plan writing `assets` (this table first) binds of their code."""
        if self.graph is None or list(assets) == [self.spec.name]:
            return self.spec.code_identity
        return self.graph.code_identity(assets)


@dataclass(frozen=True)
class LoadedDefs:
    definitions: dg.Definitions
    source: str
    tables: dict[str, LoadedTable]

    @cached_property
    def graph(self) -> TableGraph:
        return TableGraph(self.definitions.resolve_asset_graph(),
                          {n: (t.spec, t.partitions_def) for n, t in self.tables.items()})

    def table(self, name: str) -> LoadedTable:
        if name not in self.tables:
            known = ", ".join(sorted(self.tables)) or "none"
            raise UsageError(f"{name} is not a replayable table in the definitions loaded from {self.source} "
                             f"(they hold: {known})", fix=f"point --defs at the definitions that declare {name}, "
                                                          "or fix the plan's target")
        return replace(self.tables[name], graph=self.graph)


def _import_file(path: Path) -> ModuleType:
    if not path.exists():
        raise UsageError(f"definitions file {path} does not exist", fix=FIX)
    refuse_non_regular(path, "definitions file", FIX)  # Python's loader would wait on a FIFO
    folder = str(path.resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # like `dagster -f`: the file's folder is its working directory
    name = f"backfill_user_defs_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot load {path} as Python", fix=FIX)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _import_module(name: str, working_directory: str | None = None) -> ModuleType:
    folder = str(Path(working_directory or ".").resolve())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise UsageError(f"cannot import definitions module {name} ({exc})", fix=FIX) from None


def _definitions_in(module: ModuleType, attr: str | None, source: str) -> dg.Definitions:
    candidates: list[Any]
    if attr:
        if not hasattr(module, attr):
            raise UsageError(f"{source} has no attribute {attr}", fix=FIX)
        candidates = [getattr(module, attr)]
    else:
        named = {k: v for k, v in vars(module).items() if isinstance(v, dg.Definitions)}
        if len(named) > 1:
            # as Dagster refuses them: taking the first had the CLI decide over a graph that Dagster
            # does not run (a rollup merged into the second was left out of plans: found by an attack)
            raise UsageError(f"{source} holds {len(named)} dagster Definitions ({', '.join(named)}), so which "
                             "one Dagster runs is not clear", fix=f"name it: --defs {source}:{next(reversed(named))}")
        found = list(named.values())
        lazy = [v for k, v in vars(module).items() if callable(v) and type(v).__name__ == "LazyDefinitions"]
        candidates = found or lazy
    value: Any
    for value in candidates:
        if type(value).__name__ == "LazyDefinitions":
            value = value()
        if isinstance(value, dg.Definitions):
            return value
    raise UsageError(f"{source} holds no dagster Definitions", fix=FIX)


# what Dagster's workspace.yaml names a location's code by, for the kinds the CLI can import
_WORKSPACE_NAME = {"python_module": "module_name", "python_file": "relative_path", "python_package": "package_name"}


def _workspace_targets(folder: Path) -> list[tuple[str, str, str | None, str]]:
    """(kind, name, attribute, working_directory) of each code location in workspace.yaml, or [] if
    none; a location the CLI cannot import is one line, never skipped (its tables would go missing)."""
    path = folder / "workspace.yaml"
    if not path.exists():
        return []
    try:
        text = read_bounded(path, 1024 * 1024, "workspace file", FIX).decode("utf-8", errors="replace")
        document = yaml.safe_load(text) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise UsageError(f"cannot read {path} ({exc})", fix=FIX) from None
    entries = document.get("load_from") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise UsageError(f"{path} has no load_from list of code locations", fix=FIX)
    out: list[tuple[str, str, str | None, str]] = []
    for index, entry in enumerate(entries, 1):
        kind = next((k for k in _WORKSPACE_NAME if isinstance(entry, dict) and k in entry), None)
        if kind is None:
            shown = ", ".join(map(str, entry)) if isinstance(entry, dict) else str(entry)
            raise UsageError(f"{path}: load_from entry {index} ({shown[:60]}) is not a python_module, python_file "
                             "or python_package, the locations the CLI can import", fix=FIX)
        value, key = entry[kind], _WORKSPACE_NAME[kind]
        settings = value if isinstance(value, dict) else {key: value}
        name, attribute, work = settings.get(key), settings.get("attribute"), settings.get("working_directory")
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"{path}: load_from entry {index} ({kind}) names no {key}",
                             fix=f"give it a {key}, or {FIX}")
        if attribute is not None and not isinstance(attribute, str):
            raise UsageError(f"{path}: load_from entry {index} ({kind}) has an attribute that is not a name",
                             fix="make attribute the name of the Definitions in that module")
        if work is not None and not isinstance(work, str):
            raise UsageError(f"{path}: load_from entry {index} ({kind}) has a working_directory that is not a path",
                             fix="make working_directory a folder relative to workspace.yaml")
        out.append(("python_file" if kind == "python_file" else "python_module", name, attribute,
                    str((folder / work).resolve()) if work else str(folder)))
    return out


def _dg_project(folder: Path) -> str | None:
    path = folder / "pyproject.toml"
    if not path.exists():
        return None
    import tomllib

    try:
        # bounded and never blocking, as workspace.yaml is read: a checkout's pyproject.toml that is a
        # named pipe, or a link to /dev/zero, hung the command (found by an attack)
        project = tomllib.loads(read_bounded(path, 1024 * 1024, "pyproject file", FIX).decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    root = project.get("tool", {}).get("dg", {}).get("project", {}).get("root_module")
    return f"{root}.definitions" if root else None


def load_defs(reference: str | None = None) -> LoadedDefs:
    try:
        return _load(reference or os.environ.get(DEFS_ENV))
    except BackfillError:
        raise  # already one line naming the problem and the fix (e.g. an unsupported partitioning)
    except (Exception, SystemExit) as exc:  # the team's own code failed (or exited) on import: one line
        import traceback

        first = str(exc).splitlines()[0] if str(exc) else ""
        error = UsageError(f"loading the definitions failed: {type(exc).__name__}: {first}",
                           fix="fix the error in the definitions (the traceback is in the log; `--verbose` shows it)")
        error.details = traceback.format_exc()
        raise error from None


def _load(reference: str | None) -> LoadedDefs:
    definitions: list[tuple[dg.Definitions, str]] = []
    if reference:
        target, _, attr = reference.partition(":")
        if target.endswith(".py") or os.sep in target or Path(target).exists():
            module = _import_file(Path(target))
        else:
            module = _import_module(target)
        definitions.append((_definitions_in(module, attr or None, reference), reference))
    else:
        here = Path.cwd()
        targets = _workspace_targets(here)
        project = _dg_project(here) if not targets else None
        if project:
            targets = [("python_module", project, None, str(here))]
        if not targets:
            raise UsageError("no definitions to load: no --defs, no BACKFILL_DEFS, and no workspace.yaml "
                             f"or dg project in {here}", fix=FIX)
        for kind, name, attribute, work in targets:
            module = _import_file(Path(work) / name) if kind == "python_file" else _import_module(name, work)
            definitions.append((_definitions_in(module, attribute, name), name))
    tables: dict[str, LoadedTable] = {}
    for defs, _source in definitions:
        for name, (spec, partitions_def) in find_tables(defs).items():
            tables[name] = LoadedTable(spec, partitions_def)
    source = " + ".join(s for _, s in definitions)
    first = definitions[0][0] if len(definitions) == 1 else dg.Definitions.merge(*(d for d, _ in definitions))
    return LoadedDefs(first, source, tables)
