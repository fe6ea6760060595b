#!/bin/sh
# Entrypoint of the plexus-etcd image: one member of the compose cluster's etcd (the `ha` profile
# of docker-compose.yml), plain HTTP on the internal `store` network, which only the etcd members
# and the coordinators are on.
#
# Environment (all optional):
#   PLEXUS_ETCD_NAME     this member's name, also its host name on the network (default: hostname)
#   PLEXUS_ETCD_MEMBERS  every member's name (default "etcd1 etcd2 etcd3")
#   PLEXUS_ETCD_TOKEN    --initial-cluster-token (default plexus-compose)
# The data dir is /var/lib/etcd/data (a volume in compose). A member started again on it rejoins
# with what it had: etcd reads --initial-cluster* only while the data dir is empty.
# Arguments are passed on to etcd.
set -eu
NAME=${PLEXUS_ETCD_NAME:-$(hostname)}
CLUSTER=
for m in ${PLEXUS_ETCD_MEMBERS:-etcd1 etcd2 etcd3}; do CLUSTER="$CLUSTER${CLUSTER:+,}$m=http://$m:2380"; done
# As the test harness (e2e/src/etcd.rs) runs it: history compacted to the last 1000 revisions,
# a 4 GiB backend quota (etcd's default is 2 GiB).
set -- --name "$NAME" --data-dir /var/lib/etcd/data \
  --listen-client-urls http://0.0.0.0:2379 --advertise-client-urls "http://$NAME:2379" \
  --listen-peer-urls http://0.0.0.0:2380 --initial-advertise-peer-urls "http://$NAME:2380" \
  --initial-cluster "$CLUSTER" --initial-cluster-state new --initial-cluster-token "${PLEXUS_ETCD_TOKEN:-plexus-compose}" \
  --auto-compaction-mode revision --auto-compaction-retention 1000 --quota-backend-bytes 4294967296 \
  --logger zap --log-outputs stderr "$@"
echo "etcd-entrypoint: exec etcd $*" >&2
exec etcd "$@"
