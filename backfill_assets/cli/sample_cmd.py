"""`backfill sample`: deterministic order events in the warehouse."""

from __future__ import annotations

import argparse
import datetime as dt

from backfill_assets.cli.common import add_home, warehouse_of
from backfill_assets.demo.sample import generate_orders, sample_owns_orders
from backfill_assets.errors import UsageError, WriteRefused


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sample = sub.add_parser("sample", help="write deterministic sample orders into the warehouse")
    sample.add_argument("--days", type=int, required=True)
    sample.add_argument("--rows-per-day", type=int, required=True)
    sample.add_argument("--seed", type=int, default=7)
    sample.add_argument("--start", default="2026-01-01", help="first day (YYYY-MM-DD)")
    sample.add_argument("--force", action="store_true",
                        help="write into an `orders` table sample did not create (its rows for those days are deleted)")
    add_home(sample)
    sample.set_defaults(handler=cmd_sample, keep_open=True)


def cmd_sample(args: argparse.Namespace) -> int:
    try:
        start = dt.date.fromisoformat(args.start)
    except ValueError:
        raise UsageError(f"--start {args.start!r} is not a date", fix="use YYYY-MM-DD") from None
    if not (1 <= args.days <= 10_000) or not (1 <= args.rows_per_day <= 10_000_000):
        raise UsageError("--days must be 1-10000 and --rows-per-day 1-10000000", fix="pass smaller counts")
    end = start + dt.timedelta(days=args.days - 1)
    if end > dt.datetime.now(dt.UTC).date():
        raise UsageError(f"the sample would end on {end}, in the future", fix="start earlier or generate fewer days")
    warehouse = warehouse_of(args)
    with warehouse.session() as session:
        if not args.force and not sample_owns_orders(session):
            raise WriteRefused(f"orders in {warehouse.engine.describe()} was not created by `backfill sample`; "
                               f"sample would delete its rows for {start}..{end}",
                               fix="point --home (or BACKFILL_WAREHOUSE_URL) at a scratch warehouse, or pass "
                                   "--force to replace those days")
        rows = generate_orders(session, start=start, days=args.days, rows_per_day=args.rows_per_day,
                               seed=args.seed)
    print(f"wrote {rows} orders for {start}..{end} into {warehouse.engine.describe()}")
    return 0
