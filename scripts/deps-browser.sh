#!/usr/bin/env bash
# Installs Debian's chromium, if missing: the dashboard's end-to-end tests load every page in a
# real headless browser. Idempotent; needs root (apt-get) only when it is missing.
set -euo pipefail

for b in chromium chromium-browser google-chrome; do
    command -v "$b" >/dev/null 2>&1 && exit 0
done
if [ "$(id -u)" -ne 0 ]; then
    echo "deps-browser: chromium is missing; run as root to install it (the dashboard tests skip without it)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 || {
    apt-get update -qq
    apt-get install -y --no-install-recommends chromium >/dev/null
}
echo "deps-browser: installed chromium"
