#!/usr/bin/env bash
# Installs Debian's etcd-server and etcd-client (etcdctl), if missing: the HA control plane's
# tests, `make ha-demo` and the stores part of `make bench-control` start their own etcd on
# loopback. The package's own service is not started (no etcd left listening on 2379).
# Idempotent; needs root (apt-get) only when something is missing.
set -euo pipefail

need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "deps-etcd: missing ${need[*]}; run as root to install them (the HA tests skip without etcd)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# Forbid service starts during the install (invoke-rc.d and deb-systemd-invoke ask policy-rc.d);
# one we made is removed again whatever happens, one that was there is left alone.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && made_policy=1
fi
cleanup() { [ "$made_policy" = 1 ] && rm -f "$policy"; true; }
trap cleanup EXIT
# Update the package lists only when the install fails without it (a fresh image has none).
apt-get install -y --no-install-recommends "${need[@]}" >/dev/null 2>&1 || {
    apt-get update -qq
    apt-get install -y --no-install-recommends "${need[@]}" >/dev/null
} || { echo "deps-etcd: apt-get install ${need[*]} failed" >&2; exit 1; }
# The package enables its service for the next boot, and it may have started anyway: stop it and
# disable it, as the tests run their own members on free ports.
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now etcd >/dev/null 2>&1 || { echo "deps-etcd: could not stop and disable the etcd service (systemctl disable --now etcd)" >&2; exit 1; }
elif [ -x /etc/init.d/etcd ] && /etc/init.d/etcd status >/dev/null 2>&1; then
    /etc/init.d/etcd stop >/dev/null 2>&1 || { echo "deps-etcd: could not stop the etcd service (/etc/init.d/etcd stop)" >&2; exit 1; }
fi
command -v etcd >/dev/null 2>&1 || { echo "deps-etcd: etcd is still not on PATH after installing ${need[*]}" >&2; exit 1; }
echo "deps-etcd: installed ${need[*]} ($(etcd --version | head -n1))"
