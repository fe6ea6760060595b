# The plexus-coordinator image. Built by scripts/docker-images.sh from a small staged context
# (.plexus/docker/coordinator/): the release binaries plexus-coordinator and plexus (the CLI, for
# the health check and `docker exec`), and lib/ with only the libtorch libraries the coordinator
# loads (what `ldd` resolves inside .plexus/libtorch), not the whole ~4.7 GB wheel.
ARG BASE=debian:bookworm-slim
FROM ${BASE}
COPY lib/ /opt/plexus/lib/
COPY bin/ /usr/local/bin/
# The CLI inside the container (health check, `docker exec … plexus`) talks TLS with the
# cluster CA and the first admin token, both in the data dir.
ENV LD_LIBRARY_PATH=/opt/plexus/lib \
    PLEXUS_COORDINATOR=https://127.0.0.1:50051 \
    PLEXUS_CA=/var/lib/plexus/ca.pem \
    PLEXUS_TOKEN_FILE=/var/lib/plexus/admin.token
RUN mkdir -p /var/lib/plexus
VOLUME /var/lib/plexus
EXPOSE 50051
HEALTHCHECK --interval=2s --timeout=5s --start-period=5s --retries=15 \
    CMD ["plexus", "workers"]
ENTRYPOINT ["coordinator-entrypoint.sh"]
