"""An HA control plane, for real: a one-member etcd and two ``plexus-coordinator`` processes with
their state in it (``--store etcd://…``), one leading, one standing by. The client is given both
URLs: it finds the leader whichever comes first, follows the standby's refusal (UNAVAILABLE with
the leader's URL in ``plexus-leader`` metadata), and after ``kill -9`` of the leader finds the new
one, with the job it submitted before still there. Skipped, saying why, without etcd (``make
deps`` installs Debian's etcd-server)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, List, Optional, Tuple

import grpc
import pytest

import plexus

from conftest import _die_with_parent, bin_dir

LEASE_TTL_S = 2
#: A standby leads within the lease TTL of the leader's death, plus the time to notice and start.
FAILOVER_S = LEASE_TTL_S + 8


def free_ports(n: int) -> List[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class Ha:
    home: Path
    etcd: subprocess.Popen
    store: str
    coordinators: List[Optional[subprocess.Popen]] = field(default_factory=list)
    urls: List[str] = field(default_factory=list)

    @property
    def ca(self) -> Path:
        return self.home / "c0" / "ca.pem"

    @property
    def token_file(self) -> Path:
        return self.home / "c0" / "admin.token"

    def client(self, urls: str) -> plexus.Client:
        return plexus.Client(urls, ca=self.ca, token_file=self.token_file, timeout=10)

    def start_coordinator(self, i: int, advertise: Optional[str] = None) -> None:
        log = open(self.home / f"c{i}.log", "w")
        extra = ["--advertise", advertise] if advertise else []
        p = subprocess.Popen(
            [str(bin_dir() / "plexus-coordinator"), "--store", self.store, "--listen", "127.0.0.1:0", "--http", "none",
             "--data-dir", str(self.home / f"c{i}"), "--lease-ttl", f"{LEASE_TTL_S}s", *extra],
            stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True, preexec_fn=_die_with_parent,
        )
        line = p.stdout.readline().strip() if p.stdout else ""
        prefix = "plexus-coordinator listening on "
        if not line.startswith(prefix):
            p.kill()
            pytest.fail(f"coordinator {i} did not start ({line!r}):\n{(self.home / f'c{i}.log').read_text()[-3000:]}")
        self.coordinators.append(p)
        self.urls.append("https://" + line[len(prefix):])

    def leader(self, among: str, timeout: float) -> str:
        """The URL of the coordinator that says it leads, waiting up to `timeout` for one."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                with self.client(among) as c:
                    leaders = [x.url for x in c.coordinators() if x.leader]
                    if leaders:
                        return leaders[0]
            except plexus.PlexusError as e:
                last = str(e)
            time.sleep(0.2)
        pytest.fail(f"no coordinator of {among} leads after {timeout} s ({last})")

    def wait_leads(self, url: str, timeout: float) -> None:
        """Waits until the coordinator at `url` says it leads."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with self.client(url) as c:
                    if any(x.me and x.leader for x in c.coordinators()):
                        return
            except plexus.PlexusError:
                pass
            time.sleep(0.1)
        pytest.fail(f"{url} does not lead after {timeout} s")

    def kill(self, url: str) -> None:
        p = self.coordinators[self.urls.index(url)]
        assert p is not None
        p.kill()
        p.wait()

    def stop(self) -> None:
        for p in [*self.coordinators, self.etcd]:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def _etcd_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
            return b'"health":"true"' in r.read()
    except OSError:
        return False


def _start_etcd(etcd: str, tmp_path: Path) -> Tuple[subprocess.Popen, int]:
    """A one-member etcd on free ports, healthy: (its process, its client port). The ports are
    free when picked, but another process of the test run (the session's cluster makes outbound
    connections) can take one before etcd binds it: then etcd exits, and it is started again on
    other ports."""
    tries = 3
    for attempt in range(1, tries + 1):
        client_port, peer_port = free_ports(2)
        client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        data = tmp_path / f"etcd-{attempt}"
        log_path = tmp_path / f"etcd-{attempt}.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [etcd, "--name", "m0", "--data-dir", str(data), "--listen-client-urls", client_url,
                 "--advertise-client-urls", client_url, "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                 "--initial-cluster", f"m0={peer_url}", "--initial-cluster-state", "new"],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + 30
        while not _etcd_healthy(client_port):
            if proc.poll() is not None or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        else:
            return proc, client_port
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if attempt == tries:
            pytest.fail(f"etcd did not become healthy in {tries} tries; the last one's log:\n{log_path.read_text()[-3000:]}")
    raise AssertionError("unreachable")


def _start_ha(tmp_path: Path, advertise: Optional[str] = None, advertise2: Optional[str] = None) -> Iterator[Ha]:
    etcd = shutil.which("etcd")
    if etcd is None:
        pytest.skip("etcd is not installed; `make deps` installs Debian's etcd-server")
    proc, client_port = _start_etcd(etcd, tmp_path)
    ha = Ha(home=tmp_path, etcd=proc, store=f"etcd://127.0.0.1:{client_port}/pytest")
    try:
        # The first makes the cluster's CA and tokens in etcd and leads; the second stands by.
        ha.start_coordinator(0, advertise)
        assert ha.leader(ha.urls[0], 30) == (advertise or ha.urls[0])
        ha.start_coordinator(1, advertise2)
        yield ha
    finally:
        ha.stop()


@pytest.fixture
def ha(tmp_path: Path) -> Iterator[Ha]:
    yield from _start_ha(tmp_path)


@pytest.fixture
def ha_behind_names(tmp_path: Path) -> Iterator[Ha]:
    """Coordinators that advertise URLs this host cannot reach, as in a container network whose
    names only its members resolve (here: loopback ports 1 and 2, privileged, never handed out to
    a process of the test run, so nothing listens there: they fail at once, where an
    unresolvable name could wait on DNS)."""
    yield from _start_ha(tmp_path, "https://127.0.0.1:1", "https://127.0.0.1:2")


def test_a_standby_named_first_sends_the_client_to_the_leader(ha: Ha) -> None:
    leader, standby = ha.urls
    with ha.client(f"{standby},{leader}") as c:
        assert c.workers() == []
        assert c.url == leader
        listed = {x.url: x.leader for x in c.coordinators()}
        assert listed == {leader: True, standby: False}, listed


def test_the_standby_refuses_naming_the_leader(ha: Ha) -> None:
    leader, standby = ha.urls
    # A raw call to the standby alone: the refusal the client follows.
    ca = ha.ca.read_bytes()
    token = ha.token_file.read_text().strip()
    from plexus._pb import pb, pb_grpc

    # The standby learns who leads by watching the election (every 250 ms); the fixture waits only
    # for the leader to lead, so until the standby has looked it refuses without a name ("no
    # coordinator leads yet"). Ask again until it names one, as the client does, then check it.
    deadline = time.monotonic() + 10
    with grpc.secure_channel(standby[len("https://"):], grpc.ssl_channel_credentials(ca)) as ch:
        while True:
            with pytest.raises(grpc.RpcError) as e:
                pb_grpc.JobServiceStub(ch).ListWorkers(pb.ListWorkersRequest(), metadata=(("authorization", f"Bearer {token}"),), timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value
            named = dict(e.value.trailing_metadata() or ()).get("plexus-leader")
            if named is not None or time.monotonic() > deadline:
                break
            assert "no coordinator leads yet" in (e.value.details() or ""), e.value.details()
            time.sleep(0.1)
    assert named == leader, e.value.trailing_metadata()


def test_after_kill_9_of_the_leader_the_client_finds_the_new_one_and_the_job(ha: Ha) -> None:
    leader, standby = ha.urls
    with ha.client(f"{leader},{standby}") as c:
        # No workers: the job waits, acknowledged and stored in etcd.
        job = c.submit({"name": "kept", "task": [{"name": "t", "command": "true"}]})
        assert job.status().state == plexus.JobState.RUNNING
        ha.kill(leader)
        started = time.monotonic()
        ha.wait_leads(standby, FAILOVER_S)
        took = time.monotonic() - started
        # The same client: its connection to the dead one fails, it tries the next URL.
        status = job.status()
        assert status.id == job.id and status.name == "kept" and status.state == plexus.JobState.RUNNING
        assert c.url == standby
        assert took <= FAILOVER_S, f"the standby took {took:.1f} s to lead"


def test_an_unknown_job_is_not_found_through_the_standby(ha: Ha) -> None:
    leader, standby = ha.urls
    missing = "job-" + "c" * 32
    with ha.client(f"{standby},{leader}") as c:
        with pytest.raises(plexus.NotFound) as e:
            c.job(missing).status()
        assert missing in str(e.value) and e.value.url == leader


def test_a_leader_advertised_at_a_url_unreachable_from_here_is_found_in_the_list(ha_behind_names: Ha) -> None:
    ha = ha_behind_names
    leader, standby = ha.urls
    with ha.client(leader) as c:
        advertised = [x.url for x in c.coordinators() if x.leader]
    assert len(advertised) == 1 and advertised[0] not in ha.urls, advertised
    # The standby answers first and names the leader by a URL that does not answer from here:
    # the client goes on down the list and finds the leader by asking it.
    with ha.client(f"{standby},{leader}") as c:
        assert c.workers() == []
        assert c.url == leader
    # The standby alone: its refusals name the leader, and the client says it cannot reach it.
    with ha.client(standby) as c:
        with pytest.raises(plexus.Unavailable) as e:
            c.workers()
        assert advertised[0] in str(e.value), str(e.value)


def test_no_coordinator_answering_is_unavailable_naming_the_url() -> None:
    dead = f"http://127.0.0.1:{free_ports(1)[0]}"
    with pytest.raises(plexus.Unavailable) as e:
        plexus.Client(dead, insecure=True).workers()
    assert str(e.value).startswith(f"cannot reach the coordinator at {dead}: "), str(e.value)
    assert e.value.code == grpc.StatusCode.UNAVAILABLE
