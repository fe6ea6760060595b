#!/usr/bin/env bash
# `make compose-test`: the compose cluster end to end, from nothing, driven from the host CLI.
#   1. images      base image, binaries and images (only what is missing or changed)
#   2. up          coordinator + 4 workers on control, rail-a and rail-b; all registered, 2 rails each
#   3. security    the CLI without a token is refused (and says what to do); without the CA it
#                  cannot connect; the workers talk https to each other
#   3. fanout      examples/fanout.toml succeeds and sums to 32004000
#   4. allreduce   examples/allreduce.toml succeeds (only when that file exists)
#   5. kill-worker docker/jobs/naps.toml; a worker container running some of its subtasks is
#                  killed (SIGKILL); the job succeeds, and those subtasks ran again on other workers
#                  (attempt > 1); the container, started again, comes back with the same worker id
#   6. restart-coordinator  naps again; `compose restart coordinator` while it runs; the job finishes
#   7. ha-up       the `ha` profile (docker/ha.env) from nothing: 3 etcd members, 3 coordinators,
#                  the workers registered; the host CLI, given all three, sees `coordinator` lead
#   8. ha-failover naps; the leader's container killed; a standby leads, the job succeeds through
#                  the host CLI, and the killed coordinator comes back as a standby
#                  (PLEXUS_COMPOSE_HA=0 skips 7 and 8)
# Then (always, also after a failure or Ctrl-C) the project's containers, networks and volumes are
# removed. Exits non-zero naming the step that failed; prints each step's time.
#
# It runs as its own compose project (plexus-test) on a free host port, so a cluster started with
# `make compose-up` is left alone. Settings: PLEXUS_PROFILE (release), PLEXUS_SKIP_CARGO=1.
set -euo pipefail
export COMPOSE_PROJECT_NAME=${PLEXUS_TEST_PROJECT:-plexus-test}
export PLEXUS_WORKERS=4 PLEXUS_WORKER_CPUS=2 PLEXUS_BIND=127.0.0.1
# A port free on loopback now (the kernel's pick).
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
PLEXUS_PORT=$(free_port)
export PLEXUS_PORT
PLEXUS_HTTP_PORT=$(free_port)
export PLEXUS_HTTP_PORT
source "$(dirname "$0")/compose-lib.sh"

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
secs() { printf '%d.%d' $(( $1 / 1000 )) $(( $1 % 1000 / 100 )); }  # ms -> "12.3"
T0=$(now_ms)
STEP=setup
TIMES=()
STEP_START=$T0
step() { # ends the running step and starts step $1
  local now; now=$(now_ms)
  [ "$STEP" = setup ] || TIMES+=("$(printf '%-22s %7s s' "$STEP" "$(secs $((now - STEP_START)))")")
  STEP=$1; STEP_START=$now
  echo "== compose-test: $STEP"
}
FAIL_MSG=
fail() { FAIL_MSG=$*; echo "compose-test: FAILED in step '$STEP': $*" >&2; exit 1; }
cli() { "$PLEXUS_CLI" --coordinator "$PLEXUS_URL" "$@"; }

teardown() {
  local rc=$? now; now=$(now_ms)
  trap - EXIT INT TERM
  if [ "$rc" != 0 ] && [ ${#COMPOSE[@]} -gt 0 ]; then
    echo "-- compose-test: state at the failure (step '$STEP')" >&2
    compose ps >&2 2>&1 || true
    compose logs --no-color --tail 30 >&2 2>&1 || true
  fi
  [ "$STEP" = finished ] || TIMES+=("$(printf '%-22s %7s s%s' "$STEP" "$(secs $((now - STEP_START)))" "$([ "$rc" = 0 ] || echo ' (failed)')")")
  if [ ${#COMPOSE[@]} -gt 0 ]; then
    local t; t=$(now_ms)
    compose_down 2 \
      || echo "compose-test: teardown (compose down) failed; remove project $COMPOSE_PROJECT_NAME by hand" >&2
    TIMES+=("$(printf '%-22s %7s s' teardown "$(secs $(( $(now_ms) - t )))")")
  fi
  echo "-- compose-test timings:"
  printf '   %s\n' "${TIMES[@]}"
  printf '   %-22s %7s s\n' total "$(secs $(( $(now_ms) - T0 )))"
  if [ "$rc" = 0 ]; then echo "compose-test: PASSED"; else echo "compose-test: FAILED in step '$STEP'${FAIL_MSG:+: $FAIL_MSG}" >&2; fi
  exit "$rc"
}

# One run at a time on this machine (same project name, same images), whichever checkout it
# runs from: the lock is per machine and project, not per checkout.
LOCK=${TMPDIR:-/tmp}/plexus-compose-test-$COMPOSE_PROJECT_NAME.lock
exec 8> "$LOCK"
flock -w 1800 8 || fail "another compose-test holds $LOCK"
trap teardown EXIT
trap 'exit 130' INT TERM

[ ${#COMPOSE[@]} -gt 0 ] || fail "neither 'docker compose' nor 'docker-compose' is installed"
$DOCKER info >/dev/null 2>&1 || fail "no Docker engine answers (docker info)"
echo "compose-test: ${COMPOSE[*]}, project $COMPOSE_PROJECT_NAME, coordinator on $PLEXUS_URL"
# Leftovers of an earlier run that was killed before its teardown.
compose_down 2 2>/dev/null || true

# The job's JSON status, tolerating a coordinator that is restarting.
job_json() { cli status "$1" -o json 2>/dev/null; }
py() { python3 -c "$1" "${@:2}"; }
# Waits until job $1 ends (up to $2 s); prints its final state.
wait_job() {
  local deadline=$(( $(date +%s) + $2 )) state=
  while [ "$(date +%s)" -lt "$deadline" ]; do
    state=$(job_json "$1" | py 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null) || state=unreachable
    case "$state" in succeeded|failed|cancelled) echo "$state"; return 0 ;; esac
    sleep 0.5
  done
  echo "still-$state"
}
# Waits up to $2 s until job $1 has at least $3 subtasks running.
wait_running() {
  local deadline=$(( $(date +%s) + $2 )) n=0
  while [ "$(date +%s)" -lt "$deadline" ]; do
    n=$(job_json "$1" | py 'import json,sys; print(sum(s["state"] == "running" for s in json.load(sys.stdin)["subtasks"]))' 2>/dev/null) || n=0
    [ "$n" -ge "$3" ] && return 0
    sleep 0.3
  done
  fail "job $1 has $n subtasks running, not $3, after $2 s"
}
submit() { cli submit "$1" || fail "could not submit $1"; }
expect_success() { # job, timeout
  local state; state=$(wait_job "$1" "$2")
  [ "$state" = succeeded ] || { cli status "$1" --subtasks >&2 || true; fail "job $1 ended $state, not succeeded"; }
}

step images
bash scripts/docker-images.sh || fail "building the images failed"
[ -x "$PLEXUS_CLI" ] || fail "no host CLI at $PLEXUS_CLI"

step up
compose up -d --scale "worker=$PLEXUS_WORKERS" || fail "compose up failed"
wait_workers 90 "$PLEXUS_WORKERS" || fail "the workers did not all register"
cli workers -o json | py '
import json, sys
ws = json.load(sys.stdin)["workers"]
for w in ws:
    assert len(w["rails"]) == 2, "worker %s has rails %s, not two" % (w["worker_id"], w["rails"])
    print("  %s  %-14s peer %-24s rails %s" % (w["worker_id"], w["hostname"], w["peer_addr"], " ".join(w["rails"])))
rails = [r for w in ws for r in w["rails"]]
assert len(set(rails)) == len(rails), "rail addresses repeat: %s" % rails
' || fail "the workers do not each advertise two distinct rail addresses"

step security
CLI_ABS=$(realpath "$PLEXUS_CLI")
SCRATCH=$(mktemp -d)
out=$(cd "$SCRATCH" && env -u PLEXUS_TOKEN -u PLEXUS_TOKEN_FILE "$CLI_ABS" --coordinator "$PLEXUS_URL" workers 2>&1) \
  && fail "a call without a token succeeded: $out"
case "$out" in *"the coordinator requires a token"*) ;; *) fail "a call without a token was refused with: $out" ;; esac
out=$(cd "$SCRATCH" && env -u PLEXUS_CA "$CLI_ABS" --coordinator "$PLEXUS_URL" workers 2>&1) && fail "a call without the CA succeeded: $out"
rmdir "$SCRATCH"
cli workers -o json | py '
import json, sys
ws = json.load(sys.stdin)["workers"]
assert all(w["peer_addr"].startswith("https://") for w in ws), [w["peer_addr"] for w in ws]
' || fail "workers do not serve their PeerService over https"

step dashboard
HTTP_URL=http://127.0.0.1:$PLEXUS_HTTP_PORT
code=$(curl -s -o /dev/null -w '%{http_code}' "$HTTP_URL/metrics") || fail "the dashboard port $PLEXUS_HTTP_PORT does not answer"
[ "$code" = 401 ] || fail "/metrics without a token answered $code, not 401"
AUTH="Authorization: Bearer $(cat "$PLEXUS_TOKEN_FILE")"
metrics=$(curl -sf -H "$AUTH" "$HTTP_URL/metrics") || fail "/metrics with the admin token failed"
grep -q "^plexus_workers{state=\"alive\"} $PLEXUS_WORKERS\$" <<<"$metrics" || fail "/metrics does not count $PLEXUS_WORKERS alive workers"
page=$(curl -sf -H "$AUTH" "$HTTP_URL/workers") || fail "the dashboard's workers page failed"
[ "$(grep -o 'data-worker=' <<<"$page" | wc -l)" = "$PLEXUS_WORKERS" ] || fail "the dashboard's workers page does not list $PLEXUS_WORKERS workers"
echo "  dashboard and /metrics at $HTTP_URL (token needed)"

step fanout
JOB=$(submit examples/fanout.toml)
echo "  fanout: $JOB"
timeout 120 "$PLEXUS_CLI" --coordinator "$PLEXUS_URL" watch "$JOB" || fail "fanout job $JOB did not succeed"
SUM=$(cli logs "$JOB" sum | tr -d '[:space:]' | grep -o '32004000' || true)
[ "$SUM" = 32004000 ] || { cli logs "$JOB" sum >&2 || true; fail "fanout's sum is not 32004000"; }
echo "  fanout sum: $SUM"
# Bytes each rail carried so far, over all workers (inputs fetched over the data plane), as of
# the workers' next heartbeat.
sleep 1
cli workers -o json | py '
import json, sys
per = {}
for w in json.load(sys.stdin)["workers"]:
    for i, r in enumerate(w.get("rail_traffic", [])):
        per[i] = per.get(i, 0) + r["bytes_received"]
print("  bytes received per rail: " + ", ".join("%s %d" % (("rail-a", "rail-b")[i] if i < 2 else i, n) for i, n in sorted(per.items())))' || true

if [ -f examples/allreduce.toml ]; then
  step allreduce
  JOB=$(submit examples/allreduce.toml)
  echo "  allreduce: $JOB"
  timeout 300 "$PLEXUS_CLI" --coordinator "$PLEXUS_URL" watch "$JOB" || fail "allreduce job $JOB did not succeed"
else
  echo "== compose-test: allreduce skipped: examples/allreduce.toml does not exist"
fi

step kill-worker
JOB=$(submit docker/jobs/naps.toml)
echo "  naps: $JOB"
wait_running "$JOB" 60 8
# The worker running the most subtasks of the job, and the container it is in (its hostname).
read -r VICTIM RANKS < <(job_json "$JOB" | py '
import collections, json, sys
on = collections.defaultdict(list)
for s in json.load(sys.stdin)["subtasks"]:
    if s["state"] == "running": on[s["worker_id"]].append(str(s["rank"]))
w = max(on, key=lambda k: len(on[k]))
print(w, ",".join(on[w]))') || fail "cannot tell which worker runs the job's subtasks"
CONTAINER=$(cli workers -o json | py 'import json,sys; print(next(w["hostname"] for w in json.load(sys.stdin)["workers"] if w["worker_id"] == sys.argv[1]))' "$VICTIM") \
  || fail "cannot find the container of worker $VICTIM"
echo "  killing container $CONTAINER (worker $VICTIM, running nap ranks $RANKS)"
$DOCKER kill "$CONTAINER" >/dev/null || fail "docker kill $CONTAINER failed"
expect_success "$JOB" 120
job_json "$JOB" | py '
import json, sys
victim, ranks = sys.argv[1], set(int(r) for r in sys.argv[2].split(","))
for s in json.load(sys.stdin)["subtasks"]:
    if s["task"] == "nap" and s["rank"] in ranks:
        assert s["state"] == "succeeded" and s["attempt"] > 1 and s["worker_id"] != victim, \
            "nap rank %d: state %s attempt %d on %s (killed: %s)" % (s["rank"], s["state"], s["attempt"], s["worker_id"], victim)
        print("  nap rank %d: rerun as attempt %d on %s" % (s["rank"], s["attempt"], s["worker_id"]))
' "$VICTIM" "$RANKS" || fail "the killed worker's subtasks were not rerun elsewhere"
cli workers -o json | py 'import json,sys; w = [w for w in json.load(sys.stdin)["workers"] if w["worker_id"] == sys.argv[1]]; sys.exit(0 if w and not w[0]["alive"] else 1)' "$VICTIM" \
  || fail "the coordinator does not list the killed worker $VICTIM as lost"
# Started again, the container finds its data directory in the volume: same worker id.
$DOCKER start "$CONTAINER" >/dev/null || fail "docker start $CONTAINER failed"
wait_workers 60 "$PLEXUS_WORKERS" || fail "the restarted worker container did not register again"
cli workers -o json | py 'import json,sys; sys.exit(0 if any(w["worker_id"] == sys.argv[1] and w["alive"] for w in json.load(sys.stdin)["workers"]) else 1)' "$VICTIM" \
  || fail "container $CONTAINER came back with another worker id than $VICTIM"
echo "  container $CONTAINER is back as worker $VICTIM"

step restart-coordinator
JOB=$(submit docker/jobs/naps.toml)
echo "  naps: $JOB"
wait_running "$JOB" 60 8
C=$(service_container coordinator)
STARTED=$($DOCKER inspect -f '{{.State.StartedAt}}' "$C")
echo "  restarting the coordinator container ${C:0:12}"
compose restart coordinator || fail "compose restart coordinator failed"
BACK=$(now_ms)
[ "$($DOCKER inspect -f '{{.State.StartedAt}}' "$C")" != "$STARTED" ] || fail "the coordinator container was not restarted"
expect_success "$JOB" 120
job_json "$JOB" | py 'import json,sys; f = json.load(sys.stdin)["finished_at_ms"]; sys.exit(0 if f and f > int(sys.argv[1]) else 1)' "$BACK" \
  || fail "job $JOB had finished before the coordinator restart, so the restart was not mid-job"
wait_workers 30 "$PLEXUS_WORKERS" || fail "not every worker came back after the coordinator restart"
job_json "$JOB" | py '
import json, sys
j = json.load(sys.stdin)
print("  %s succeeded: %d/%d subtasks, attempts %s" % (j["job_id"], j["succeeded_subtasks"], j["total_subtasks"], sorted(s["attempt"] for s in j["subtasks"])))'
cli status

if [ "${PLEXUS_COMPOSE_HA:-1}" = 1 ]; then
step ha-up
# The ha profile, from nothing: the plain cluster's state is in sled, so it goes first.
compose_down 2 || fail "compose down before the ha profile failed"
PLEXUS_PORT2=$(free_port) PLEXUS_PORT3=$(free_port)
use_ha_profile
PLEXUS_SKIP_CARGO=1 bash scripts/docker-images.sh || fail "building the images (plexus-etcd too) failed"
compose up -d --scale "worker=$PLEXUS_WORKERS" || fail "compose up of the ha profile failed"
wait_workers 120 "$PLEXUS_WORKERS" || fail "the workers did not all register with the ha control plane"
# coordinators_json: "leader-url standby-count" as the host CLI (given all three) sees it.
leader_of() { cli coordinators -o json 2>/dev/null | py '
import json, sys
cs = json.load(sys.stdin)["coordinators"]
lead = [c["url"] for c in cs if c["leader"]]
print(lead[0] if lead else "-", len(cs))' 2>/dev/null || echo "- 0"; }
read -r LEADER N < <(leader_of)
[ "$LEADER" = https://coordinator:50051 ] && [ "$N" = 3 ] || fail "expected 3 coordinators led by https://coordinator:50051, saw leader $LEADER of $N"
echo "  3 etcd members, 3 coordinators; $LEADER leads"

step ha-failover
JOB=$(submit docker/jobs/naps.toml)
echo "  naps: $JOB"
wait_running "$JOB" 60 8
C=$(service_container coordinator)
echo "  killing the leader's container ${C:0:12} (coordinator)"
$DOCKER kill "$C" >/dev/null || fail "docker kill of the coordinator container failed"
KILLED=$(now_ms)
NEW=-
for _ in $(seq 1 120); do
  read -r NEW _ < <(leader_of)
  [ "$NEW" != - ] && [ "$NEW" != https://coordinator:50051 ] && break
  sleep 0.25
done
case "$NEW" in https://coordinator[23]:50051) ;; *) fail "no standby leads 30 s after the leader was killed (leader: $NEW)" ;; esac
echo "  $NEW leads $(secs $(( $(now_ms) - KILLED ))) s after the kill (lease TTL ${PLEXUS_LEASE_TTL:-5s})"
# The host CLI, given all three, reaches the new leader (its advertised name only resolves inside).
expect_success "$JOB" 180
job_json "$JOB" | py '
import json, sys
j = json.load(sys.stdin)
print("  %s succeeded across the failover: %d/%d subtasks" % (j["job_id"], j["succeeded_subtasks"], j["total_subtasks"]))'
$DOCKER start "$C" >/dev/null || fail "docker start of the coordinator container failed"
for _ in $(seq 1 60); do
  read -r L N < <(leader_of)
  [ "$N" = 3 ] && break
  sleep 0.5
done
[ "$N" = 3 ] && [ "$L" = "$NEW" ] || fail "after its restart, expected 3 coordinators led by $NEW; saw $L of $N"
echo "  coordinator is back as a standby; $NEW still leads"
fi

step finished
