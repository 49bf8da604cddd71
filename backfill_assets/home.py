"""Where state lives: BACKFILL_HOME (the embedded warehouse, keys, logs) and DAGSTER_HOME.

Everything is read at call time, never at import.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from backfill_assets.errors import UsageError

WAREHOUSE_FILE = "warehouse.duckdb"
HOME_ENV = "BACKFILL_HOME"
WAREHOUSE_URL_ENV = "BACKFILL_WAREHOUSE_URL"
EVIDENCE_KEY_ENV = "BACKFILL_EVIDENCE_KEY_FILE"
EVIDENCE_HEADS_ENV = "BACKFILL_EVIDENCE_HEADS_FILE"
DUCKDB_URL = "duckdb:///"  # then the file's path: duckdb:////abs/x.duckdb (SQLAlchemy's convention)


def duckdb_file(url: str) -> str | None:
    """The path of the DuckDB file a warehouse URL names (as written), or None for another engine."""
    return url[len(DUCKDB_URL):] if url.startswith(DUCKDB_URL) else None


@dataclass(frozen=True)
class Home:
    root: Path
    # named by --home or BACKFILL_HOME; False: found by default, ./.backfill of the current folder
    named: bool = field(default=True, compare=False)

    @property
    def warehouse(self) -> Path:
        """The embedded DuckDB file (the default engine)."""
        return self.root / WAREHOUSE_FILE

    @property
    def warehouse_url(self) -> str:
        """$BACKFILL_WAREHOUSE_URL when set (e.g. postgresql://...), else the DuckDB file here."""
        return os.environ.get(WAREHOUSE_URL_ENV) or f"{DUCKDB_URL}{self.warehouse}"

    @property
    def dagster_home(self) -> Path:
        configured = os.environ.get("DAGSTER_HOME")
        if configured and not os.path.isabs(configured):  # Dagster's rule too; never a folder of the cwd
            raise UsageError(f"DAGSTER_HOME is {configured!r}, not an absolute path",
                             fix=f"unset it (this home's is {self.root / 'dagster'}) or export it as an absolute path")
        return Path(configured) if configured else self.root / "dagster"

    @property
    def evidence_key(self) -> Path:
        """The HMAC key of the evidence chain: kept outside the warehouse, mode 0600."""
        configured = os.environ.get(EVIDENCE_KEY_ENV)
        return Path(configured) if configured else self.root / "keys" / "evidence.key"

    @property
    def evidence_heads(self) -> Path:
        """Every chain head, appended after each commit: shows rows cut off the chain's end. Beside the
        key unless BACKFILL_EVIDENCE_HEADS_FILE says where (the key may sit on a read-only mount)."""
        configured = os.environ.get(EVIDENCE_HEADS_ENV)
        return Path(configured) if configured else self.evidence_key.parent / "evidence-heads.log"

    @property
    def log_file(self) -> Path:
        """Dagster's own log lines and stack traces from CLI runs (`--verbose` shows them)."""
        return self.root / "logs" / "backfill.log"


def resolve_home(explicit: str | os.PathLike[str] | None = None) -> Home:
    """--home wins, then $BACKFILL_HOME, then ./.backfill."""
    raw = explicit or os.environ.get(HOME_ENV) or ".backfill"
    try:
        return Home(Path(raw).expanduser().resolve(), named=bool(explicit or os.environ.get(HOME_ENV)))
    except (RuntimeError, OSError) as exc:  # `~nobody/x`: no such user's home
        raise UsageError(f"cannot use {raw!r} as the backfill home ({exc})",
                         fix="pass --home (or set BACKFILL_HOME) to an existing folder's path") from None
