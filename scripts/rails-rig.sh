#!/usr/bin/env bash
# A multi-rail test rig made of network namespaces, veth pairs and bridges, shaped with tc.
#
#   rails-rig.sh up --hosts N --rails "2gbit:1ms,500mbit" [--mtu 9000]
#   rails-rig.sh set-rate HOST RAIL RATE     # e.g. set-rate 0 0 500mbit, while traffic flows
#   rails-rig.sh cut HOST RAIL               # take the rail's link down (both directions)
#   rails-rig.sh restore HOST RAIL
#   rails-rig.sh addr HOST RAIL              # prints the address, e.g. 10.77.1.2
#   rails-rig.sh exec HOST CMD...            # runs CMD in the host's namespace
#   rails-rig.sh status
#   rails-rig.sh down                        # removes everything `up` made; safe to repeat
#
# Topology: host 0 is the root namespace (so a test or benchmark process reaches the rig
# without entering a namespace); hosts 1..N-1 are namespaces plx-h1..plx-hN-1. Each rail is its
# own switch: a bridge plx-br<R> inside the namespace plx-sw, with one veth pair per host
# (host side plx<H>r<R>, switch side p<H>r<R>), subnet 10.77.<R>.0/24, host H at
# 10.77.<R>.<H+1>. Every veth end is shaped on egress (token bucket at the rail's rate), so a
# rail is limited in both directions, as a NIC is. A delay (":1ms") is added with netem where
# the kernel has it; where it does not, the rig says so and runs without delay.
#
# Everything it creates is named plx-*, plx<H>r<R> or p<H>r<R>, so `down` removes only its own.
# Run as root. Idempotent: `up` first takes down what a previous `up` left.
set -euo pipefail

SW=plx-sw
STATE=/run/plexus-rails-rig

die() { echo "rails-rig: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces and tc)"
command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1 \
    || bash "$(dirname "$0")/deps-rails.sh"

ns_of() { [ "$1" -eq 0 ] && echo "" || echo "plx-h$1"; }
# Runs a command in host $1's namespace (root namespace for host 0).
in_host() {
    local h=$1; shift
    if [ "$h" -eq 0 ]; then "$@"; else ip netns exec "plx-h$h" "$@"; fi
}
in_sw() { ip netns exec "$SW" "$@"; }
addr() { echo "10.77.$2.$(($1 + 1))"; }

# tc rate ("2gbit", "500mbit", "100kbit", "1000000bit") → bits/s.
rate_bits() {
    local r=${1,,}
    case "$r" in
        *gbit) echo $(( ${r%gbit} * 1000000000 )) ;;
        *mbit) echo $(( ${r%mbit} * 1000000 )) ;;
        *kbit) echo $(( ${r%kbit} * 1000 )) ;;
        *bit) echo "${r%bit}" ;;
        *) die "rate '$1' must end in gbit, mbit, kbit or bit" ;;
    esac
}

have_netem() {
    # Probe once on a throwaway dummy-free device: the switch namespace's loopback.
    in_sw tc qdisc add dev lo root handle 9: netem delay 1ms >/dev/null 2>&1 || return 1
    in_sw tc qdisc del dev lo root >/dev/null 2>&1 || true
}

# Token bucket for rate $1 (tc syntax): the bucket holds 2 ms of traffic (at least 64 KiB, so
# a 64 KiB GSO packet always fits) and the queue at most 20 ms, so the rail's rate is exact over
# any window longer than a few ms and queueing delay stays bounded.
tbf_args() {
    local bits burst
    bits=$(rate_bits "$1")
    burst=$(( bits / 8 / 500 ))
    [ "$burst" -lt 65536 ] && burst=65536
    echo "rate $1 burst $burst latency 20ms"
}

# shape RUNNER DEV RATE DELAY — RUNNER is in_host H or in_sw.
shape() {
    local dev=$3 rate=$4 delay=$5
    local -a run=("$1")
    [ "$1" = in_host ] && run=(in_host "$2")
    "${run[@]}" tc qdisc del dev "$dev" root >/dev/null 2>&1 || true
    if [ -n "$delay" ] && [ "$NETEM" = 1 ]; then
        "${run[@]}" tc qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000
        # shellcheck disable=SC2046
        "${run[@]}" tc qdisc add dev "$dev" parent 1:1 handle 10: tbf $(tbf_args "$rate")
    else
        # shellcheck disable=SC2046
        "${run[@]}" tc qdisc add dev "$dev" root handle 10: tbf $(tbf_args "$rate")
    fi
}

set_rate() {
    local runner=$1 h=$2 dev=$3 rate=$4
    local -a run=("$runner")
    [ "$runner" = in_host ] && run=(in_host "$h")
    if "${run[@]}" tc qdisc show dev "$dev" | grep -q "netem"; then
        # shellcheck disable=SC2046
        "${run[@]}" tc qdisc change dev "$dev" parent 1:1 handle 10: tbf $(tbf_args "$rate")
    else
        # shellcheck disable=SC2046
        "${run[@]}" tc qdisc change dev "$dev" root handle 10: tbf $(tbf_args "$rate")
    fi
}

cmd_down() {
    # Host-0 interfaces live in the root namespace: delete ours by name (deleting one end of a
    # veth pair deletes both).
    for dev in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^plx[0-9]+r[0-9]+$' || true); do
        ip link del "$dev" 2>/dev/null || true
    done
    for ns in $(ip netns list | awk '{print $1}' | grep -E '^plx-(h[0-9]+|sw)$' || true); do
        ip netns del "$ns" 2>/dev/null || true
    done
    rm -f "$STATE"
}

cmd_up() {
    local hosts=2 rails="1gbit" mtu=9000
    while [ $# -gt 0 ]; do
        case "$1" in
            --hosts) hosts=$2; shift 2 ;;
            --rails) rails=$2; shift 2 ;;
            --mtu) mtu=$2; shift 2 ;;
            *) die "unknown option '$1' (up --hosts N --rails RATE[:DELAY],... [--mtu M])" ;;
        esac
    done
    [[ "$hosts" =~ ^[0-9]+$ ]] && [ "$hosts" -ge 2 ] && [ "$hosts" -le 250 ] || die "--hosts must be 2..250"
    if ip -4 route show | grep -q '^10\.77\.' && ! ip -o link show | grep -qE ' plx[0-9]+r[0-9]+'; then
        die "10.77.0.0/16 is already routed on this machine by something else; refusing to use it"
    fi
    cmd_down
    IFS=',' read -r -a specs <<<"$rails"
    ip netns add "$SW"
    in_sw ip link set lo up
    NETEM=0
    local want_delay=0
    for s in "${specs[@]}"; do [[ "$s" == *:* ]] && want_delay=1; done
    if [ "$want_delay" = 1 ]; then
        if have_netem; then NETEM=1; else
            echo "rails-rig: warning: this kernel has no sch_netem; rail delays are ignored (rates still apply)" >&2
        fi
    fi
    for h in $(seq 1 $((hosts - 1))); do
        ip netns add "plx-h$h"
        in_host "$h" ip link set lo up
    done
    local r=0
    for s in "${specs[@]}"; do
        local rate=${s%%:*} delay=""
        [[ "$s" == *:* ]] && delay=${s#*:}
        rate_bits "$rate" >/dev/null
        in_sw ip link add name "plx-br$r" type bridge
        in_sw ip link set "plx-br$r" mtu "$mtu" up
        for h in $(seq 0 $((hosts - 1))); do
            local hd="plx${h}r${r}" sd="p${h}r${r}"
            ip link add name "$hd" mtu "$mtu" type veth peer name "$sd" mtu "$mtu"
            ip link set "$sd" netns "$SW"
            [ "$h" -ne 0 ] && ip link set "$hd" netns "plx-h$h"
            in_sw ip link set "$sd" master "plx-br$r" up
            in_host "$h" ip addr add "$(addr "$h" "$r")/24" dev "$hd"
            in_host "$h" ip link set "$hd" up
            shape in_host "$h" "$hd" "$rate" "$delay"
            shape in_sw 0 "$sd" "$rate" "$delay"
        done
        r=$((r + 1))
    done
    echo "hosts=$hosts rails=$rails mtu=$mtu netem=$NETEM" >"$STATE"
    echo "rails-rig: up: $hosts hosts × $r rails ($rails); host H rail R = 10.77.R.(H+1)"
}

check_host_rail() {
    [ -f "$STATE" ] || die "the rig is not up"
    [[ "$1" =~ ^[0-9]+$ && "$2" =~ ^[0-9]+$ ]] || die "HOST and RAIL are numbers"
    in_host "$1" ip link show "plx$1r$2" >/dev/null 2>&1 || die "no rail $2 on host $1"
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
    up) cmd_up "$@" ;;
    down) cmd_down; echo "rails-rig: down" ;;
    set-rate)
        [ $# -eq 3 ] || die "usage: set-rate HOST RAIL RATE"
        check_host_rail "$1" "$2"
        rate_bits "$3" >/dev/null
        set_rate in_host "$1" "plx$1r$2" "$3"
        set_rate in_sw 0 "p$1r$2" "$3"
        ;;
    cut)
        [ $# -eq 2 ] || die "usage: cut HOST RAIL"
        check_host_rail "$1" "$2"
        in_sw ip link set "p$1r$2" down
        in_host "$1" ip link set "plx$1r$2" down
        ;;
    restore)
        [ $# -eq 2 ] || die "usage: restore HOST RAIL"
        check_host_rail "$1" "$2"
        in_host "$1" ip link set "plx$1r$2" up
        in_sw ip link set "p$1r$2" up
        in_host "$1" ip addr replace "$(addr "$1" "$2")/24" dev "plx$1r$2"
        ;;
    addr)
        [ $# -eq 2 ] || die "usage: addr HOST RAIL"
        addr "$1" "$2"
        ;;
    exec)
        [ $# -ge 2 ] || die "usage: exec HOST CMD..."
        h=$1; shift
        in_host "$h" "$@"
        ;;
    status)
        if [ ! -f "$STATE" ]; then echo "rails-rig: down"; exit 0; fi
        cat "$STATE"
        for ns in "" $(ip netns list | awk '{print $1}' | grep -E '^plx-h[0-9]+$' | sort -V); do
            h=0; [ -n "$ns" ] && h=${ns#plx-h}
            for dev in $(in_host "$h" ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^plx${h}r[0-9]+$" | sort -V); do
                state=$(in_host "$h" cat "/sys/class/net/$dev/operstate")
                q=$(in_host "$h" tc qdisc show dev "$dev" | grep -o 'rate [^ ]*' | head -1)
                echo "host $h $dev $(in_host "$h" ip -4 -o addr show dev "$dev" | awk '{print $4}') $state $q"
            done
        done
        ;;
    *) die "usage: rails-rig.sh up|down|set-rate|cut|restore|addr|exec|status (see the header)" ;;
esac
