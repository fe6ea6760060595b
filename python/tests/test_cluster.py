"""The client against a real `plexus up` cluster (see conftest.py): submitting from a path, a
dict and TOML text; waiting; logs; outputs; cancelling; refused files; unknown jobs; workers;
explanations; and credentials found as the CLI finds them.

Every job is deterministic: its outputs are computed here too (the binary payload from a fixed
seed) and compared byte for byte.
"""

from __future__ import annotations

import base64
import random
import socket
import time
from pathlib import Path
from typing import Iterator

import grpc
import pytest

import plexus
from conftest import CPUS, WORKERS, Cluster

#: Every wait is bounded, so that a hung job fails its test instead of the whole run.
WAIT = 90.0

FANOUT = """\
name = "py-fanout"

[[task]]
name = "gen"
# Replica r writes r*100+1 .. (r+1)*100, one per line.
command = "seq $((PLEXUS_RANK * 100 + 1)) $(((PLEXUS_RANK + 1) * 100)) > $PLEXUS_OUT/numbers"
replicas = 4
outputs = ["numbers"]
cpu = 0.5
timeout = "60s"

[[task]]
name = "sum"
command = "cat $PLEXUS_IN/gen/*/numbers | awk '{ s += $1 } END { print s }' | tee $PLEXUS_OUT/total"
inputs = ["gen/numbers"]
outputs = ["total"]
cpu = 0.5
timeout = "60s"
"""


@pytest.fixture(scope="module")
def fanout(client: plexus.Client, tmp_path_factory: pytest.TempPathFactory) -> Iterator[plexus.Job]:
    path = tmp_path_factory.mktemp("files") / "fanout.toml"
    path.write_text(FANOUT)
    yield client.submit(path)


def test_workers_lists_the_cluster(client: plexus.Client) -> None:
    workers = client.workers()
    assert len(workers) == WORKERS
    assert len({w.id for w in workers}) == WORKERS
    for w in workers:
        assert w.id.startswith("wkr-") and len(w.id) == 36
        assert w.alive and not w.draining
        assert w.cpus == CPUS
        assert w.hostname and w.rails and w.memory > 0
        assert w.isolation in ("cgroup-v2", "cgroup-v1", "process-group")
    # A page at a time, in id order: the same workers whatever the page size.
    paged = client.workers(page_size=1)
    assert [w.id for w in paged] == sorted(w.id for w in workers)
    with pytest.raises(ValueError, match="page_size"):
        client.workers(page_size=0)
    s = client.workers_summary()
    assert (s.total, s.alive, s.lost, s.draining) == (WORKERS, WORKERS, 0, 0)
    assert s.cpu_offered == WORKERS * CPUS


def test_submit_a_path_wait_and_read_the_logs(fanout: plexus.Job) -> None:
    assert fanout.id.startswith("job-") and fanout.subtasks == 5
    final = fanout.wait(progress=True, timeout=WAIT)
    assert final.state == plexus.JobState.SUCCEEDED and final.succeeded
    assert final.name == "py-fanout" and final.total_subtasks == 5
    assert [(g.task, g.replicas, g.succeeded) for g in final.groups] == [("gen", 4, 4), ("sum", 1, 1)]
    assert len(final.subtasks) == 5 and all(s.state == plexus.SubtaskState.SUCCEEDED for s in final.subtasks)
    assert final.finished_at is not None and final.submitted_at is not None and final.finished_at >= final.submitted_at

    logs = fanout.logs("sum")
    assert logs.stdout == b"80200\n", "sum of 1..400"
    assert logs.stderr == b"" and logs.attempt == 1 and logs.state == plexus.SubtaskState.SUCCEEDED
    assert fanout.logs("gen", rank=2).stdout == b"", "gen writes to its output, not stdout"


def test_waiting_again_returns_the_same_final_state(fanout: plexus.Job) -> None:
    fanout.wait(progress=False, timeout=WAIT)
    st = fanout.wait(progress=False, timeout=WAIT)
    assert st.state == plexus.JobState.SUCCEEDED
    assert fanout.status().state == plexus.JobState.SUCCEEDED and fanout.status().subtasks == []


def test_explain_names_every_candidate(client: plexus.Client, fanout: plexus.Job) -> None:
    fanout.wait(progress=False, timeout=WAIT)
    e = fanout.explain("gen", 1)
    workers = {w.id for w in client.workers()}
    assert e.placer == "least-loaded" and e.attempt == 1
    assert e.chosen_worker in workers
    assert {c.worker_id for c in e.candidates} == workers
    assert [c.worker_id for c in e.candidates if c.chosen] == [e.chosen_worker]
    assert e.chosen is not None and e.chosen.feasible and "free_cpu" in e.chosen.features
    assert e.reason and e.decided_at is not None
    # A heuristic has no learner's record, and `gen` is no collective.
    assert e.learner == "" and e.collective == ""


def test_jobs_are_found_by_name_and_id_prefix(client: plexus.Client, fanout: plexus.Job) -> None:
    assert client.job("py-fanout") == fanout
    assert client.job(fanout.id[4:14]) == fanout
    assert client.job("job-" + fanout.id[4:14]) == fanout
    assert fanout.id in [j.id for j in client.jobs(name="py-fanout")]
    with pytest.raises(plexus.NotFound) as e:
        client.job("no-such-job")
    assert str(e.value).startswith('no job matches "no-such-job"')


def test_submit_a_dict(client: plexus.Client) -> None:
    job = client.submit(
        {"name": "py-dict", "task": [{"name": "hello", "command": "echo hello from rank $PLEXUS_RANK", "replicas": 2, "cpu": 0.5}]}
    )
    final = job.wait(progress=False, timeout=WAIT)
    assert final.state == plexus.JobState.SUCCEEDED and final.group("hello").succeeded == 2
    assert job.logs("hello", rank=0).stdout_text == "hello from rank 0\n"
    assert job.logs("hello", rank=1).stdout_text == "hello from rank 1\n"


def test_submit_toml_text_after_another_job(client: plexus.Client, fanout: plexus.Job) -> None:
    job = client.submit(
        'name = "py-text"\n[[task]]\nname = "t"\ncpu = 0.5\ncommand = "echo from text; echo to stderr >&2"\n',
        after=[fanout],
    )
    final = job.wait(progress=False, timeout=WAIT)
    assert final.state == plexus.JobState.SUCCEEDED and final.name == "py-text"
    logs = job.logs("t")
    assert (logs.stdout, logs.stderr) == (b"from text\n", b"to stderr\n")
    assert final.submitted_at is not None


def _payload(seed: int, n: int) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.getrandbits(8) for _ in range(n))


def test_get_downloads_outputs_byte_for_byte(client: plexus.Client, tmp_path: Path) -> None:
    blob = _payload(20261124, 48_000)
    job = client.submit(
        {
            "name": "py-outputs",
            "task": [
                {
                    "name": "gen",
                    "replicas": 2,
                    "cpu": 0.5,
                    "outputs": ["numbers", "blob"],
                    # Rank r writes r+1 .. 200000 (over a megabyte: several chunks) and the blob.
                    "command": f"seq $((PLEXUS_RANK + 1)) 200000 > $PLEXUS_OUT/numbers; "
                    f"printf %s '{base64.b64encode(blob).decode()}' | base64 -d > $PLEXUS_OUT/blob",
                }
            ],
        }
    )
    job.wait(progress=False, timeout=WAIT)
    paths = job.get("gen", dest=tmp_path / "all")
    assert sorted(p.relative_to(tmp_path / "all").as_posix() for p in paths) == [
        "gen/0/blob",
        "gen/0/numbers",
        "gen/1/blob",
        "gen/1/numbers",
    ]
    for rank in (0, 1):
        expected = "".join(f"{i}\n" for i in range(rank + 1, 200_001)).encode()
        assert (tmp_path / "all" / "gen" / str(rank) / "numbers").read_bytes() == expected
        assert (tmp_path / "all" / "gen" / str(rank) / "blob").read_bytes() == blob
    assert not list((tmp_path / "all").rglob("*.plexus-partial"))

    one = job.get("gen", 1, "blob", tmp_path / "one")
    assert one == [tmp_path / "one" / "gen" / "1" / "blob"] and one[0].read_bytes() == blob
    assert not (tmp_path / "one" / "gen" / "0").exists()

    with pytest.raises(plexus.NotFound, match=r'has no task "nope" \(its tasks: gen\)'):
        job.get("nope", dest=tmp_path)
    with pytest.raises(plexus.NotFound, match="nothing to get"):
        job.get("gen", 7, dest=tmp_path)


def _wait_running(job: plexus.Job, task: str) -> None:
    deadline = time.monotonic() + WAIT
    while job.status().group(task).running < 1:
        assert time.monotonic() < deadline, f"{task} of {job.id} never ran: {job.status()}"
        time.sleep(0.2)


def test_cancel_a_long_running_job(client: plexus.Client) -> None:
    job = client.submit('name = "py-cancel"\n[[task]]\nname = "sleep"\ncpu = 0.5\ncommand = "echo started; sleep 300"\n')
    _wait_running(job, "sleep")
    assert job.status().state == plexus.JobState.RUNNING
    with pytest.raises(TimeoutError, match=f"job {job.id} is still running after 0.5 s"):
        job.wait(progress=False, timeout=0.5)
    cancelled = job.cancel()
    assert cancelled.id == job.id
    final = job.wait(progress=False, check=False, timeout=WAIT)
    assert final.state == plexus.JobState.CANCELLED
    assert final.group("sleep").cancelled == 1 and final.subtask("sleep").state == plexus.SubtaskState.CANCELLED
    with pytest.raises(plexus.JobFailed) as e:
        job.wait(progress=False, timeout=WAIT)
    assert e.value.status.state == plexus.JobState.CANCELLED
    assert str(e.value).startswith(f"job {job.id} (py-cancel) cancelled")


def test_a_failed_job_raises_with_its_subtasks_errors(client: plexus.Client) -> None:
    job = client.submit('name = "py-fail"\n[[task]]\nname = "boom"\ncpu = 0.5\nmax_retries = 0\ncommand = "echo boom >&2; exit 3"\n')
    with pytest.raises(plexus.JobFailed) as e:
        job.wait(progress=False, timeout=WAIT)
    assert e.value.status.state == plexus.JobState.FAILED
    assert [(s.task, s.rank, s.exit_code) for s in e.value.failures] == [("boom", 0, 3)]
    assert f"job {job.id} (py-fail) failed" in str(e.value) and "boom/0:" in str(e.value)
    assert job.wait(progress=False, check=False, timeout=WAIT).state == plexus.JobState.FAILED
    assert job.logs("boom").stderr == b"boom\n"
    # The failure explains itself: the last lines of the failed subtask's stderr come with it.
    assert e.value.stderr == "boom" and "stderr of boom rank 0 (last lines):\n  | boom" in str(e.value)
    final = job.status()
    assert (final.phase, final.failed_task, final.failed_rank) == ("failed", "boom", 0)
    assert final.queued is not None and final.ran is not None


def test_a_plan_says_what_would_start_and_stores_nothing(client: plexus.Client) -> None:
    before = len(client.jobs())
    plan = client.plan('name = "py-plan"\n[[task]]\nname = "a"\ncpu = 0.5\nreplicas = 2\ncommand = "true"\n'
                       '[[task]]\nname = "b"\ncommand = "true"\nafter = ["a"]\n')
    assert (plan.subtasks, plan.queue, [t.task for t in plan.tasks]) == (3, "default", ["a", "b"])
    assert plan.tasks[0].start_now == 2 and plan.tasks[0].workers, plan
    assert plan.tasks[1].start_now == 0 and plan.tasks[1].waits.startswith("after task a"), plan
    assert len(client.jobs()) == before, "nothing stored"
    with pytest.raises(plexus.InvalidJob, match="no live worker can ever offer that"):
        client.plan('[[task]]\nname = "t"\ncpu = 512\ncommand = "true"\n')


def test_a_job_after_another_is_blocked_until_it_succeeds(client: plexus.Client) -> None:
    first = client.submit('name = "py-first"\n[[task]]\nname = "s"\ncpu = 0.5\ncommand = "sleep 2"\n')
    second = client.submit('name = "py-second"\n[[task]]\nname = "t"\ncpu = 0.5\ncommand = "true"\n', after=first)
    st = second.status()
    assert st.phase == "blocked" and first.id in st.phase_reason, st
    assert st.started_at is None and st.ran is None
    assert second.wait(progress=False, timeout=WAIT).phase == "succeeded"


def test_a_refused_file_raises_with_its_file_and_line(client: plexus.Client, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "py-bad"\n[[task]]\nname = "t"\ncommand = "true"\nbogus = 1\n')
    with pytest.raises(plexus.InvalidJob) as e:
        client.submit(bad)
    assert str(e.value).startswith(f"{bad}:5: unknown field `bogus`"), str(e.value)
    assert e.value.code == grpc.StatusCode.INVALID_ARGUMENT and e.value.message == str(e.value)

    with pytest.raises(plexus.InvalidJob) as e:
        client.submit('name = "py-bad"\n[[task]]\nname = "a"\ncommand = "true"\nafter = ["nope"]\n')
    assert str(e.value).startswith("job.toml:") and '"nope"' in str(e.value), str(e.value)

    with pytest.raises(plexus.InvalidJob) as e:
        client.submit({"name": "py-bad", "task": [{"name": "a", "command": "true", "bogus": 1}]})
    assert str(e.value).startswith("job.json:") and "bogus" in str(e.value), str(e.value)
    assert not [j for j in client.jobs() if j.name == "py-bad"], "nothing refused was kept"


def test_an_unknown_job_id_is_not_found(client: plexus.Client) -> None:
    missing = client.job("job-0123456789abcdef0123456789abcdef")
    for call in (missing.status, lambda: missing.logs("t"), missing.cancel, lambda: missing.explain("t")):
        with pytest.raises(plexus.NotFound) as e:
            call()
        assert str(e.value) == f"no job {missing.id}" and e.value.code == grpc.StatusCode.NOT_FOUND


def test_credentials_are_found_as_the_cli_finds_them(cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("PLEXUS_COORDINATOR", "PLEXUS_CA", "PLEXUS_TOKEN", "PLEXUS_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    # In the directory of `plexus up`: its CA and admin token in ./.plexus.
    monkeypatch.chdir(cluster.home)
    monkeypatch.setenv("PLEXUS_COORDINATOR", cluster.url)
    with plexus.Client() as c:
        assert len(c.workers()) == WORKERS

    # Elsewhere, with what `plexus up` prints to export; a bare host:port means https.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PLEXUS_COORDINATOR", cluster.url.removeprefix("https://"))
    monkeypatch.setenv("PLEXUS_CA", str(cluster.ca))
    monkeypatch.setenv("PLEXUS_TOKEN_FILE", str(cluster.token_file))
    with plexus.Client() as c:
        assert len(c.workers()) == WORKERS and c.url == cluster.url
    monkeypatch.setenv("PLEXUS_TOKEN", cluster.token_file.read_text().strip())
    monkeypatch.setenv("PLEXUS_TOKEN_FILE", str(tmp_path / "not-read"))
    with plexus.Client() as c:
        assert len(c.workers()) == WORKERS

    # A token the coordinator does not know, and none at all, are refused with its message.
    monkeypatch.delenv("PLEXUS_TOKEN_FILE")
    for token in ("plx_0123456789ab_" + "0" * 64, None):
        if token is None:
            monkeypatch.delenv("PLEXUS_TOKEN")
        else:
            monkeypatch.setenv("PLEXUS_TOKEN", token)
        with plexus.Client() as c, pytest.raises(plexus.PermissionDenied) as e:
            c.workers()
        assert e.value.code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED)
        assert e.value.message and "token" in e.value.message, e.value.message


def test_a_dead_coordinator_first_in_the_list_is_skipped(cluster: Cluster) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    with plexus.Client(f"{dead},{cluster.url}", ca=cluster.ca, token_file=cluster.token_file) as c:
        assert len(c.workers()) == WORKERS and c.url == cluster.url
    with plexus.Client(dead, ca=cluster.ca, token_file=cluster.token_file) as c, pytest.raises(plexus.Unavailable) as e:
        c.workers()
    assert str(e.value).startswith(f"cannot reach the coordinator at https://{dead}: ")


def test_get_keeps_outputs_whose_names_look_like_partial_files(client: plexus.Client, tmp_path: Path) -> None:
    job = client.submit(
        {
            "name": "py-partial-names",
            "task": [
                {
                    "name": "a",
                    "command": "echo AAA > $PLEXUS_OUT/x.plexus-partial; echo BBB > $PLEXUS_OUT/x",
                    "outputs": ["x.plexus-partial", "x"],
                }
            ],
        }
    )
    job.wait(progress=False, timeout=120)
    paths = job.get("a", dest=tmp_path)
    assert sorted(p.name for p in paths) == ["x", "x.plexus-partial"]
    assert (tmp_path / "a" / "0" / "x").read_text() == "BBB\n"
    assert (tmp_path / "a" / "0" / "x.plexus-partial").read_text() == "AAA\n"
    assert sorted(p.name for p in (tmp_path / "a" / "0").iterdir()) == ["x", "x.plexus-partial"], "no partial file is left"


def test_a_closed_client_says_so(cluster: Cluster) -> None:
    c = cluster.client()
    assert c.workers()
    c.close()
    with pytest.raises(plexus.PlexusError, match="this client is closed"):
        c.workers()
    with cluster.client() as c2:
        c2.workers()
    with pytest.raises(plexus.PlexusError, match="this client is closed"):
        c2.jobs()


def test_bad_arguments_are_refused_before_any_call(client: plexus.Client, fanout: plexus.Job) -> None:
    with pytest.raises(ValueError, match="limit must be a whole number"):
        client.jobs(limit=-1)
    with pytest.raises(ValueError, match=r"unknown job state 'RUNNING': one of running, succeeded"):
        client.jobs(state="RUNNING")
    with pytest.raises(ValueError, match="rank must be a whole number"):
        fanout.get("gen", rank=-1)
    with pytest.raises(ValueError, match="a task is named by a non-empty string"):
        fanout.logs(None)  # type: ignore[arg-type]
    # `after` given one reference, not a list of them.
    job = client.submit({"name": "py-after-one", "task": [{"name": "t", "command": "true"}]}, after=fanout.id)
    assert job.wait(progress=False, timeout=60).state == plexus.JobState.SUCCEEDED


def test_a_frozen_coordinator_fails_calls_instead_of_hanging(tmp_path: Path) -> None:
    """A coordinator stopped with SIGSTOP keeps its socket open: TCP alone would wait for ever.
    The client's keepalive pings fail the call within about twice the keepalive."""
    import signal
    import subprocess

    from conftest import _die_with_parent, bin_dir

    proc = subprocess.Popen(
        [str(bin_dir() / "plexus-coordinator"), "--insecure", "--listen", "127.0.0.1:0", "--http", "none", "--data-dir", str(tmp_path / "c")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True, preexec_fn=_die_with_parent,
    )
    try:
        line = proc.stdout.readline().strip() if proc.stdout else ""
        assert line.startswith("plexus-coordinator listening on "), line
        url = "http://" + line.rsplit(" ", 1)[1]
        with plexus.Client(url, insecure=True, keepalive=1.0) as c:
            assert c.workers() == []
            job = c.submit({"name": "frozen", "task": [{"name": "t", "command": "true"}]})
            proc.send_signal(signal.SIGSTOP)
            started = time.monotonic()
            with pytest.raises(plexus.Unavailable):
                c.workers()
            assert time.monotonic() - started < 10, "the call was not failed by the keepalive"
            started = time.monotonic()
            with pytest.raises((plexus.Unavailable, TimeoutError)):
                job.wait(progress=False, timeout=8)
            assert time.monotonic() - started < 12
            proc.send_signal(signal.SIGCONT)
            assert job.status().id == job.id
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()


def test_a_working_dir_is_shipped_once_and_runs_read_only(client: plexus.Client, tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "lib").mkdir(parents=True)
    (project / "lib" / "data.txt").write_text("from python\n")
    (project / ".gitignore").write_text("*.log\n")
    (project / "debug.log").write_text("left out\n")
    (project / "job.toml").write_text(
        'working_dir = "."\n[[task]]\nname = "t"\nreplicas = 2\n'
        'command = "cat lib/data.txt; ls debug.log 2>/dev/null; test -w lib/data.txt || echo read-only"\n'
    )
    first = client.submit(project / "job.toml")
    assert first.working_dir is not None and first.working_dir.uploaded > 0
    assert first.wait(timeout=WAIT).state == plexus.JobState.SUCCEEDED
    # Read-only by its modes: a task as root (`plexus up` runs tasks as the worker's user) is not
    # held by them, so the line is there only when the task runs as another user.
    assert first.logs("t", 1).stdout_text in ("from python\n", "from python\nread-only\n")
    again = client.submit(project / "job.toml")
    assert again.working_dir is not None and again.working_dir.uploaded == 0
    assert again.working_dir.digest == first.working_dir.digest
    assert again.wait(timeout=WAIT).state == plexus.JobState.SUCCEEDED
    with pytest.raises(ValueError, match="working_dir: .* is not a directory"):
        client.submit({"working_dir": str(project / "job.toml"), "task": [{"name": "t", "command": "true"}]})
    (project / "out").symlink_to("/etc")
    with pytest.raises(ValueError, match="symlink to /etc, which leads outside"):
        client.submit(project / "job.toml")
