"""Connections a process keeps open between its sessions while `kept_open` lasts: the scope both
engines share (how deep it is nested, whether `release_kept` ended it early). What each keeps, and
why, is its own (`duckdb_engine._Kept`: the loaded database and its lock; `postgres_engine._Kept`:
a connection and its server process's caches)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class Kept:
    """The scope; `take_all` hands over this process's kept connections, no longer kept, for the
    caller to close (a forked child's are its parent's: never handed over, never closed)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.released = False  # `release` was called: none kept until the outermost use ends

    @property
    def keeping(self) -> bool:
        """Whether a session ending now keeps its connection (call it holding `lock`)."""
        return bool(self.depth) and not self.released

    def take_all(self) -> list[Any]:
        raise NotImplementedError


def release(kept: Kept) -> None:
    """Close the kept connections now, and keep none until the outermost scope ends: before a wait
    on anything outside the warehouse."""
    with kept.lock:
        closing = kept.take_all()
        kept.released = bool(kept.depth)
    for con in closing:
        con.close()


@contextmanager
def scope(kept: Kept) -> Iterator[None]:
    """Connections kept meanwhile; nested uses end with the outermost, which closes them."""
    with kept.lock:
        kept.depth += 1
    try:
        yield
    finally:
        with kept.lock:
            kept.depth -= 1
            closing = [] if kept.depth else kept.take_all()
            if not kept.depth:
                kept.released = False
        for con in closing:
            con.close()
