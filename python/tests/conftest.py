"""The real cluster the client is tested against: ``plexus up`` with three workers, started once
per session in a temporary directory (its cwd, so its state is in ``DIR/.plexus``), and stopped
at the end whatever happened (SIGTERM, which ``plexus up`` turns into stopping its children;
SIGKILL after a grace period, and the children then get SIGTERM from the kernel).

The binaries come from ``$PLEXUS_BIN_DIR``, else the repository's ``target/debug``.
"""

from __future__ import annotations

import ctypes
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

# Set before grpc is imported (by plexus, below). The fixtures start coordinators with
# `preexec_fn` (a plain fork, so pthread_atfork handlers run); grpcio >= 1.81 then restarts its
# epoll poller in the child, which dies on the descriptors subprocess closes before exec
# (grpc/grpc#43055): a coordinator that never starts, seen once in CI. Without fork support
# gRPC leaves the child alone.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

import plexus  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
WORKERS = 3
#: Cores each worker offers: more than the machine has, so that the tests' short jobs never
#: queue behind each other (they sleep or write a little; none is CPU-bound).
CPUS = 4
#: `plexus up` waits up to 30 s for the coordinator and 30 s for the workers; on a loaded
#: machine with debug binaries, give it all of that and some.
UP_TIMEOUT = 90.0
STOP_GRACE = 20.0

_PLEXUS_VARS = ("PLEXUS_COORDINATOR", "PLEXUS_CA", "PLEXUS_TOKEN", "PLEXUS_TOKEN_FILE", "PLEXUS_CONTEXT", "PLEXUS_CONFIG_DIR")


def bin_dir() -> Path:
    return Path(os.environ.get("PLEXUS_BIN_DIR") or REPO / "target" / "debug")


@dataclass(frozen=True)
class Cluster:
    #: The directory `plexus up` runs in; its state is in `home/.plexus`.
    home: Path
    url: str
    ca: Path
    token_file: Path
    logs: Path

    def client(self) -> plexus.Client:
        return plexus.Client(self.url, ca=self.ca, token_file=self.token_file)

    def describe(self) -> str:
        """The logs, for a failure message."""
        parts = []
        for log in sorted(self.logs.glob("*.log")):
            text = log.read_text(errors="replace")
            parts.append(f"--- {log.name} (last 3000 characters)\n{text[-3000:]}")
        return "\n".join(parts)


# Looked up before any fork: the child (which may be forked while gRPC's threads run) then only
# makes the one system call.
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the test process dies, however it dies."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    bins = bin_dir()
    missing = [n for n in ("plexus", "plexus-coordinator", "plexus-worker") if not (bins / n).is_file()]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not found in {bins}: build them with `cargo build --bins`, or point "
            "PLEXUS_BIN_DIR at a directory that has them"
        )
    home = tmp_path_factory.mktemp("cluster")
    env = {k: v for k, v in os.environ.items() if k not in _PLEXUS_VARS}
    # The cluster's context goes to a folder of its own, not the user's.
    env["PLEXUS_CONFIG_DIR"] = str(home / "config")
    out_path, err_path = home / "up.out", home / "up.err"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        up = subprocess.Popen(
            [str(bins / "plexus"), "up", "--workers", str(WORKERS), "--port", "0", "--cpus", str(CPUS)],
            cwd=home,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    try:
        exports = _wait_until_up(up, out_path, err_path)
        yield Cluster(
            home=home,
            url=exports["PLEXUS_COORDINATOR"],
            ca=Path(exports["PLEXUS_CA"]),
            token_file=Path(exports["PLEXUS_TOKEN_FILE"]),
            logs=home / ".plexus" / "logs",
        )
    finally:
        _stop(up)


def _wait_until_up(up: subprocess.Popen, out_path: Path, err_path: Path) -> dict:
    """The `export NAME=VALUE` lines `plexus up` prints once the coordinator answers and every
    worker is alive."""
    deadline = time.monotonic() + UP_TIMEOUT
    while time.monotonic() < deadline:
        text = out_path.read_text()
        exports = dict(re.findall(r"^export (PLEXUS_[A-Z_]+)=(.*)$", text, re.M))
        if {"PLEXUS_COORDINATOR", "PLEXUS_CA", "PLEXUS_TOKEN_FILE"} <= exports.keys():
            return exports
        if up.poll() is not None:
            pytest.fail(f"plexus up exited ({up.returncode}) before the cluster was up:\n{err_path.read_text()}")
        time.sleep(0.1)
    pytest.fail(f"plexus up did not report the cluster up within {UP_TIMEOUT} s:\n{err_path.read_text()}")


def _stop(up: subprocess.Popen) -> None:
    if up.poll() is None:
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()


@pytest.fixture(scope="session")
def client(cluster: Cluster) -> Iterator[plexus.Client]:
    with cluster.client() as c:
        yield c
