#!/usr/bin/env bash
# Builds the images the compose cluster runs, from this checkout's own binaries:
#   plexus-coordinator:TAG  base + plexus-coordinator + plexus (CLI) + only the libtorch libraries
#                           the coordinator loads (per `ldd`), in /opt/plexus/lib
#   plexus-worker:TAG       base + plexus-worker + plexus (CLI); no libtorch
#   plexus-etcd:TAG         with PLEXUS_HA=1 only: base + Debian's etcd-server and etcd-client, for
#                           the etcd members of the compose cluster's `ha` profile
# Each image is built from a small staged context under .plexus/docker/ (never target/), and only
# when its inputs (staged files, Dockerfile, base image) changed since the image was built: the
# image carries a hash of them as the label org.plexus.inputs.
#
#   PLEXUS_PROFILE       cargo profile of the binaries: release (default) or debug
#   PLEXUS_SKIP_CARGO=1  use the binaries already in target/PROFILE, do not run cargo
#   PLEXUS_BASE_IMAGE    base image (default debian:bookworm-slim; made by scripts/docker-base.sh)
#   PLEXUS_IMAGE_TAG     tag of the images (default latest; debug for PLEXUS_PROFILE=debug)
#   PLEXUS_HA=1          plexus-etcd:TAG too (its build installs etcd from the base image's apt
#                        sources, so it needs a Debian mirror once)
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=${PLEXUS_PROFILE:-release}
BASE=${PLEXUS_BASE_IMAGE:-debian:bookworm-slim}
if [ "$PROFILE" = release ]; then TAG=${PLEXUS_IMAGE_TAG:-latest}; else TAG=${PLEXUS_IMAGE_TAG:-$PROFILE}; fi
DOCKER=${DOCKER:-docker}
CARGO=${CARGO:-cargo}
STAGE=.plexus/docker
BIN=target/$PROFILE
# The classic builder uses local images for FROM without asking a registry (there is none here).
export DOCKER_BUILDKIT=${DOCKER_BUILDKIT:-0}

die() { echo "docker-images: $*" >&2; exit 1; }

PLEXUS_BASE_IMAGE=$BASE bash scripts/docker-base.sh

if [ "${PLEXUS_SKIP_CARGO:-0}" != 1 ]; then
  flag=; [ "$PROFILE" = release ] && flag=--release
  [ "$PROFILE" = release ] || [ "$PROFILE" = debug ] || die "PLEXUS_PROFILE must be release or debug, not $PROFILE"
  bash scripts/setup-torch.sh >/dev/null
  echo "docker-images: cargo build $flag -p plexus-coordinator -p plexus-worker -p plexus-cli" >&2
  $CARGO build $flag -p plexus-coordinator -p plexus-worker -p plexus-cli
fi
for b in plexus-coordinator plexus-worker plexus; do
  [ -x "$BIN/$b" ] || die "$BIN/$b is missing (build it, or unset PLEXUS_SKIP_CARGO)"
done

# Puts binary $1 into directory $2, without debug info (a debug build carries hundreds of MB).
put_bin() {
  if command -v strip >/dev/null 2>&1; then strip --strip-debug -o "$2/$(basename "$1")" "$1"
  else cp "$1" "$2/"; fi
}
# Hard-links (or copies) file $1 to $2: staging the libtorch libraries costs nothing.
put_file() { ln -f "$1" "$2" 2>/dev/null || cp -L "$1" "$2"; }

# --- coordinator context -----------------------------------------------------------------------
C=$STAGE/coordinator
rm -rf "$C"; mkdir -p "$C/bin" "$C/lib"
put_bin "$BIN/plexus-coordinator" "$C/bin"
put_bin "$BIN/plexus" "$C/bin"
cp docker/coordinator-entrypoint.sh "$C/bin/"
# The libraries the dynamic loader resolves for the coordinator (transitively) that come from the
# torch wheel's site-packages (torch/lib: libtorch_cpu, libc10, libgomp; nvidia/*/lib: the CUDA
# runtime libtorch_cpu needs); everything else ldd lists is a system library of the base image
# (checked below). libtorch_cuda and the rest of the ~4.7 GB wheel are not loaded, so not copied.
TORCH=$(readlink -f .plexus/libtorch 2>/dev/null || true)
[ -n "$TORCH" ] && [ -d "$TORCH" ] || die ".plexus/libtorch is missing: run make torch"
TORCH=$(dirname "$TORCH")
libs=0
while read -r name path; do
  real=$(readlink -f "$path")
  case "$real" in
    "$TORCH"/*)
      put_file "$real" "$C/lib/$name"
      libs=$((libs + 1)) ;;
  esac
done < <(ldd "$BIN/plexus-coordinator" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }')
[ "$libs" -gt 0 ] || echo "docker-images: note: ldd found no libtorch library for plexus-coordinator" >&2

# --- worker context ----------------------------------------------------------------------------
W=$STAGE/worker
rm -rf "$W"; mkdir -p "$W/bin"
put_bin "$BIN/plexus-worker" "$W/bin"
put_bin "$BIN/plexus" "$W/bin"
cp docker/worker-entrypoint.sh docker/worker-health.sh "$W/bin/"
if ldd "$BIN/plexus-worker" | grep -q libtorch; then die "plexus-worker links libtorch; it must not"; fi

# --- etcd context (PLEXUS_HA=1) ----------------------------------------------------------------
HA=${PLEXUS_HA:-0}
E=$STAGE/etcd
if [ "$HA" = 1 ]; then
  rm -rf "$E"; mkdir -p "$E/bin"
  cp docker/etcd-entrypoint.sh "$E/bin/"
fi

# --- build what changed ------------------------------------------------------------------------
base_id=$($DOCKER image inspect -f '{{.Id}}' "$BASE")
inputs_hash() { # context dir, Dockerfile
  { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum); sha256sum < "$2"; echo "$base_id"; } \
    | sha256sum | cut -c1-32
}
build() { # image, context dir, Dockerfile
  local image=$1 ctx=$2 file=$3 hash have start
  hash=$(inputs_hash "$ctx" "$file")
  have=$($DOCKER image inspect -f '{{index .Config.Labels "org.plexus.inputs"}}' "$image" 2>/dev/null || true)
  if [ "$have" = "$hash" ]; then
    echo "docker-images: $image is up to date"
    return
  fi
  start=$(date +%s)
  local old; old=$($DOCKER image inspect -f '{{.Id}}' "$image" 2>/dev/null || true)
  local log=$STAGE/build-${image%%:*}.log
  if ! $DOCKER build --build-arg "BASE=$BASE" --label "org.plexus.inputs=$hash" -f "$file" -t "$image" "$ctx" > "$log" 2>&1; then
    tail -n 30 "$log" >&2
    die "docker build of $image failed (log: $log)"
  fi
  echo "docker-images: built $image in $(( $(date +%s) - start )) s"
  # The image it replaces, now untagged (kept only while a container still uses it).
  [ -z "$old" ] || [ "$old" = "$($DOCKER image inspect -f '{{.Id}}' "$image")" ] || $DOCKER rmi "$old" >/dev/null 2>&1 || true
}
build "plexus-coordinator:$TAG" "$C" docker/coordinator.Dockerfile
build "plexus-worker:$TAG" "$W" docker/worker.Dockerfile
[ "$HA" = 1 ] && build "plexus-etcd:$TAG" "$E" docker/etcd.Dockerfile

# Every library the coordinator needs resolves inside its image, and the worker has no libtorch.
missing=$($DOCKER run --rm --entrypoint ldd "plexus-coordinator:$TAG" /usr/local/bin/plexus-coordinator | grep 'not found' || true)
[ -z "$missing" ] || die "plexus-coordinator:$TAG cannot load: $missing"
missing=$($DOCKER run --rm --entrypoint ldd "plexus-worker:$TAG" /usr/local/bin/plexus-worker | grep 'not found' || true)
[ -z "$missing" ] || die "plexus-worker:$TAG cannot load: $missing"
if [ "$HA" = 1 ]; then
  $DOCKER run --rm --entrypoint etcd "plexus-etcd:$TAG" --version >/dev/null || die "plexus-etcd:$TAG cannot run etcd --version"
fi

size() { $DOCKER image inspect -f '{{.Size}}' "$1" | awk '{ printf "%.0f MB", $1 / 1e6 }'; }
etcd=; [ "$HA" = 1 ] && etcd=", plexus-etcd:$TAG $(size "plexus-etcd:$TAG")"
echo "docker-images: plexus-coordinator:$TAG $(size "plexus-coordinator:$TAG") ($libs libtorch libraries: $(ls "$C/lib" | tr '\n' ' ')), plexus-worker:$TAG $(size "plexus-worker:$TAG")$etcd, base $BASE $(size "$BASE")"
