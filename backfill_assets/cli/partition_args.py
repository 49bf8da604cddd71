"""Naming partitions of a plan's window on the command line, one parser for `run` and `diff`:

- `--partition KEY`, repeatable: exactly one key each, as written (commas and dots allowed);
- `--partitions K1,K2,A..B`: keys and inclusive ranges, a range resolved against the plan's window
  in its partitioning's order;
- `--partitions-file FILE`: one key per line (a regular file of bounded size).

Given together, they name the union, in the window's order.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from backfill_assets.bounded import read_bounded
from backfill_assets.errors import UsageError, WindowError

MAX_FILE_BYTES = 4 * 1024 * 1024
_FIX = ("name keys inside the plan's window: --partitions K1,K2 or FIRST..LAST, --partition KEY (once per "
        "key; commas allowed), or --partitions-file FILE (one key per line)")


def add_partition_args(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument("--partition", action="append", metavar="KEY",
                        help=f"{verb} this one key (repeatable; a key may contain commas)")
    parser.add_argument("--partitions", metavar="KEYS",
                        help=f"{verb} these keys of the window: K1,K2 and ranges FIRST..LAST")
    parser.add_argument("--partitions-file", metavar="FILE", help=f"{verb} the keys in FILE, one a line")


def given(args: argparse.Namespace) -> bool:
    return bool(args.partition or args.partitions is not None or args.partitions_file)


def _refuse(what: Sequence[str], window: Sequence[str], plan_id: str) -> WindowError:
    # repr for a key with surrounding space or any unprintable character: a pasted line break
    # must not make the one-line refusal two lines
    shown = ", ".join(repr(k) if not k or k != k.strip() or not k.isprintable() else k
                      for k in what[:3]) or "(none)"
    more = f" (+{len(what) - 3} more)" if len(what) > 3 else ""
    return WindowError(f"partitions {shown}{more} are not in the window {window[0]}..{window[-1]} of plan "
                       f"{plan_id}", fix=_FIX)


def _resolve(item: str, position: dict[str, int], window: Sequence[str], plan_id: str) -> list[str]:
    """One item of --partitions: a key of the window, or FIRST..LAST between two of its keys."""
    if item in position:
        return [item]
    splits = [(item[:i], item[i + 2:]) for i in range(len(item)) if item.startswith("..", i)]
    ranges = [(a.strip(), b.strip()) for a, b in splits if a.strip() in position and b.strip() in position]
    if len(ranges) != 1:
        ends = [e.strip() for a, b in splits[:1] for e in (a, b) if e.strip() not in position]
        raise _refuse(ends or [item], window, plan_id)
    first, last = ranges[0]
    if position[first] > position[last]:
        raise WindowError(f"partitions {first}..{last}: {first} comes after {last} in plan {plan_id}'s window",
                          fix=f"write the range in order: {last}..{first}")
    return list(window[position[first]:position[last] + 1])


def chosen(args: argparse.Namespace, window: Sequence[str], plan_id: str) -> list[str] | None:
    """The keys named by the options, in the window's order; None when none was given."""
    if not given(args):
        return None
    position = {k: i for i, k in enumerate(window)}
    named: list[str] = []
    outside: list[str] = []
    for key in args.partition or []:
        (named if key in position else outside).append(key)
    if args.partitions is not None:
        # commas, or line breaks (keys pasted from a file: `--partitions "$(cat keys.txt)"`)
        for item in (i.strip() for i in args.partitions.replace("\r", "\n").replace("\n", ",").split(",")):
            if item:
                named.extend(_resolve(item, position, window, plan_id))
    if args.partitions_file:
        try:
            data = read_bounded(args.partitions_file, MAX_FILE_BYTES, "partitions file",
                                "pass a text file with one partition key a line")
            text = data.decode("utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read partitions file {args.partitions_file} ({exc.strerror})",
                             fix="pass a text file with one partition key a line") from None
        except UnicodeDecodeError as exc:
            raise UsageError(f"partitions file {args.partitions_file} is not UTF-8 (byte {exc.start})",
                             fix="save it as UTF-8 text, one partition key a line") from None
        for line in text.splitlines():
            key = line.strip()
            if key:
                (named if key in position else outside).append(key)
    if outside:
        raise _refuse(outside, window, plan_id)
    if not named:
        raise _refuse([], window, plan_id)
    return sorted(set(named), key=position.__getitem__)
