# The plexus-worker image. Built by scripts/docker-images.sh from a small staged context
# (.plexus/docker/worker/): the release binaries plexus-worker and plexus (the CLI, for the health
# check). No libtorch: the worker does not link it. Subtask commands get what the base image has
# (sh, coreutils, awk, grep, sed, ...).
ARG BASE=debian:bookworm-slim
FROM ${BASE}
COPY bin/ /usr/local/bin/
ENV PLEXUS_COORDINATOR=http://coordinator:50051
RUN mkdir -p /var/lib/plexus-worker
VOLUME /var/lib/plexus-worker
EXPOSE 7001
HEALTHCHECK --interval=2s --timeout=5s --start-period=5s --retries=15 \
    CMD ["worker-health.sh"]
ENTRYPOINT ["worker-entrypoint.sh"]
