"""The Dagster instance the CLI, `make ui` and the daemon share: DAGSTER_HOME with our dagster.yaml.

The file is written once (by `backfill init`, or by the first command that finds none) and never
rewritten: it belongs to the team from then on (a run launcher, other limits). It is emitted by a
YAML library, so any path is quoted safely, and it never holds a secret: the warehouse URL and a
Postgres instance's password are Dagster environment references (`{env: NAME}`), read by Dagster
when the instance loads. A file that lacks our run coordinator is kept, and said so in one line.
"""

from __future__ import annotations

import copy
import os
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import dagster as dg
import yaml

from backfill_assets import terminal
from backfill_assets.bounded import NotRegularFile, read_regular
from backfill_assets.errors import UsageError
from backfill_assets.home import WAREHOUSE_FILE, WAREHOUSE_URL_ENV, Home
from backfill_assets.tags import CAP_TAG, MAX_CAP

DAILY_RUN_LIMIT = 4
INSTANCE_URL_ENV = "BACKFILL_DAGSTER_PG_URL"
INSTANCE_PASSWORD_ENV = "BACKFILL_DAGSTER_PG_PASSWORD"
COORDINATOR = "PlanGateRunCoordinator"
HEADER = """# Written once by backfill-assets (`backfill init`); yours to edit, never rewritten. Backfill runs
# of each plan are capped at the plan's runs_at_once (the coordinator tags them
# backfill_assets/plan-cap-N=<plan>); daily (scheduled) runs keep their own limit. Secrets are
# environment references ({env: NAME}), read when the instance loads. A relative base_dir is a folder
# of DAGSTER_HOME (this file's folder); a relative backfill_home too.
"""
_said: set[str] = set()
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _postgres_storage(url: str) -> dict[str, Any]:
    """`postgres_db` fields of a postgresql:// URL, the password as an environment reference.
    SQLAlchemy 2.1 with psycopg 3 fails dagster-postgres's NOTIFY; psycopg2 works (see
    docs/postgres-instance-notes.md), hence the scheme."""
    parts = urlsplit(url)
    if parts.scheme not in ("postgresql", "postgres") or not parts.path.strip("/"):
        raise UsageError(f"--instance-url {parts.scheme}://{parts.hostname or ''}{parts.path} is not a "
                         "postgresql://USER@HOST:PORT/DB URL", fix="pass --instance-url postgresql://USER@HOST:PORT/DB")
    db: dict[str, Any] = {"username": unquote(parts.username or ""), "hostname": parts.hostname or "localhost",
                "port": parts.port or 5432, "db_name": unquote(parts.path.lstrip("/")),
                "scheme": "postgresql+psycopg2"}
    if parts.password:
        db["password"] = {"env": INSTANCE_PASSWORD_ENV}
    if parts.query:
        db["params"] = dict(parse_qsl(parts.query))
    # the three storages Dagster's `storage: postgres:` makes, the run and event log ones ours:
    # they keep a connection a process instead of connecting for every statement
    # (backfill_assets/dagster_storage.py); the database given to each as a copy (one dict written
    # three times is a YAML anchor, and editing the first block of the team's file changed all three)
    ours = "backfill_assets.dagster_storage"
    return {"run_storage": {"module": ours, "class": "PooledPostgresRunStorage",
                            "config": {"postgres_db": copy.deepcopy(db)}},
            "event_log_storage": {"module": ours, "class": "PooledPostgresEventLogStorage",
                                  "config": {"postgres_db": copy.deepcopy(db)}},
            "schedule_storage": {"module": "dagster_postgres.schedule_storage", "class": "PostgresScheduleStorage",
                                 "config": {"postgres_db": copy.deepcopy(db)}}}


def _on_postgres(document: dict[str, Any]) -> bool:
    """The instance's storage is PostgreSQL: Dagster's `storage: postgres:` or, as `backfill init
    --instance postgres` writes it, a run storage whose config names a Postgres database."""
    if "postgres" in (document.get("storage") or {}):
        return True
    found = document.get("run_storage")
    settings = found.get("config") if isinstance(found, dict) else None
    return isinstance(settings, dict) and ("postgres_db" in settings or "postgres_url" in settings)


def dagster_config(home: Home, postgres_url: str | None = None) -> dict[str, Any]:
    # paths relative to DAGSTER_HOME, the file's own folder, where they can be: a home copied or
    # moved keeps its runs and its gate (absolute ones had a copy store its runs in the original's
    # storage, and its coordinator read the original's warehouse)
    inside = home.dagster_home.parent == home.root
    coordinator: dict[str, Any] = {"backfill_home": ".." if inside else str(home.root)}
    if os.environ.get(WAREHOUSE_URL_ENV):  # the coordinator reads the same warehouse as the CLI
        coordinator["warehouse_url"] = {"env": WAREHOUSE_URL_ENV}
    coordinator.update({
        "max_concurrent_runs": 8, "dequeue_interval_seconds": 1, "dequeue_use_threads": True,
        "dequeue_num_workers": 4,
        "tag_concurrency_limits": [
            *({"key": CAP_TAG.format(n), "value": {"applyLimitPerUniqueValue": True}, "limit": n}
              for n in range(1, MAX_CAP + 1)),
            {"key": "dagster/schedule_name", "limit": DAILY_RUN_LIMIT}]})
    config: dict[str, Any] = {
        "run_coordinator": {"module": "backfill_assets.defs.coordinator", "class": COORDINATOR,
                            "config": coordinator},
        # a run whose worker died (kill -9, OOM) is marked failed instead of staying STARTED
        "run_monitoring": {"enabled": True, "poll_interval_seconds": 10},
    }
    if postgres_url:
        config.update(_postgres_storage(postgres_url))
    else:
        # one sqlite file for every run's events instead of a file per run plus an index copy, with
        # pooled connections in WAL mode (backfill_assets/dagster_storage.py says why)
        config["event_log_storage"] = {"module": "backfill_assets.dagster_storage",
                                       "class": "PooledSqliteEventLogStorage",
                                       "config": {"base_dir": "event_log"}}
        config["run_storage"] = {"module": "backfill_assets.dagster_storage", "class": "PooledSqliteRunStorage",
                                 "config": {"base_dir": "history"}}
    # steps' stdout and stderr to their files (the UI shows them), not mirrored to the terminal by
    # two extra processes a stream a run (backfill_assets/dagster_storage.py says why)
    config["compute_logs"] = {"module": "backfill_assets.dagster_storage", "class": "FileComputeLogManager",
                              "config": {"base_dir": "storage"}}
    config["telemetry"] = {"enabled": False}
    return config


def dagster_yaml(home: Home, postgres_url: str | None = None) -> str:
    # libyaml's emitter when PyYAML has it: the same text, ~4x faster (written for every new home)
    return HEADER + yaml.dump(dagster_config(home, postgres_url), Dumper=_SAFE_DUMPER, sort_keys=False, width=100)


def _read_existing(config: Path) -> dict[str, Any]:
    try:
        data = read_regular(config, 1024 * 1024)
        # libyaml's loader when PyYAML has it: the same documents, ~6x faster (read on every open)
        document = yaml.load(data.decode("utf-8"), Loader=_SAFE_LOADER) if len(data) <= 1024 * 1024 else None
    except NotRegularFile as exc:
        raise UsageError(f"{config} is {exc.kind}, not a regular file",
                         fix="make it a regular dagster.yaml, or remove it and run `backfill init`") from None
    except OSError as exc:
        raise UsageError(f"cannot read {config} ({exc.strerror})", fix="check its permissions") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise UsageError(f"{config} is not valid YAML ({str(exc).splitlines()[0]})",
                         fix="fix it, or remove it and run `backfill init` to write ours") from None
    return document if isinstance(document, dict) else {}


_OUR_STORAGES = ("event_log_storage", "run_storage", "compute_logs")


def _another_homes(folder: Path) -> bool:
    """`folder` is the Dagster home of another backfill home: its dagster.yaml, or its home's
    warehouse or keys beside it."""
    return (folder / "dagster.yaml").exists() or (folder.parent / WAREHOUSE_FILE).exists() or \
        (folder.parent / "keys").is_dir()


def _elsewhere(document: dict[str, Any], config: Path, home: Home) -> tuple[str, str] | None:
    """What an existing dagster.yaml puts in another home (a home copied or moved, or a DAGSTER_HOME
    left exported for another home), if anything, and how to fix it."""
    folder = config.parent.resolve()
    copied = ("give its base_dirs as event_log, history and storage and its backfill_home as .. (relative: "
              "of its own folder), or remove it and run `backfill init`")
    found = document.get("run_coordinator")
    settings = found.get("config") if isinstance(found, dict) else None
    named = settings.get("backfill_home") if isinstance(settings, dict) else None
    if isinstance(found, dict) and found.get("class") == COORDINATOR and isinstance(named, str) and named \
            and (folder / named).resolve() != home.root.resolve():
        if folder != (home.root / "dagster").resolve():  # DAGSTER_HOME names another home's instance
            return (f"is the Dagster instance of the home {(folder / named).resolve()}, not of {home.root} "
                    "(its run coordinator gates that home's runs)",
                    f"for this home unset DAGSTER_HOME or export DAGSTER_HOME={home.root / 'dagster'}")
        return f"has its run coordinator gate runs with the home {named}, not this one (was this home copied " \
               "or moved?)", copied
    for part in _OUR_STORAGES:
        found = document.get(part)
        settings = found.get("config") if isinstance(found, dict) else None
        base = settings.get("base_dir") if isinstance(settings, dict) else None
        if not (isinstance(found, dict) and found.get("module") == "backfill_assets.dagster_storage"
                and isinstance(base, str) and base):
            continue
        parent = (folder / base).resolve().parent  # an absolute base stays itself
        if parent != folder and _another_homes(parent):
            return (f"keeps Dagster's {part.replace('_', ' ')} in {base}, another home's folder (was this home "
                    "copied or moved?)", copied)
    return None


def check_existing(config: Path, postgres_url: str | None = None, home: Home | None = None) -> str | None:
    """One line when an existing dagster.yaml lacks what we need (it is kept as it is); refused
    when it names another home's storage or warehouse."""
    document = _read_existing(config)
    elsewhere = _elsewhere(document, config, home) if home is not None else None
    if elsewhere:
        raise UsageError(f"{config} {elsewhere[0]}", fix=elsewhere[1])
    found = document.get("run_coordinator")
    coordinator = found if isinstance(found, dict) else {}
    if coordinator.get("class") != COORDINATOR:
        return (f"{config} has no {COORDINATOR} run coordinator: UI backfills are not refused before "
                "they start nor capped per plan (each run still checks the write permission); it is "
                "kept as it is: add our run_coordinator (see `backfill init` on an empty DAGSTER_HOME)")
    if postgres_url and not _on_postgres(document):
        return (f"{config} exists and was kept: its storage is not Postgres; to move it, remove the file and run "
                "`backfill init --instance postgres` (or set storage: postgres: postgres_db in it: Dagster's own "
                "storages, which connect for every statement)")
    return None


def ensure_dagster_home(home: Home, postgres_url: str | None = None) -> tuple[Path, str | None]:
    """Create DAGSTER_HOME and write our dagster.yaml if there is none; an existing one is never
    rewritten. Returns the folder and, when the existing file lacks what we need, one line saying so."""
    path = home.dagster_home
    config = path / "dagster.yaml"
    try:
        path.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(config):
            return path, check_existing(config, postgres_url, home)
        # exclusive create: two first commands at once never interleave their writes
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return path, check_existing(config, postgres_url, home)
    except OSError as exc:
        raise UsageError(f"cannot write {config} ({exc.strerror})",
                         fix="give a DAGSTER_HOME (or --home) in a folder you can write") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(dagster_yaml(home, postgres_url))
    except OSError as exc:
        config.unlink(missing_ok=True)  # never leave half a file to be kept for good
        raise UsageError(f"cannot write {config} ({exc.strerror})",
                         fix="free space in (or give another) DAGSTER_HOME") from None
    return path, None


def _password_from_url() -> None:
    """A Postgres instance's password, named in dagster.yaml as ${BACKFILL_DAGSTER_PG_PASSWORD}, may
    come with the URL the team already exports."""
    url = os.environ.get(INSTANCE_URL_ENV)
    if url and not os.environ.get(INSTANCE_PASSWORD_ENV):
        password = urlsplit(url).password
        if password:
            os.environ[INSTANCE_PASSWORD_ENV] = unquote(password)


@contextmanager
def opening_instance(path: Path) -> Iterator[None]:
    """Held while an instance opens: the first to open a home's instance creates its sqlite
    storage (tables, migration stamps), and two at once raced (`table alembic_version already
    exists`, exit 3). Without a writable folder (a read-only home) none is taken: nothing is
    created there either."""
    import fcntl

    try:
        handle = os.open(path / ".instance.lock", os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW, 0o600)
    except OSError:
        yield
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)  # and the lock with it


@contextmanager
def _dagster_home_set(path: Path) -> Iterator[None]:
    """DAGSTER_HOME while an instance opens, where the storages resolve a relative base_dir (a CLI
    command's home need not set it); as it was afterwards."""
    was = os.environ.get("DAGSTER_HOME")
    os.environ["DAGSTER_HOME"] = str(path)
    try:
        yield
    finally:
        if was is None:
            del os.environ["DAGSTER_HOME"]
        else:
            os.environ["DAGSTER_HOME"] = was


def open_instance(path: Path) -> dg.DagsterInstance:
    """The Dagster instance of the dagster.yaml in `path` (DAGSTER_HOME), opened now."""
    with opening_instance(path), _dagster_home_set(path):
        instance = dg.DagsterInstance.from_config(str(path))
        instance.compute_log_manager  # noqa: B018 - made now, while a relative base_dir resolves here
    return instance


def stored_elsewhere(home: Home) -> bool:
    """The home's existing dagster.yaml names another home's storage or gate (see `_elsewhere`)."""
    config = home.dagster_home / "dagster.yaml"
    return config.exists() and _elsewhere(_read_existing(config), config, home) is not None


def instance_for(home: Home, *, quiet: bool = False) -> dg.DagsterInstance:
    """`quiet`: say no note now (recording the plan state on the way out of a command is not where
    the note about the home's dagster.yaml belongs; the command that runs things says it)."""
    path, note = ensure_dagster_home(home)
    if note and note not in _said and not quiet:  # once per process, on the terminal
        _said.add(note)
        terminal.say(f"backfill: {note}")
    _password_from_url()
    key = _instance_key(path)
    if key in _instances:
        _instances[key] = _instances.pop(key)  # the most recently used last
        return _instances[key]
    from backfill_assets import dagster_storage  # noqa: F401 - its storages' schema checks read the scripts once

    try:
        instance = open_instance(path)
    except dg.DagsterInvalidConfigError as exc:
        why = "; ".join(e.message for e in getattr(exc, "errors", []) or []) or str(exc)
        import re

        unset = re.findall(r'environment variable "(\w+)" which is not set', why)
        if unset:
            raise UsageError(f"{path / 'dagster.yaml'} reads ${', $'.join(dict.fromkeys(unset))}, which is not set",
                             fix=f"export it (a Postgres instance's password may come with ${INSTANCE_URL_ENV})"
                             ) from None
        raise UsageError(f"{path / 'dagster.yaml'} is not a valid Dagster instance config "
                         f"({' '.join(why.split())[:240]})",
                         fix="fix it (a secret named {env: NAME} needs NAME set), or remove it and run "
                             "`backfill init`") from None
    _instances[key] = instance
    while len(_instances) > _KEPT_INSTANCES:
        _, evicted = _instances.popitem(last=False)
        try:
            evicted.dispose()
        except Exception:  # noqa: BLE001 - its home may be gone; nothing of ours is in flight on it
            pass
    return instance


# Opening an instance costs ~0.2 s (its storages check their schema). A command opens one and may
# record the plan's state with it too; the demo (and the tests) run many commands in one process.
# So the process keeps the instances it opened, keyed by what they were made from: dagster.yaml's
# bytes and the environment it reads. Callers never dispose one; the process's exit does.
_KEPT_INSTANCES = 4
_instances: OrderedDict[tuple[Any, ...], dg.DagsterInstance] = OrderedDict()


def _instance_key(path: Path) -> tuple[Any, ...]:
    import hashlib

    try:  # its bytes, not its size and time: a rewrite within one clock tick (or `cp -p`) is seen too
        made_from = hashlib.sha256(read_regular(path / "dagster.yaml", 1024 * 1024)).hexdigest()
    except (OSError, NotRegularFile):
        made_from = None
    return (str(path), made_from, *(os.environ.get(n) for n in (WAREHOUSE_URL_ENV, INSTANCE_URL_ENV,
                                                                  INSTANCE_PASSWORD_ENV)))
