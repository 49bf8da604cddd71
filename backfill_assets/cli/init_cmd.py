"""`backfill init`: the control record, the evidence key, and DAGSTER_HOME with our dagster.yaml."""

from __future__ import annotations

import argparse

from backfill_assets.cli.common import add_home, home_of, writing
from backfill_assets.control.evidence_log import create_key


def register(sub: argparse._SubParsersAction) -> None:
    init = sub.add_parser("init", help="create the control record, the evidence key and DAGSTER_HOME")
    init.add_argument("--instance", choices=("sqlite", "postgres"), default="sqlite",
                      help="Dagster's run, event and schedule storage: sqlite files in DAGSTER_HOME "
                           "(default) or the Postgres server named by --instance-url")
    init.add_argument("--instance-url", help="postgresql://user@host:port/db for --instance postgres "
                                             "(default $BACKFILL_DAGSTER_PG_URL)")
    init.add_argument("--allowed-signers", help="the team's reviewed allowed_signers: approvals count only "
                                                "when checked against it (default: the first approval pins its file)")
    add_home(init)
    init.set_defaults(handler=cmd_init)


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
    signers = None
    if args.allowed_signers:
        from backfill_assets.signing.allowed_signers import AllowedSigners

        signers = AllowedSigners.load(args.allowed_signers)  # refused before anything is created
    with writing(args, create=True) as session:
        where = session.engine.describe()
        if signers is not None:
            from backfill_assets.cli.approvers_cmd import pin_and_say

            print(pin_and_say(session, signers))
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
