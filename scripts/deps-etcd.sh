#!/usr/bin/env bash
# Installs Debian's etcd-server and etcd-client (etcdctl), if missing: the HA control plane's
# tests, `make ha-demo` and the stores part of `make bench-control` start their own etcd on
# loopback. The package's own service is not started (no etcd left listening on 2379).
# Idempotent; needs root (apt-get) only when etcd is missing.
set -euo pipefail

command -v etcd >/dev/null 2>&1 && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "deps-etcd: etcd is missing; run as root to install it (the HA tests skip without it)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Forbid service starts during the install; removed again whatever happens.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && made_policy=1
fi
cleanup() { [ "$made_policy" = 1 ] && rm -f "$policy"; true; }
trap cleanup EXIT
apt-get install -y --no-install-recommends etcd-server etcd-client >/dev/null 2>&1 || {
    apt-get update -qq
    apt-get install -y --no-install-recommends etcd-server etcd-client >/dev/null
}
echo "deps-etcd: installed $(etcd --version | head -n1)"
