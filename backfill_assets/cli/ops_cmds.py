"""The execution commands, registered after the plan commands."""

from __future__ import annotations


def modules() -> list:
    return []
