# Plexus — the two commands a new machine needs are `make demo` and `make test`.
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all torch deps build release demo test test-unit bench-control fmt clippy clean

all: build

# libtorch (torch==2.13.0 from PyPI) in a venv outside the clone, linked at .plexus/libtorch;
# idempotent, and only the first run on a machine downloads anything.
torch:
	bash scripts/setup-torch.sh

# System packages the rail rig needs (iproute2, iperf3); installs only what is missing. Without
# root it cannot install, and the tests that need the rig skip with a printed reason.
deps:
	@bash scripts/deps-rails.sh || echo "make deps: could not install the rail rig's packages; rig tests will skip"

build: torch
	$(CARGO) build --workspace --bins

release: torch
	$(CARGO) build --release --workspace --bins

# Build, start an embedded cluster (`plexus up`), run examples/fanout.toml, print its result, stop.
demo: release
	bash scripts/demo.sh

# Every test, unit and end-to-end. The end-to-end tests run the real binaries, so build them first.
test: build deps
	$(CARGO) test --workspace

test-unit: torch
	$(CARGO) test --workspace --lib

# Control-plane throughput: 10,000 no-op subtasks over 4 real worker processes.
bench-control: release
	$(CARGO) run --release -p plexus-bench --bin control-plane

fmt:
	$(CARGO) fmt --all

clippy:
	$(CARGO) clippy --workspace --all-targets

clean:
	$(CARGO) clean
