"""A PostgreSQL session with one (empty) transaction, on a new connection and on one kept by
`kept_open`, on a throwaway server (tests/pg_server.py) holding the control schema: what every
decision's session costs before it reads anything (the control schema's check at the session's
start and at the transaction's).

    .venv/bin/python benchmarks/pg_sessions.py [--sessions 100] [--rounds 2]

A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backfill_assets.warehouse import engine_for, kept_open  # noqa: E402
from backfill_assets.warehouse.engine import Engine  # noqa: E402
from backfill_assets.warehouse.state_store import schema  # noqa: E402
from tests.pg_server import PostgresServer  # noqa: E402


def per_session_ms(engine: Engine, sessions: int) -> float:
    started = time.perf_counter()
    for _ in range(sessions):
        with engine.session() as session, session.transaction():
            pass
    return (time.perf_counter() - started) / sessions * 1000


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    with PostgresServer().start() as server:
        engine = engine_for(server.create_database("sessions"))
        with engine.session() as session, session.transaction():
            schema.create(session, "0.3")
        per_session_ms(engine, 10)  # the server's first connections
        for round_ in range(args.rounds):
            new = per_session_ms(engine, args.sessions)
            with kept_open():
                per_session_ms(engine, 1)
                kept = per_session_ms(engine, args.sessions)
            print(f"round {round_ + 1}: a session and transaction {new:.2f} ms on a new connection, "
                  f"{kept:.2f} ms on a kept one ({new / kept:.1f}x)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
