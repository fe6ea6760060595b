# The plexus-etcd image: Debian's etcd-server and etcd-client (etcdctl, for the health check) on
# the base image, for the etcd members of the compose cluster's `ha` profile. Built by
# scripts/docker-images.sh when PLEXUS_HA=1, from a staged context (.plexus/docker/etcd/) that
# holds only the entrypoint. The package's own service is never started: policy-rc.d forbids it
# during the install, and the container runs etcd-entrypoint.sh.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
RUN printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server etcd-client >/dev/null \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/* /usr/sbin/policy-rc.d
COPY bin/ /usr/local/bin/
ENV ETCDCTL_API=3
RUN mkdir -p /var/lib/etcd
VOLUME /var/lib/etcd
EXPOSE 2379 2380
# Healthy while this member serves a quorum read (the cluster has a leader).
HEALTHCHECK --interval=2s --timeout=5s --start-period=5s --retries=15 \
    CMD ["etcdctl", "--endpoints=http://127.0.0.1:2379", "endpoint", "health"]
ENTRYPOINT ["etcd-entrypoint.sh"]
