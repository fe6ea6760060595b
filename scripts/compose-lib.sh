# shellcheck shell=bash
# Shared by scripts/compose-*.sh (sourced, not run): finds the compose command and the settings.
#   COMPOSE_PROJECT_NAME  compose project (default plexus)
#   PLEXUS_PORT           host port of the coordinator (default 7070, on PLEXUS_BIND=127.0.0.1)
#   PLEXUS_HTTP_PORT      host port of its dashboard and /metrics (default 8265)
#   PLEXUS_WORKERS        number of workers (default 4)
#   PLEXUS_PROFILE        cargo profile whose binaries the images and the host CLI come from
#                         (release, default; debug reuses `make build`'s binaries)
#   PLEXUS_IMAGE_TAG      tag of the images (default latest; debug for PLEXUS_PROFILE=debug)
#   PLEXUS_HA=1           the `ha` profile: 3 etcd members, 3 coordinators on them (the settings
#                         of docker/ha.env, where the environment does not set them already);
#                         coordinator2/3 on host ports PLEXUS_PORT2/PLEXUS_PORT3 (7071, 7072)
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
export COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-plexus}
export PLEXUS_PORT=${PLEXUS_PORT:-7070}
export PLEXUS_HTTP_PORT=${PLEXUS_HTTP_PORT:-8265}
export PLEXUS_BIND=${PLEXUS_BIND:-127.0.0.1}
export PLEXUS_WORKERS=${PLEXUS_WORKERS:-4}
export PLEXUS_PROFILE=${PLEXUS_PROFILE:-release}
if [ "$PLEXUS_PROFILE" = release ]; then export PLEXUS_IMAGE_TAG=${PLEXUS_IMAGE_TAG:-latest}
else export PLEXUS_IMAGE_TAG=${PLEXUS_IMAGE_TAG:-$PLEXUS_PROFILE}; fi
DOCKER=${DOCKER:-docker}
PLEXUS_CLI=${PLEXUS_CLI:-target/$PLEXUS_PROFILE/plexus}
HOST=$PLEXUS_BIND
[ "$HOST" = 0.0.0.0 ] && HOST=127.0.0.1
PLEXUS_URL=https://$HOST:$PLEXUS_PORT

# Switches to the `ha` profile: the settings of docker/ha.env (where the environment does not
# set them already), and PLEXUS_URL listing all three coordinators, which it publishes on the
# host (coordinator2 and coordinator3 on PLEXUS_PORT2 and PLEXUS_PORT3).
use_ha_profile() {
  local key value
  while IFS='=' read -r key value; do
    case "$key" in ''|'#'*) continue ;; esac
    [ -n "${!key:-}" ] || export "$key=$value"
  done < docker/ha.env
  export PLEXUS_HA=1 PLEXUS_PORT2=${PLEXUS_PORT2:-7071} PLEXUS_PORT3=${PLEXUS_PORT3:-7072}
  PLEXUS_URL=https://$HOST:$PLEXUS_PORT,https://$HOST:$PLEXUS_PORT2,https://$HOST:$PLEXUS_PORT3
}
if [ "${PLEXUS_HA:-0}" = 1 ]; then use_ha_profile; fi
# Where the host CLI keeps this project's CA certificate and admin token (fetched_credentials).
PLEXUS_CRED_DIR=${PLEXUS_CRED_DIR:-.plexus/compose-$COMPOSE_PROJECT_NAME}

# `docker compose` (v2 plugin) where it exists, else `docker-compose` (v1); both read
# docker-compose.yml the same way here.
if $DOCKER compose version >/dev/null 2>&1; then
  COMPOSE=("$DOCKER" compose)
elif command -v docker-compose >/dev/null 2>&1; then
  COMPOSE=(docker-compose)
else
  COMPOSE=()
fi
compose() {
  [ ${#COMPOSE[@]} -gt 0 ] || { echo "neither 'docker compose' nor 'docker-compose' is installed" >&2; return 1; }
  "${COMPOSE[@]}" -p "$COMPOSE_PROJECT_NAME" -f docker-compose.yml "$@"
}

# Removes the project's containers, networks and volumes ($1: seconds a container gets to stop).
# docker-compose can fail transiently while containers are still going away (a removal already
# in progress, a network with an endpoint not yet released), so it tries three times; on the
# last failure it prints what compose said and returns non-zero.
compose_down() {
  local out try
  for try in 1 2 3; do
    if out=$(compose down --volumes --remove-orphans --timeout "${1:-2}" 2>&1); then return 0; fi
    sleep "$try"
  done
  printf 'compose down failed three times; it said:\n%s\n' "$out" >&2
  return 1
}

# The container id of the project's service $1 (first replica).
service_container() { compose ps -q "$1" 2>/dev/null | head -n1; }

# Copies the coordinator's CA certificate and first admin token out of its container into
# $PLEXUS_CRED_DIR (the token mode 0600) and exports PLEXUS_CA and PLEXUS_TOKEN_FILE for the host
# CLI. The coordinator writes both before it listens; waits up to $1 seconds for them.
fetch_credentials() {
  local deadline=$(( $(date +%s) + ${1:-60} ))
  mkdir -p "$PLEXUS_CRED_DIR"
  chmod 700 "$PLEXUS_CRED_DIR"
  while [ "$(date +%s)" -lt "$deadline" ]; do
    if compose exec -T coordinator cat /var/lib/plexus/ca.pem > "$PLEXUS_CRED_DIR/ca.pem.new" 2>/dev/null \
       && (umask 077; compose exec -T coordinator cat /var/lib/plexus/admin.token > "$PLEXUS_CRED_DIR/admin.token.new" 2>/dev/null) \
       && [ -s "$PLEXUS_CRED_DIR/ca.pem.new" ] && [ -s "$PLEXUS_CRED_DIR/admin.token.new" ]; then
      mv "$PLEXUS_CRED_DIR/ca.pem.new" "$PLEXUS_CRED_DIR/ca.pem"
      mv "$PLEXUS_CRED_DIR/admin.token.new" "$PLEXUS_CRED_DIR/admin.token"
      export PLEXUS_CA=$PWD/$PLEXUS_CRED_DIR/ca.pem PLEXUS_TOKEN_FILE=$PWD/$PLEXUS_CRED_DIR/admin.token
      return 0
    fi
    sleep 0.5
  done
  rm -f "$PLEXUS_CRED_DIR"/*.new
  echo "the coordinator container did not show its ca.pem and admin.token within ${1:-60} s" >&2
  return 1
}

# Waits up to $1 seconds until the coordinator answers and lists $2 live workers.
wait_workers() {
  local deadline=$(( $(date +%s) + $1 )) want=$2 alive=-1
  fetch_credentials "$1" || return 1
  while [ "$(date +%s)" -lt "$deadline" ]; do
    alive=$("$PLEXUS_CLI" --coordinator "$PLEXUS_URL" workers -o json 2>/dev/null \
            | python3 -c 'import json,sys; print(sum(1 for w in json.load(sys.stdin)["workers"] if w["alive"]))' 2>/dev/null) || alive=-1
    [ "$alive" = "$want" ] && return 0
    sleep 0.5
  done
  echo "the coordinator at $PLEXUS_URL lists $alive live workers, not $want, after $1 s" >&2
  return 1
}
