"""Reading a file a user names, never more than it could sensibly hold (`/dev/zero` is a file too)."""

from __future__ import annotations

from pathlib import Path

from backfill_assets.errors import UsageError


def read_bounded(path: str | Path, limit: int, what: str, fix: str) -> bytes:
    """The file's bytes, or a one-line UsageError once it passes `limit`; OSError is the caller's."""
    with Path(path).open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise UsageError(f"{what} {path} is larger than {limit:,} bytes", fix=fix)
    return data
