#!/usr/bin/env bash
# The browser test drives Debian's Chromium (Playwright's own browser download cannot work here).
# Idempotent: does nothing when /usr/bin/chromium is already installed.
set -euo pipefail
if [ -x /usr/bin/chromium ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-chromium: /usr/bin/chromium is missing; install Debian's chromium package as root" >&2
  exit 1
fi
echo "ensure-chromium: installing Debian's chromium (once)"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
