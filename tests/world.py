"""A real warehouse, real Dagster definitions and instance, SSH keys and plans, in tmp_path.

Plans live in `<tmp>/plans/` and the reviewed `<tmp>/approvers/allowed_signers` lists alice
(ed25519), bob (RSA), carol (ECDSA) and olivia (ed25519, the owner of the test plans); mallory has
a key but is not listed. The file is pinned as the warehouse's trust root with the default policy
(two approvers and the owner), as `backfill init --allowed-signers` does. Every write goes through
the product: approvals through `plan approve`, data through Dagster runs.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import dagster as dg
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from backfill_assets.cli import main as cli_main
from backfill_assets.cli.common import actor
from backfill_assets.control import record, trust_record
from backfill_assets.control.schema import ensure_schema
from backfill_assets.demo.definitions import PARTITIONS, build_definitions
from backfill_assets.demo.revenue import DAILY_REVENUE, DAILY_REVENUE_V1
from backfill_assets.demo.sample import generate_orders
from backfill_assets.home import Home
from backfill_assets.partitions import PartitionScheme, scheme_for
from backfill_assets.permission import BACKFILL_TAG, PLAN_TAG
from backfill_assets.signing.allowed_signers import AllowedSigners
from backfill_assets.table import TableSpec
from backfill_assets.tags import ACTOR_TAG
from backfill_assets.trust.policy import Policy
from backfill_assets.warehouse import Warehouse, open_warehouse
from backfill_assets.warehouse.duckdb_engine import DuckDBEngine
from backfill_assets.warehouse.fingerprints import EMPTY, Fingerprint, fingerprints
from tests.plans import complete_plan, write_plan

START = dt.date(2026, 1, 1)
DAYS = 8
PEOPLE = ("alice", "bob", "carol", "olivia", "mallory")
LISTED = ("alice", "bob", "carol", "olivia")
OWNER = "olivia"
KEY_TYPES = {"bob": "rsa", "carol": "ecdsa"}  # the rest ed25519: the approvers use all three kinds
DEMO_DEFS = "backfill_assets.demo.daily"  # the daily table alone


def _private_key(kind: str):
    if kind == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if kind == "ecdsa":
        return ec.generate_private_key(ec.SECP256R1())
    return ed25519.Ed25519PrivateKey.generate()


def make_keys(folder: Path) -> dict[str, Path]:
    """Unencrypted keys in OpenSSH format, as `ssh-keygen -N ''` writes them: RSA for bob, ECDSA for
    carol, ed25519 for the others."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in PEOPLE:
        path = folder / name
        if not path.exists():
            key = _private_key(KEY_TYPES.get(name, "ed25519"))
            path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                               serialization.NoEncryption()))
            path.chmod(0o600)
            public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                   serialization.PublicFormat.OpenSSH)
            (folder / f"{name}.pub").write_bytes(public + f" {name}\n".encode())
        paths[name] = path
    return paths


def signers_text(keys: dict[str, Path], names: tuple[str, ...] = LISTED) -> str:
    return "".join(f"{n} {' '.join((keys[n].parent / f'{n}.pub').read_text().split()[:2])}\n" for n in names)


def _rearm_kept() -> None:
    """A command that let its kept databases go (`release_kept`: publish, before its plan's state is
    fingerprinted; the relay, before a receiver is waited on) keeps none until its outermost scope
    ends, which in a command's own process is the command. Under the `world` fixture's scope (the
    test's), the next command is another process's in all but name: it keeps again, as it would."""
    from backfill_assets.warehouse import duckdb_engine, postgres_engine

    for kept in (duckdb_engine._kept, postgres_engine._kept):
        with kept.lock:
            kept.released = False


@dataclass
class World:
    root: Path
    instance: dg.DagsterInstance
    keys: dict[str, Path]
    url: str | None = None  # a PostgreSQL warehouse; None: the embedded DuckDB file in the home

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def warehouse_path(self) -> Path:
        return self.home / "warehouse.duckdb"

    def warehouse(self) -> Warehouse:
        return open_warehouse(Home(self.home), self.url)

    def defs(self, spec: TableSpec = DAILY_REVENUE) -> dg.Definitions:
        return build_definitions(spec, home=str(self.home), url=self.url or "")

    @property
    def scheme(self) -> PartitionScheme:
        return scheme_for(PARTITIONS, "DATE", name="daily_revenue")

    def cli(self, *args: str) -> int:
        try:
            return cli_main(["--home", str(self.home), *args])
        finally:
            _rearm_kept()

    def plan(self, name: str = "fix", **kwargs) -> Path:
        return write_plan(self.root / "plans" / f"{name}.yaml", complete_plan(plan_id=name, **kwargs))

    def approve(self, path: Path, *who: str, owner: bool = True) -> Path:
        """The owner's signature (unless `owner=False`) and approvers' (alice and bob by default):
        all but the last signed offline into the plan file, as approvers who sign with `ssh-keygen
        -Y sign` give theirs, and the last through `plan approve --key`, which records them all
        (one command: three took a sixth of the in-process tests' time; `tests/test_approvals.py`
        approves one signer a command)."""
        names = ((OWNER,) if owner else ()) + (who or ("alice", "bob"))
        if len(names) > 1:
            self.sign_into_file(path, *names[:-1])
        last = names[-1]
        assert self.cli("plan", "approve", str(path), "--by", last, "--key", str(self.keys[last])) == 0
        return path

    def sign_into_file(self, path: Path, *who: str) -> None:
        """Each of `who` signs the statement `backfill plan statement` would print now (a `plan
        replacement` one for a version replacing the plan of record), into the plan file."""
        from backfill_assets.loaded_defs import load_defs
        from backfill_assets.plan.approvals import entry_of, mirror_into_file, plan_statement
        from backfill_assets.plan.identity import plan_sha256
        from backfill_assets.plan.loading import load_plan
        from backfill_assets.signing.sshsig import sign

        plan = load_plan(path)
        code = load_defs(None).table(plan.target).code_identity(plan.assets)
        with self.warehouse().session() as session:
            root = trust_record.require(session)
            replaces = record.replaced_by(session, plan.plan_id, plan_sha256(plan)) \
                if session.engine.table_exists(session, "plans", "backfill_control") else None
        statement = plan_statement(plan, root, code, replaces=replaces)
        mirror_into_file(path, [entry_of(name, statement, sign(statement.message, self.keys[name])) for name in who])

    def defs_file(self, spec: TableSpec) -> Path:
        """A definitions file of the table as `spec` declares it, for `--defs` (a release, or one an
        operator wrote)."""
        defs = self.root / f"defs_{hashlib.sha256(spec.to_json().encode()).hexdigest()[:12]}.py"
        defs.write_text("from backfill_assets.demo.definitions import build_definitions\n"
                        "from backfill_assets.table import TableSpec\n"
                        f"defs = build_definitions(TableSpec.from_json({spec.to_json()!r}), home={str(self.home)!r}, "
                        f"url={self.url or ''!r})\n", encoding="utf-8")
        return defs

    def approve_for(self, path: Path, spec: TableSpec, *who: str, owner: bool = True) -> Path:
        """Signatures for the table's code as `spec` declares it (a release the team deploys next):
        approvers sign what the definitions they load say, so they load a definitions file of it."""
        defs = self.defs_file(spec)
        for name in ((OWNER,) if owner else ()) + (who or ("alice", "bob")):
            assert self.cli("plan", "approve", str(path), "--by", name, "--key", str(self.keys[name]),
                            "--defs", str(defs)) == 0
        return path

    def approve_replacing(self, path: Path, *who: str, owner: bool = True) -> Path:
        """`approve`, for a version that replaces the plan of record: each signs the `plan
        replacement` statement `backfill plan statement` prints now (it names the adoption of the
        plan of record it replaces), passed as files as a signer who signed elsewhere would."""
        from backfill_assets.signing.sshsig import sign
        from backfill_assets.signing.statements import PLAN_REPLACEMENT, Statement

        out = self.root / "replacing" / path.stem
        out.mkdir(parents=True, exist_ok=True)
        for name in ((OWNER,) if owner else ()) + (who or ("alice", "bob")):
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                assert self.cli("plan", "statement", str(path)) == 0
            statement = Statement.parse(printed.getvalue())
            assert statement.kind == PLAN_REPLACEMENT, statement.text
            (out / f"{name}.txt").write_text(statement.text)
            (out / f"{name}.sig").write_text(sign(statement.message, self.keys[name]))
            assert self.cli("plan", "approve", str(path), "--by", name, "--statement", str(out / f"{name}.txt"),
                            "--signature", str(out / f"{name}.sig")) == 0
        return path

    def approved_plan(self, name: str = "fix", **kwargs) -> Path:
        return self.approve(self.plan(name, **kwargs))

    def materialize(self, keys: list[str] | str, *, tags: dict[str, str] | None = None,
                    spec: TableSpec = DAILY_REVENUE, publish: bool = False,
                    target: bool = True) -> dg.ExecuteInProcessResult:
        keys = [keys] if isinstance(keys, str) else keys
        run_tags = dict(tags or {})
        if "dagster/asset_partition_range_start" in run_tags or "dagster/partition" in run_tags:
            pass  # the caller's range (e.g. a sensor's request) is used as given
        elif len(keys) == 1:
            run_tags["dagster/partition"] = keys[0]
        else:
            run_tags["dagster/asset_partition_range_start"] = keys[0]
            run_tags["dagster/asset_partition_range_end"] = keys[-1]
        run_tags.setdefault(ACTOR_TAG, "test")
        selection = ([dg.AssetKey(spec.name)] if target else []) + ([dg.AssetKey(spec.publish_as)] if publish else [])
        job = self.defs(spec).resolve_implicit_global_asset_job_def()
        with self.deployed():
            return job.execute_in_process(instance=self.instance, asset_selection=selection, tags=run_tags,
                                          raise_on_error=False)

    @contextlib.contextmanager
    def deployed(self) -> Iterator[None]:
        """The environment Dagster runs in where this world is deployed: its home, or its PostgreSQL
        warehouse's URL (a run's resource must name the warehouse the CLI reads)."""
        name, value = ("BACKFILL_WAREHOUSE_URL", self.url) if self.url else ("BACKFILL_HOME", str(self.home))
        before = os.environ.get(name)
        os.environ[name] = value
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = before

    def backfill(self, keys, backfill_id: str = "ui-bf", **kw) -> dg.ExecuteInProcessResult:
        """A run as the backfill daemon submits it: tagged dagster/backfill."""
        return self.materialize(keys, tags={BACKFILL_TAG: backfill_id}, **kw)

    def plan_run(self, plan_id: str, keys, **kw) -> dg.ExecuteInProcessResult:
        return self.materialize(keys, tags={PLAN_TAG: plan_id}, **kw)

    def publish(self, keys: list[str], **kw) -> dg.ExecuteInProcessResult:
        return self.materialize(keys, publish=True, target=False, **kw)

    def fingerprints(self, table: str, keys: list[str]) -> dict[str, Fingerprint]:
        with self.warehouse().session() as session:
            if not session.engine.table_exists(session, table):
                return dict.fromkeys(keys, EMPTY)
            return fingerprints(session, table, DAILY_REVENUE.columns, self.scheme, "order_date", keys)

    def sql(self, query: str, params: list | None = None) -> list[tuple]:
        with self.warehouse().session() as session:
            return session.rows(query, params or [])

    def run_sql(self, statement: str, params: list | None = None) -> None:
        """A statement as another process runs it (a person's, an insider's): on DuckDB only once this
        process closed the file, which a command's kept database (the `world` fixture's) lets go of."""
        warehouse = self.warehouse()
        if isinstance(warehouse.engine, DuckDBEngine):
            warehouse.engine.let_go()
        with warehouse.session() as session:
            session.execute(statement, params or [])

    def plan_ids(self) -> list[str]:
        with self.warehouse().session() as session:
            if not session.engine.table_exists(session, "plans", "backfill_control"):
                return []
            return [r[0] for r in session.rows("SELECT plan_id FROM backfill_control.plans ORDER BY 1")]

    def phase(self, plan_id: str = "fix") -> str | None:
        found = self.sql("SELECT phase FROM backfill_control.plans WHERE plan_id = ?", [plan_id])
        return found[0][0] if found else None

    def rows(self, table: str, key: str) -> int:
        with self.warehouse().session() as session:
            if not session.engine.table_exists(session, table):
                return 0
            return int(session.scalar(f"SELECT count(*) FROM {table} WHERE order_date = ?", [key]))


def failure_text(result: dg.ExecuteInProcessResult) -> str:
    texts = []
    for event in result.all_events:
        if event.is_step_failure and event.event_specific_data is not None:
            error = getattr(event.event_specific_data, "error", None)
            if error is not None:
                texts.append(error.message)
            user = getattr(event.event_specific_data, "user_failure_data", None)
            if user is not None and user.description:
                texts.append(user.description)
    return "\n".join(texts)


def make_world(tmp_path: Path, instance: dg.DagsterInstance, keys: dict[str, Path],
               url: str | None = None) -> World:
    world = World(tmp_path, instance, keys, url)
    world.home.mkdir(parents=True, exist_ok=True)
    signers = tmp_path / "approvers" / "allowed_signers"
    signers.parent.mkdir(parents=True, exist_ok=True)
    signers.write_text(signers_text(keys))
    with world.warehouse().session() as session:
        generate_orders(session, start=START, days=DAYS, rows_per_day=300, seed=11)
        pin_trust_root(session, signers)
    return world


def pin_trust_root(session, signers: Path, policy: Path | None = None) -> None:
    """What `backfill init --allowed-signers FILE [--policy FILE]` pins."""
    ensure_schema(session)
    with session.transaction():
        trust_record.pin_first(session, AllowedSigners.load(signers),
                               Policy.load(policy) if policy else Policy.default(), actor())


def keys(first: int, last: int) -> list[str]:
    return [(START + dt.timedelta(days=i - 1)).isoformat() for i in range(first, last + 1)]


BUGGY = DAILY_REVENUE_V1
FIXED = DAILY_REVENUE
RANGE_FILTER = "order_date >= $partition_start AND order_date < $partition_end"


def per_partition(spec: TableSpec) -> TableSpec:
    """The demo's table in the per-partition form (select_sql bound to one `$partition`)."""
    return replace(spec, select_sql=spec.select_sql.replace(RANGE_FILTER, "order_date = $partition"),
                   range_form=False)
__all__ = ["BUGGY", "FIXED", "World", "failure_text", "keys", "make_world", "per_partition", "replace"]
