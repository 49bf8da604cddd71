"""A home ready for the proof of the TPC-H replay plan: what `backfill_peers.py` prepares before it
times anything (init, a plan-free history load, the plan signed by its owner and two approvers).

    .venv/bin/python benchmarks/prepare_home.py FOLDER DAYS START
    # e.g. FOLDER=/tmp/pre365 DAYS=365 START=1995-01-01; the home is FOLDER/home

Put another tree first on PYTHONPATH to prepare a home with its code (a before/after pair must not
share a home copied before 2026-12-06: such a copy's dagster.yaml named the original's storage).
Needs benchmarks/.data's TPC-H Parquet (made by backfill_peers.py's first run). A benchmark helper,
not a test.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import backfill_peers as peers  # noqa: E402 - the folder above is put on the path first


def main(argv: list[str]) -> int:
    folder, count, start = Path(argv[0]), int(argv[1]), dt.date.fromisoformat(argv[2])
    days = [(start + dt.timedelta(d)).isoformat() for d in range(count)]
    home = peers.prepare_project(folder, peers.base_db(peers.PROJECT_PY), days, 30)
    print({k: round(v.seconds, 2) for k, v in home.timings.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
