#!/usr/bin/env bash
# Makes the base image the Dockerfiles build on (`debian:bookworm-slim` by default) when the Docker
# engine does not have it. There is no image registry to pull it from here, so it is built locally:
# `debootstrap --variant=minbase` into a folder under .plexus/, trimmed like the official slim image
# (no docs, man pages or apt lists), then `docker import`ed under the tag. Idempotent: when the tag
# exists, or the engine can pull it, nothing is built.
#
#   PLEXUS_BASE_IMAGE     the tag to provide (default debian:bookworm-slim)
#   PLEXUS_DEBIAN_MIRROR  the mirror debootstrap uses (default: the first Debian URI in this
#                         machine's apt sources, else http://deb.debian.org/debian)
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${PLEXUS_BASE_IMAGE:-debian:bookworm-slim}
SUITE=bookworm
DOCKER=${DOCKER:-docker}

if $DOCKER image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "docker-base: $IMAGE is present"
  exit 0
fi
# A registry may answer on other machines: a pull is quicker than a bootstrap.
if timeout 60 $DOCKER pull "$IMAGE" >/dev/null 2>&1; then
  echo "docker-base: pulled $IMAGE"
  exit 0
fi

mirror() {
  if [ -n "${PLEXUS_DEBIAN_MIRROR:-}" ]; then echo "$PLEXUS_DEBIAN_MIRROR"; return; fi
  local m
  # deb822 sources (URIs: ...) and one-line sources (deb URI suite ...), Debian's main archive only.
  m=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
      | sed -n -e 's/^URIs:[[:space:]]*\([^[:space:]]*\/debian\)\/\{0,1\}[[:space:]]*$/\1/p' \
               -e 's/^deb[[:space:]]\{1,\}\(\[[^]]*\][[:space:]]\{1,\}\)\{0,1\}\([^[:space:]]*\/debian\)\/\{0,1\}[[:space:]].*/\2/p' \
      | head -n1)
  echo "${m:-http://deb.debian.org/debian}"
}

if ! command -v debootstrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "docker-base: installing debootstrap" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  else
    echo "docker-base: $IMAGE is missing and debootstrap is not installed (apt-get install debootstrap, as root)" >&2
    exit 1
  fi
fi
if [ "$(id -u)" != 0 ]; then
  echo "docker-base: debootstrap needs root to build $IMAGE" >&2
  exit 1
fi

MIRROR=$(mirror)
ROOT=.plexus/docker/rootfs-$SUITE
rm -rf "$ROOT"
mkdir -p "$ROOT"
trap 'rm -rf "$ROOT"' EXIT
echo "docker-base: debootstrap --variant=minbase $SUITE from $MIRROR (once; about a minute)" >&2
start=$(date +%s)
if ! debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" > .plexus/docker/debootstrap.log 2>&1; then
  tail -n 20 .plexus/docker/debootstrap.log >&2
  echo "docker-base: debootstrap failed (log: .plexus/docker/debootstrap.log)" >&2
  exit 1
fi
# Trim as the official -slim image does, and leave apt pointing at the mirror.
rm -rf "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/apt/archives/*.deb \
       "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* \
       "$ROOT"/var/log/*.log "$ROOT"/var/log/apt/* "$ROOT"/tmp/*
find "$ROOT"/usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'locale.alias' -exec rm -rf {} + 2>/dev/null || true
echo "deb $MIRROR $SUITE main" > "$ROOT"/etc/apt/sources.list
: > "$ROOT"/etc/hostname
: > "$ROOT"/etc/resolv.conf
tar --numeric-owner -C "$ROOT" -c . \
  | $DOCKER import --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      - "$IMAGE" >/dev/null
echo "docker-base: imported $IMAGE in $(( $(date +%s) - start )) s ($($DOCKER image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
