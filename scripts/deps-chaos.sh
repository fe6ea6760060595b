#!/usr/bin/env bash
# Installs what the chaos run's root-only faults need, if missing: iproute2 and util-linux's
# nsenter (the network partition: a worker in a network namespace whose veth link is cut),
# util-linux's losetup and mount and e2fsprogs' mkfs.ext4 (the slow disk: a data dir on an ext4
# loop device throttled through its blkio cgroup). Idempotent; needs root (apt-get) only when
# something is missing. Without them the chaos run leaves those faults out and its table says why.
set -euo pipefail

need=()
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
command -v losetup >/dev/null 2>&1 || need+=(mount)
command -v mkfs.ext4 >/dev/null 2>&1 || need+=(e2fsprogs)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "deps-chaos: missing ${need[*]}; run as root to install them" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Update the package lists only when the install fails without it (a fresh image has none).
apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1 || {
    apt-get update -qq
    apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
}
echo "deps-chaos: installed ${need[*]}"
