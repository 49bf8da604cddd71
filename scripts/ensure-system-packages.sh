#!/usr/bin/env bash
# Debian packages the test suite needs that pip cannot provide (replaces ensure-chromium.sh):
#   chromium        /usr/bin/chromium: the browser test drives Debian's Chromium (Playwright's own
#                   browser download cannot work here)
#   postgresql      initdb/pg_ctl/postgres: tests/pg_server.py starts throwaway servers
#   openssh-client  ssh-keygen: signature tests
# Idempotent: when everything is present it exits at once without calling apt. Otherwise, as root,
# it runs `apt-get update` once and installs only what is missing; as non-root it prints one line
# saying what to install and exits 1.
set -euo pipefail

missing=()

# chromium: same test as ensure-chromium.sh
[ -x /usr/bin/chromium ] || missing+=(chromium)

# postgresql: the server binaries tests/pg_server.py looks for (Debian's versioned bin dir, or PATH)
have_postgres=0
for bin in /usr/lib/postgresql/*/bin; do
  if [ -x "$bin/initdb" ] && [ -x "$bin/pg_ctl" ] && [ -x "$bin/postgres" ]; then
    have_postgres=1
    break
  fi
done
if [ "$have_postgres" -eq 0 ] && command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1 \
  && command -v postgres >/dev/null 2>&1; then
  have_postgres=1
fi
[ "$have_postgres" -eq 1 ] || missing+=(postgresql)

# openssh-client: ssh-keygen
command -v ssh-keygen >/dev/null 2>&1 || missing+=(openssh-client)

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-system-packages: missing ${missing[*]}; as root run: apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi

echo "ensure-system-packages: installing ${missing[*]} (once)"

# Debian's postgresql creates a `main` cluster and its postinst runs `invoke-rc.d postgresql start`
# under `set -e`: without systemd/init that start can fail and abort the whole install. A
# policy-rc.d that answers 101 ("action forbidden") makes invoke-rc.d skip the start and succeed.
# Docker's Debian images often ship one already; we only add ours (and remove it again) when absent.
policy=/usr/sbin/policy-rc.d
added_policy=0
cleanup() {
  if [ "$added_policy" -eq 1 ]; then
    rm -f "$policy"
  fi
}
trap cleanup EXIT
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# added by ensure-system-packages.sh for the duration of apt-get install\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  added_policy=1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# without recommends: chromium's (mesa, upower, a printer dialog's GTK stack) and postgresql's
# (sysstat) are not used headless and by throwaway servers; fonts-liberation (a recommend) is
# what screenshots render their text with
[[ " ${missing[*]} " == *" chromium "* ]] && missing+=(fonts-liberation)
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
