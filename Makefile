# Plexus — the two commands a new machine needs are `make demo` and `make test`.
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all torch deps build release demo test test-unit bench-control bench-placement-live bench-chaos fmt clippy lint clean \
        images compose-up compose-down compose-test ha-demo demo-allreduce demo-fanout demo-sweep python-client

all: build

# libtorch (torch==2.13.0 from PyPI) in a venv outside the clone, linked at .plexus/libtorch;
# idempotent, and only the first run on a machine downloads anything.
torch:
	bash scripts/setup-torch.sh

# System packages the rail rig needs (iproute2, iperf3), the browser the dashboard's tests
# drive (chromium), etcd for the HA tests, and the chaos run's namespace and loop-device tools
# (iproute2, util-linux, mount, e2fsprogs); installs only what is missing. Without root it
# cannot install, and the tests that need them skip with a printed reason — unless
# PLEXUS_REQUIRE_ALL=1 (set by .ci/run), under which a skip fails its test.
deps:
	@bash scripts/deps-rails.sh || echo "make deps: could not install the rail rig's packages; rig tests will skip"
	@bash scripts/deps-browser.sh || echo "make deps: could not install chromium; the dashboard tests will skip"
	@bash scripts/deps-etcd.sh || echo "make deps: could not install etcd; the HA tests will skip"
	@bash scripts/deps-chaos.sh || echo "make deps: could not install the chaos run's tools; its partition and slow-disk faults will be left out"

build: torch
	$(CARGO) build --workspace --bins

release: torch
	$(CARGO) build --release --workspace --bins

# The main job, examples/ddp_train.toml (data-parallel training: a 4-member gang running DDP over
# the `plexus` torch.distributed backend, checkpointing, then an evaluation), on an embedded cluster
# of 4 workers x 2 rails: live progress, per-step time and loss, the evaluation, traffic per rail.
# Then stops.
demo: release
	bash scripts/demo.sh train

# The allreduce pipeline, examples/train.toml (shard -> 4 training replicas -> the built-in
# allreduce over the data plane -> evaluate), on 4 workers x 2 rails placed by the learned placer.
demo-allreduce: release
	bash scripts/demo.sh allreduce

# A learning-rate sweep whose code ships with the job (examples/sweep/: working_dir, sweep, a
# report of every replica's result) on 3 workers.
demo-sweep: release
	bash scripts/demo.sh sweep

# The smaller example: examples/fanout.toml on 3 workers.
demo-fanout: release
	bash scripts/demo.sh fanout

# An HA control plane on loopback: a 3-member etcd (installed by `make deps`), three coordinators,
# three workers; a job runs while the leader is killed with kill -9 and a standby takes over.
ha-demo: build deps
	bash scripts/ha-demo.sh

# Every test, unit and end-to-end. The end-to-end tests run the real binaries, so build them first.
# Then the Python client's tests (pytest, in a venv of their own) against a real `plexus up` of
# those binaries; then the compose cluster's test, when a Docker engine answers, on the debug
# binaries just built (images tagged :debug), so it costs no release build.
test: build deps
	$(CARGO) test --workspace
	bash scripts/python-client.sh test target/debug
	@if ! docker info >/dev/null 2>&1; then \
	  echo "make test: compose-test skipped: no Docker engine answers ('docker info' failed)"; \
	elif ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then \
	  echo "make test: compose-test skipped: neither 'docker compose' nor 'docker-compose' is installed"; \
	else \
	  $(MAKE) --no-print-directory compose-test PLEXUS_PROFILE=debug; \
	fi

# The Python client (python/) in a venv of its own (~/.cache/plexus/pyclient-venv), with pytest.
python-client:
	bash scripts/python-client.sh

test-unit: torch
	$(CARGO) test --workspace --lib

# Control-plane throughput: 10,000 no-op subtasks over 4 real worker processes, with TLS and
# --insecure side by side; then the deep queue: 1k, 10k and 100k one-core replicas (plain, and
# mixed with priority-10 gangs) on 4 workers x 16 cores. `--deep-only` / `--no-deep` for one part.
bench-control: release deps
	$(CARGO) run --release -p plexus-bench --bin control-plane

# Placers side by side on a real heterogeneous cluster on this machine: 4 workers held to 100/50/25/25 %
# of a core by cgroup quotas, two behind 200 Mbit/s rails on the rail rig (root), a seeded stream of
# fan-out/fan-in jobs; mean and p95 job completion time per placer (about 8 minutes).
bench-placement-live: release deps
	$(CARGO) run --release -p plexus-bench --bin placement-live

# The reliability benchmark: 3 minutes of a seeded stream of jobs (DAGs, gangs, an allreduce, MiB
# outputs) under seeded faults (kill -9 / SIGSTOP of workers and the coordinator, a full disk, a
# network partition of a worker, a slow disk; the last three need root), then
# the invariant table; exits 1 on a violation, naming the seed. CHAOS_ARGS passes more flags
# (`--ha` for etcd and 3 coordinators, `--seed N`, `--duration S`).
bench-chaos: release deps
	$(CARGO) run --release -p plexus-bench --bin chaos -- $(CHAOS_ARGS)

# Container images of the compose cluster (docker-compose.yml): the base image (debootstrapped and
# imported once when no registry has it), then plexus-coordinator and plexus-worker from this
# checkout's binaries; only what is missing or changed is built. PLEXUS_PROFILE=debug: debug binaries.
images: torch
	bash scripts/docker-images.sh

# The compose cluster: coordinator on 127.0.0.1:7070 (PLEXUS_PORT), 4 workers (PLEXUS_WORKERS).
compose-up: torch
	bash scripts/compose-up.sh

# Stops it and removes its containers, networks and volumes (not the images).
compose-down:
	bash scripts/compose-down.sh

# From nothing: up, fan-out and allreduce jobs from the host CLI, a worker container killed mid-job,
# the coordinator container restarted mid-job, then everything torn down, even on failure.
compose-test: torch
	bash scripts/compose-test.sh

fmt:
	$(CARGO) fmt --all

clippy: torch
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# The habits CI checks before the tests: formatted as rustfmt.toml says, and no clippy warning.
lint: torch
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
