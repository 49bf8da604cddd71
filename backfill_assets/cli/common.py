"""What the subcommands share: the home, the warehouse, who acts, and naming a plan.

A plan is named by its file or by its plan_id: commands that act on a plan read its window,
proof partitions, mode and thresholds from the plan of record; a file given must be the approved
version.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from backfill_assets.control import record
from backfill_assets.control.record import PlanState
from backfill_assets.control.schema import SCHEMA_VERSION, ensure_schema, has_control_schema, schema_version
from backfill_assets.errors import BackfillError, PlanRefused, UsageError, WarehouseError
from backfill_assets.home import Home, resolve_home
from backfill_assets.plan.identity import plan_sha256
from backfill_assets.plan.loading import load_plan
from backfill_assets.plan.model import PLAN_ID_PATTERN
from backfill_assets.terminal import shell_word as shell_word  # the commands' name for it
from backfill_assets.trust.root import TrustRoot
from backfill_assets.warehouse import Warehouse, open_warehouse
from backfill_assets.warehouse.engine import Session

if TYPE_CHECKING:
    import dagster as dg

    from backfill_assets.graph import TableGraph
    from backfill_assets.loaded_defs import LoadedDefs
    from backfill_assets.partitions import PartitionScheme
    from backfill_assets.plan.model import Plan
    from backfill_assets.table import TableSpec
    from backfill_assets.trust.policy import Requirement


def home_of(args: argparse.Namespace) -> Home:
    before, after = getattr(args, "home", None), getattr(args, "home_once", None)
    if before is not None and after is not None:  # `backfill --home H guard ... --home plans` (see add_home)
        raise UsageError("--home given twice: give it once",
                         fix="pass plan files by glob or xargs -0 (a plain xargs splits a file's name at its blanks)")
    return resolve_home(after or before)


def add_home(parser: argparse.ArgumentParser, *, once: bool = False) -> None:
    # --home is accepted after the subcommand too, since that is where people type it
    if once:
        # a reading command that counts signatures: a plan's name split by a plain xargs
        # (`x.yaml --home plans`) named a home with no record after the job's, and the guard counted a
        # superseded version's old signatures: ALLOWED (found by a review). Its own dest: given before
        # the command too, home_of refuses the pair
        parser.add_argument("--home", dest="home_once", action=Once, default=argparse.SUPPRESS,
                            help="state folder (default: $BACKFILL_HOME or ./.backfill)")
        return
    parser.add_argument("--home", default=argparse.SUPPRESS,
                        help="state folder (default: $BACKFILL_HOME or ./.backfill)")


class Once(argparse.Action):
    """An option that names what a reading command trusts, given at most once: a plain `xargs` splits a
    pull request's plan named `x.yaml --allowed-signers evil/allowed_signers` at its blanks, and the
    later option won over the job's own, ALLOWED under the pull request's file (found by an attack)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given twice: give it once (a plan file's name split at its blanks, "
                         "as a plain xargs splits it, can name another; pass plan files by glob or xargs -0)")
        setattr(namespace, self.dest, values)


def add_root_options(parser: argparse.ArgumentParser) -> None:
    """The trust root a reading command (guard, plan show) counts under where no control record can
    be read; each at most once: a plan's name split by a plain xargs named a second one (`Once`)."""
    parser.add_argument("--allowed-signers", action=Once,
                        help="where no control record can be read (CI): the team's reviewed allowed_signers, e.g. "
                             "the default branch's; never the plan's folder")
    parser.add_argument("--policy", action=Once,
                        help="with --allowed-signers: the team's policy (default: policy.yaml beside it)")
    parser.add_argument("--warehouse", action=Once,
                        help="the production warehouse's id (`backfill approvers show`), to check what signatures "
                             "bind where no control record can be read")


def add_defs(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--defs", help="definitions: a file (defs.py) or a module (pkg.module), "
                                       "optionally :attr; default $BACKFILL_DEFS, else workspace.yaml")


def actor() -> str:
    """Who runs the command: the process's OS account and host, never free text (a flag, $USER)."""
    try:
        import pwd
    except ImportError:  # Windows: the logon account, not %USERNAME%
        return f"{os.getlogin()}@{socket.gethostname()}"
    try:
        user = pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:  # a uid without a passwd entry, e.g. in a container
        user = f"uid{os.geteuid()}"
    return f"{user}@{socket.gethostname()}"


def shown_path(path: str | os.PathLike[str]) -> str:
    """A file name as printed on a line of ours: every character that is not printable as an escape
    (a pull request's plan named with a line break and ESC[8m printed a forged ALLOWED line in the
    guard and concealed the real verdicts, found by an attack)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(path))


def warehouse_of(args: argparse.Namespace) -> Warehouse:
    return open_warehouse(home_of(args))


@contextmanager
def reading(args: argparse.Namespace) -> Iterator[Session]:
    """A session for a command that only reads: it never creates a warehouse or a control record."""
    warehouse = warehouse_of(args)
    if not warehouse.exists():
        raise UsageError(f"no warehouse at {warehouse.engine.describe()}",
                         fix="pass --home (or set BACKFILL_HOME) to the folder that holds it")
    with warehouse.session(read_only=True) as session:
        if not has_control_schema(session):
            raise UsageError(f"{warehouse.engine.describe()} holds no backfill control record",
                             fix="pass --home pointing at the right BACKFILL_HOME, or run `backfill init`")
        found = schema_version(session)
        if found != SCHEMA_VERSION:  # a reader never upgrades: it would write
            raise WarehouseError(f"the control record in {warehouse.engine.describe()} is of schema {found}; this "
                                 f"release reads schema {SCHEMA_VERSION}",
                                 fix="run a writing command of this release once (e.g. `backfill init`): it "
                                     "upgrades the record in place")
        yield session


def note_unverified_statement(session: Session, warehouse_id: str) -> None:
    """A statement printed from a record read without the evidence key names a warehouse (and a
    plan of record) no one checked: an insider of staging who typed production's id into its root had
    an approver sign, for staging as they thought, a statement that counts in production (found by
    an attack). The statement is still printed (approvers sign offline from such readers); stderr
    says what to compare before signing."""
    from backfill_assets.control.evidence_log import can_verify

    if not can_verify(session):
        sys.stderr.write(f"backfill: note: read without the evidence key, so this statement's warehouse "
                         f"({warehouse_id}) is unchecked: compare it with `backfill approvers show` where the key "
                         "is before signing\n")


@contextmanager
def writing(args: argparse.Namespace, *, create: bool = False) -> Iterator[Session]:
    """A session for a command that writes; only `create` commands (init) may make the warehouse or
    its control record, so a mistyped home is one line and creates nothing."""
    warehouse = warehouse_of(args)
    if not create and not warehouse.exists():
        raise UsageError(f"no warehouse at {warehouse.engine.describe()}",
                         fix="pass --home (or set BACKFILL_HOME) to the folder that holds it, or run `backfill init`")
    with warehouse.session() as session:
        if not create and not has_control_schema(session):
            raise UsageError(f"{warehouse.engine.describe()} holds no backfill control record",
                             fix="pass --home pointing at the right BACKFILL_HOME, or run `backfill init`")
        ensure_schema(session)
        yield session


def plan_id_of(reference: str) -> tuple[str, Path | None]:
    """A plan named by its file (then its plan_id is read from it) or by its plan_id."""
    path = Path(reference)
    if path.is_file() or (path.exists() and not path.is_dir()):  # a FIFO or device: one line from load_plan
        return load_plan(path).plan_id, path
    import re

    if re.match(PLAN_ID_PATTERN, reference):
        return reference, None
    raise UsageError(f"{reference!r} is neither a plan file nor a plan id",
                     fix="give the plan's YAML file or its plan_id")


def plan_state(session: Session, reference: str) -> PlanState:
    """The plan of record; a file given must be its approved version."""
    plan_id, path = plan_id_of(reference)
    state = record.require(session, plan_id)
    if path is not None and state.approved_sha256 is not None:
        sha = plan_sha256(load_plan(path))
        if sha != state.approved_sha256:
            raise PlanRefused(f"{path} is not the approved version of plan {plan_id} (hash {sha[:12]}, "
                              f"approved {state.approved_sha256[:12]})",
                              fix="use the approved file or the plan id, or have this version approved")
    return state


@dataclass(frozen=True)
class RootView:
    """The trust root a reading command counts a plan file's signatures under, and where it came
    from; `problem` says why it cannot (or why the one named differs from the pinned one)."""

    root: TrustRoot | None
    source: str
    problem: str | None = None
    pinned: bool = False
    fix: str = "review the change, then re-pin with `backfill approvers pin FILE`"


def committed_home(home: Home) -> str | None:
    """Why the control record in `home` may be a pull request's, not the warehouse's: git tracks
    files under it (a checkout holds whatever a pull request committed, a whole home included),
    or git cannot say. None for a home outside any git work tree, or one git does not track; a home
    found by default (./.backfill, no --home nor BACKFILL_HOME) outside any work tree is the folder's,
    which may be a checkout without `.git` (a tarball), so git cannot say: a pull request's whole
    home committed there was read, and the bare hook said ALLOWED (found by an attack)."""
    root = home.root
    top = _work_tree(root)
    if top is None:
        if home.named:
            return None
        link = Path.cwd() / ".backfill"
        linked = _work_tree(link.parent) if link.is_symlink() else None
        if linked is not None and link.resolve() == root:
            # `.backfill` a link to the team's home elsewhere (a shared disk), ignored by git, was refused
            # as a home in no work tree (found by a review): one git does not track is the developer's
            why = _tracked(link, linked) or _unpacked(link.parent, linked)
            return None if why is None else f"{link} (a link to {root}) {why}"
        return (f"{root} is the default home of the current folder, in no git work tree: a checkout without .git "
                "(a tarball) may hold a pull request's whole control record, so the guard reads none of it and "
                "refuses; name the team's home with --home or BACKFILL_HOME")
    why = _tracked(root, top) or (None if home.named else _unpacked(root.parent, top))
    return None if why is None else f"{root} {why}"


def _work_tree(path: Path) -> Path | None:
    return next((p for p in (path, *path.parents) if (p / ".git").exists()), None)


# git's first line alone named no way out (found by a review)
_UNLISTED = ("; let git read the work tree (`git status` there says why; one owned by another user needs "
             "`git config --global --add safe.directory` of it), or point BACKFILL_HOME (or --home) at the "
             "team's home, outside the checkout")


def _listed(path: Path, top: Path) -> bytes | str:
    """What git in `top` tracks under `path` (`ls-files -z`), or why it cannot say."""
    import subprocess

    try:
        found = subprocess.run(["git", "--literal-pathspecs", "-C", str(top), "ls-files", "-z", "--", str(path)],
                               capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"is inside the git work tree {top} and git cannot list what it tracks there ({exc}){_UNLISTED}"
    if found.returncode != 0:
        said = found.stderr.decode("utf-8", "replace").strip().splitlines()
        return (f"is inside the git work tree {top} and git cannot list what it tracks there "
                f"({said[0][:160] if said else f'exit {found.returncode}'}){_UNLISTED}")
    return found.stdout.strip(b"\0")


def _unpacked(folder: Path, top: Path) -> str | None:
    """Why a default home's folder may be a checkout without .git unpacked in another work tree: a
    pull request's tarball under the base branch's checkout had its committed home untracked there,
    and read as a developer's (found by a review). None where git tracks files in the folder, or the
    folder is the work tree's own top (a clone; a fresh `git init`)."""
    if folder == top:
        return None
    found = _listed(folder, top)
    if isinstance(found, str) or found:
        return None if not isinstance(found, str) else found
    return (f"is the default home of {folder}, which holds no file git tracks in {top}: a checkout without .git "
            "unpacked there (a tarball) may hold a pull request's whole control record, so the guard reads none "
            "of it and refuses; name the team's home with --home or BACKFILL_HOME (or `git add` the folder's files)")


def _tracked(path: Path, top: Path) -> str | None:
    """Why git in `top` says `path` may be a pull request's (it tracks files there, or cannot say)."""
    found = _listed(path, top)
    if isinstance(found, str):
        return found
    if found:
        return (f"holds files tracked by git in {top}: a pull request can commit a whole control record, "
                "so the guard reads none of it and refuses; point BACKFILL_HOME (or --home) at the team's home, "
                "outside the checkout")
    return None


@dataclass(frozen=True)
class Replacing:
    """What a version's approvals must name, and need at least, where it replaces a plan of record."""

    mark: str
    floor: Requirement
    refused: str | None = None  # why this version can never replace it (`approving.takeover_refusal`)


def replaced_mark(home: Home, plan: Plan, root: TrustRoot) -> Replacing | None:
    """The plan of record `plan` would replace (or replaced), as a `plan replacement` statement
    names it, and what replacing it needs at least under `root`, where this home's control record
    can be read (None elsewhere: a CI job without it cannot know, and `backfill run` refuses a file
    that is not the plan of record). Read without the evidence key (a CI job that may read the
    warehouse), the rows are unverified: they decide nothing, every run counts again; counting
    by them keeps the guard from allowing a superseded version every run refuses (found by an
    attack). A row typed over can only have it refuse; rows edited to agree with each other (the
    chain cut back to an earlier adoption and the plan's row put back to match, or the plan's rows
    deleted) are an earlier record to it, and have it count a superseded version's old signatures
    (found by an attack): no reader without the key can tell (README, the guard in CI)."""
    from backfill_assets.control import evidence_log

    store = open_warehouse(home)
    if not store.exists() or committed_home(home) is not None:
        return None
    with store.session(read_only=True) as session:
        if not has_control_schema(session):
            return None
        if evidence_log.can_verify(session):
            return _replacing(session, plan, root)
        try:
            return _replacing(session, plan, root, keyless=True)
        except (ValueError, TypeError, KeyError) as exc:
            # rows an insider planted (a version whose content is no plan) stopped the guard with an
            # internal error (found by an attack): read unverified, they can only make it refuse
            return Replacing("unreadable", root.policy.requirement(plan.assets, plan.approvals.required),
                             f"the control record, read without the evidence key, holds rows that are no plan's "
                             f"({type(exc).__name__}): only a reader with the key can tell what this version needs")


def _replacing(session: Session, plan: Plan, root: TrustRoot, *, keyless: bool = False) -> Replacing | None:
    from backfill_assets.approving import takeover_refusal
    from backfill_assets.control import authority

    sha = plan_sha256(plan)
    since = record.replaced(session, plan.plan_id, sha)
    state = record.get(session, plan.plan_id)
    if since is None:
        if keyless and state is not None and state.approved_sha256 not in (None, sha):
            # the plan's row names another plan of record, its chain no adoption this version would
            # replace: rows cut off the chain's end (which only the head log beside the key shows)
            # brought the guard to allow a superseded version every run refuses (found by an attack)
            return Replacing("unreadable", root.policy.requirement(plan.assets, plan.approvals.required),
                             f"the control record, read without the evidence key, names "
                             f"{state.approved_sha256[:12]} as plan {plan.plan_id}'s plan of record but its chain "
                             "shows no adoption of it: only a reader with the key can tell what this version needs")
        return None
    # the plan of record itself is never refused as a takeover (ended, it was refused, and one
    # closed replacement failed every later pull request's guard: found by a review)
    refused = None if state is not None and state.approved_sha256 == sha else takeover_refusal(session, plan, sha)
    return Replacing(since.mark, authority.replaced_floor(session, root, since),
                     None if refused is None else f"{refused.message}: {refused.fix}")


def resolve_root(home: Home, signers: str | None, policy: str | None, warehouse: str | None) -> RootView:
    """The pinned root where the control record can be read; else the files named explicitly (the
    default branch's, in CI); never a file found next to the plan."""
    from backfill_assets.control import evidence_log, trust_record
    from backfill_assets.plan.approvals import load_explicit_root

    named, why = load_explicit_root(signers, policy, warehouse)
    pinned, verifiable = None, True
    store = open_warehouse(home)
    exists = store.exists()
    committed = committed_home(home) if exists else None
    if committed is not None:
        # refused, not passed over: a file a pull request committed under the home switched the record
        # off, and beside it, read without the key, a superseded version's old signatures counted
        # under the named files (found by an attack)
        return RootView(None, "none", problem=committed)
    if exists:
        with store.session(read_only=True) as session:
            if has_control_schema(session):
                pinned = trust_record.current(session)
                verifiable = evidence_log.can_verify(session)
        if pinned is not None and not verifiable:
            # read without the evidence key (a CI job that may read the warehouse): the pinned root's
            # rows are as writable as any table's, so it counts nothing; the files named do, and
            # only when the unverified pin agrees with them
            root = pinned.root
            if named is None:
                return RootView(None, "none", problem=(
                    "the pinned trust root cannot be verified here (no evidence key to check it with): name the "
                    "team's reviewed files (the default branch's) with --allowed-signers [--policy]"))
            if (named.root.signers.sha256, named.root.policy.sha256) != (root.signers.sha256, root.policy.sha256):
                return RootView(None, named.source, problem=(
                    f"{named.source} differ from the trust root pinned in the warehouse (unverified here: no "
                    "evidence key): a change of the root takes its quorum's signatures (`backfill approvers pin`)"))
            return RootView(named.root, f"{named.source} (the warehouse's pin, unverified here, agrees)")
    if pinned is not None:
        root = pinned.root
        if named is None and why is not None:
            # a file named that cannot be read (a typo'd path, a pipe, a folder) was dropped without a
            # word, and the guard said ALLOWED as if it agreed with the pin (found by an attack)
            return RootView(root, f"the pinned {root.describe()}", pinned=True, problem=(
                f"{why}; the files named are compared with the pinned trust root ({root.describe()})"),
                fix="name files that can be read (the default branch's allowed_signers and policy)")
        if named is not None and (named.root.signers.sha256, named.root.policy.sha256) != \
                (root.signers.sha256, root.policy.sha256):
            return RootView(root, f"the pinned {root.describe()}", pinned=True, problem=(
                f"{named.source} differ from the pinned trust root ({root.describe()}): a change of the root "
                "takes its quorum's signatures (`backfill approvers pin`)"))
        if warehouse and warehouse != root.warehouse_id:
            return RootView(root, f"the pinned {root.describe()}", pinned=True,
                            problem=f"--warehouse {warehouse} is not this warehouse ({root.warehouse_id})")
        return RootView(root, f"the pinned {root.describe()}", pinned=True)
    if named is not None:
        return RootView(named.root, named.source)
    return RootView(None, "none", problem=why or (
        "no trust root to count signatures under: run where the control record can be read, or name the "
        "team's reviewed files (the default branch's) with --allowed-signers [--policy]; a file beside "
        "the plan is never trusted"))


def log_details(args: argparse.Namespace, text: str) -> str:
    """`text` appended to the home's log file; where it went (or why nowhere)."""
    from backfill_assets import terminal

    try:
        path = terminal.log_file(home_of(args))
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(text if text.endswith("\n") else text + "\n")
        return str(path)
    except OSError:
        return "nowhere: the home is not writable"
    except BackfillError as exc:  # the log file is not a file
        return f"nowhere: {exc.message}"


def record_plan_state(args: argparse.Namespace, plan_id: str, graph: TableGraph | None = None,
                      instance: dg.DagsterInstance | None = None, *, failing: bool = False) -> None:
    """The plan's state on each of its tables' assets in the Dagster UI, right after this command
    changed it (the reopen sensor records it on its ticks too). After the commit, and best effort:
    if Dagster's instance cannot be opened now, the sensor's next tick shows it. `instance`: the one
    the command already has open (run, publish), so it is not opened a second time (~0.3 s).
    `failing`: the command is failing with its own one line; a failure here goes to the log file
    (`run --and-publish` printed two lines for one problem: found by an attack)."""
    from backfill_assets import terminal
    from backfill_assets.defs.plan_state import observations

    try:
        with warehouse_of(args).session() as session:
            state = record.get(session, plan_id)
            if state is None:
                return
            found = observations(session, state.assets, f"backfill by {actor()}", graph)
        if instance is not None:
            for event in found:
                instance.report_runless_asset_event(event)
            return
        from backfill_assets.dagster_setup import instance_for

        opened = instance_for(home_of(args), quiet=True)
        for event in found:
            opened.report_runless_asset_event(event)
    except Exception as exc:  # noqa: BLE001 - the change is committed; the UI catches up at the next tick
        first = str(exc).splitlines()[0] if str(exc) else ""
        said = (f"backfill: the Dagster UI shows the plan's state at the reopen sensor's next tick "
                f"(recording it now failed: {type(exc).__name__}: {first[:160]})")
        if failing:
            log_details(args, said)
        else:
            terminal.say(said)


def tables_if_found(defs: str | None = None) -> LoadedDefs | None:
    """The loaded definitions, when they can be found: then status also checks the published table
    against what was published. A status without them still answers; definitions named with
    `--defs` load or say why (a status under definitions other than the ones asked for, found by
    none, named no graph and checked no published table, and its advice could not carry them)."""
    from backfill_assets.errors import BackfillError
    from backfill_assets.loaded_defs import load_defs

    if defs:
        return load_defs(defs)
    try:
        return load_defs(None)
    except BackfillError:
        return None


def table_of(loaded: LoadedDefs | None,
              target: str) -> tuple[TableSpec | None, PartitionScheme | None, TableGraph | None]:
    from backfill_assets.errors import BackfillError

    if loaded is None:
        return None, None, None
    try:
        table = loaded.table(target)
    except BackfillError:
        return None, None, None
    return table.spec, table.scheme(), table.graph
