"""An event's JSON: Dagster's `serialize_value` against `backfill_assets.event_json.serialized`, side
by side on the events a prepared home's event log holds (its runs' materializations, gate results,
planned checks), interleaved rounds; every text compared with Dagster's.

    .venv/bin/python benchmarks/prepare_home.py /tmp/pre365 365 1995-01-01
    .venv/bin/python benchmarks/event_json.py /tmp/pre365/home/dagster/event_log/event_log.db [--rounds 5]

A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("event_log", help="a home's dagster/event_log/event_log.db")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--limit", type=int, default=20000, help="events read (the newest)")
    args = parser.parse_args()

    import dagster  # noqa: F401 - registers Dagster's serializable classes
    from dagster_shared.serdes import deserialize_value, serialize_value

    from backfill_assets.event_json import serialized

    with sqlite3.connect(f"file:{args.event_log}?mode=ro", uri=True) as con:
        texts = [t for (t,) in con.execute("SELECT event FROM event_logs ORDER BY id DESC LIMIT ?", [args.limit])]
    events = [deserialize_value(t) for t in texts]
    theirs, ours = [], []
    for _ in range(args.rounds):
        for name, fn, out in (("dagster", serialize_value, theirs), ("event_json", serialized, ours)):
            started = time.perf_counter()
            made = [fn(e) for e in events]
            out.append(time.perf_counter() - started)
            if made != texts:
                differ = sum(a != b for a, b in zip(made, texts, strict=True))
                print(f"{name}: {differ} text(s) differ from the stored ones", file=sys.stderr)
                return 1
    dagster_s, ours_s = statistics.median(theirs), statistics.median(ours)
    print(f"{len(events):,} events, every text identical; median of {args.rounds} interleaved rounds:")
    print(f"  serialize_value        {dagster_s:6.3f} s  ({dagster_s / len(events) * 1e6:5.1f} us an event)")
    print(f"  event_json.serialized  {ours_s:6.3f} s  ({ours_s / len(events) * 1e6:5.1f} us an event)")
    print(f"  ratio {ours_s / dagster_s:.2f} (event_json / Dagster)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
