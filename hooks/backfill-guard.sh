#!/usr/bin/env bash
# Backfill guard hook: refuses to go on unless the replay plan is complete, approved and unchanged.
# Usage: hooks/backfill-guard.sh PLAN_FILE... [--home DIR]   (every plan in one run: see README)
# Exit codes are those of `backfill guard`: 0 allowed, 1 refused, 2 unreadable plan or misuse.
set -u
# a plan file first: a changed file named `-h` would print the help and exit 0
if [ "$#" -lt 1 ] || [ "${1#-}" != "$1" ]; then
  echo "usage: $0 PLAN_FILE... [--home DIR] (the first argument a plan file, not an option)" >&2
  exit 2
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if command -v backfill >/dev/null 2>&1; then
  exec backfill guard "$@"
elif [ -x "$here/.venv/bin/backfill" ]; then
  exec "$here/.venv/bin/backfill" guard "$@"
fi
echo "backfill-guard: the backfill command is not installed; run 'make test' or 'make demo' once" >&2
exit 2
