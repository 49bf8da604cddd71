"""`backfill init`: the control record, the evidence key, and DAGSTER_HOME with our dagster.yaml."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from backfill_assets.cli.common import add_home, home_of, writing
from backfill_assets.control.evidence_log import create_key

if TYPE_CHECKING:
    from backfill_assets.signing.allowed_signers import AllowedSigners
    from backfill_assets.trust.policy import Policy
    from backfill_assets.warehouse.engine import Session


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    init = sub.add_parser("init", help="create the control record, the evidence key and DAGSTER_HOME")
    init.add_argument("--instance", choices=("sqlite", "postgres"), default="sqlite",
                      help="Dagster's run, event and schedule storage: sqlite files in DAGSTER_HOME "
                           "(default) or the Postgres server named by --instance-url")
    init.add_argument("--instance-url", help="postgresql://user@host:port/db for --instance postgres "
                                             "(default $BACKFILL_DAGSTER_PG_URL)")
    init.add_argument("--allowed-signers", help="the team's reviewed allowed_signers: pinned as the trust root "
                                                "with the policy (approvals count only under it)")
    init.add_argument("--policy", help="the team's reviewed policy (default: policy.yaml beside allowed_signers, "
                                       "else the default policy: 2 approvers and the owner, 14 days)")
    add_home(init)
    init.set_defaults(handler=cmd_init, keep_open=True)


def _pin_first(session: Session, signers: AllowedSigners, policy: Policy) -> str:
    """Pin the first trust root; an identical one is already pinned; another one is refused."""
    from backfill_assets.cli.common import actor
    from backfill_assets.control import trust_record
    from backfill_assets.errors import TrustRootError

    with session.transaction():
        session.lock("backfill_control.trust_root")
        pinned = trust_record.current(session)
        if pinned is None:
            return f"pinned {trust_record.pin_first(session, signers, policy, actor()).describe()}"
    if (pinned.root.signers.sha256, pinned.root.policy.sha256) == (signers.sha256, policy.sha256):
        return f"already pinned: {pinned.describe()}"
    raise TrustRootError(f"{pinned.root.describe()} is pinned, and {signers.source} with {policy.source} differs",
                         fix="change the trust root with `backfill approvers pin FILE` and the signatures of its "
                             "quorum (`backfill approvers statement FILE` prints what they sign)")


def cmd_init(args: argparse.Namespace) -> int:
    import os

    from backfill_assets.dagster_setup import INSTANCE_URL_ENV, ensure_dagster_home
    from backfill_assets.errors import UsageError

    home = home_of(args)
    url = None
    if args.instance == "postgres":
        url = args.instance_url or os.environ.get(INSTANCE_URL_ENV)
        if not url:
            raise UsageError("--instance postgres needs a server", fix="pass --instance-url postgresql://...")
    files = None
    if args.allowed_signers:
        from backfill_assets.cli.approvers_cmd import load_files

        files = load_files(args.allowed_signers, args.policy)  # refused before anything is created
        files[1].check_against(set(files[0].principals))
    elif args.policy:
        raise UsageError("--policy needs --allowed-signers", fix="pin both: --allowed-signers FILE --policy FILE")
    with writing(args, create=True) as session:
        where = session.engine.describe()
        if files is not None:
            print(_pin_first(session, *files))
    key = create_key(home)
    dagster_home, kept = ensure_dagster_home(home, url)
    print(f"warehouse    {where}")
    print(f"evidence key {key} (mode 0600; keep it, and back it up apart from the warehouse)")
    if kept:
        print(f"DAGSTER_HOME {dagster_home} (its dagster.yaml is kept as it is)")
        print(f"note         {kept}")
    else:
        print(f"DAGSTER_HOME {dagster_home} (dagster.yaml: write-permission run coordinator, per-plan caps"
              + (", Postgres storage)" if url else ")") + "; written once, yours to edit")
    from urllib.parse import urlsplit

    from backfill_assets.dagster_setup import INSTANCE_PASSWORD_ENV

    if url and not kept and urlsplit(url).password:
        print(f"password     not written: dagster.yaml reads it from ${INSTANCE_PASSWORD_ENV} (set it, or "
              f"${INSTANCE_URL_ENV}, wherever the instance is loaded)")
    import shlex

    # quoted for the shell: a home's path may hold spaces, quotes or #
    print(f"export BACKFILL_HOME={shlex.quote(str(home.root))} DAGSTER_HOME={shlex.quote(str(dagster_home))}")
    return 0
