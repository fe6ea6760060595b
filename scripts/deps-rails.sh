#!/usr/bin/env bash
# Installs what the multi-rail rig and the `rails` benchmark need, if missing: iproute2 (ip, tc)
# and iperf3 (the loopback reference). Idempotent; needs root (apt-get) only when something is
# missing.
set -euo pipefail

need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v tc >/dev/null 2>&1 || need+=(iproute2)
command -v iperf3 >/dev/null 2>&1 || need+=(iperf3)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "deps-rails: missing ${need[*]}; run as root to install them" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Update the package lists only when the install fails without it (a fresh image has none).
apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1 || {
    apt-get update -qq
    apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
}
echo "deps-rails: installed ${need[*]}"
