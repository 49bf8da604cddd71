"""Numeric settings read from the environment: the default when unset, one line when bad."""

from __future__ import annotations

import os

from backfill_assets.errors import UsageError


def whole_number(name: str, default: int, low: int, high: int, unit: str) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not (raw.isascii() and raw.isdigit()) or not low <= int(raw) <= high:
        raise UsageError(f"{name}={raw!r} is not a whole number of {unit} from {low} to {high}",
                         fix=f"set it to one, or unset it for {default}")
    return int(raw)


def number(name: str, default: float, low: float, high: float, unit: str) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:  # NaN fails too
        raise UsageError(f"{name}={raw!r} is not a number of {unit} from {low:g} to {high:g}",
                         fix=f"set it to one, or unset it for {default:g}")
    return value
