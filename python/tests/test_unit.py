"""The client's own rules, without a coordinator: URL normalisation, credential resolution,
job sources, job references, conversions, errors and the progress bars."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import grpc
import pytest

import plexus
from plexus import _convert
from plexus._pb import pb
from plexus._progress import Bars
from plexus._target import DEFAULT_COORDINATOR, Target, grpc_address, normalise_url, parse_token
from plexus.client import _check_job_ref, _job_source, by_name, resolve_ref
from plexus.errors import ConfigError, JobFailed, NotFound, PlexusError, from_rpc

TOKEN = "plx_0123456789ab_" + "cd" * 32
OTHER = "plx_ba9876543210_" + "ef" * 32


def test_urls_get_a_scheme_as_the_cli_gives_them() -> None:
    assert normalise_url("127.0.0.1:7000", False) == "https://127.0.0.1:7000"
    assert normalise_url("127.0.0.1:7000", True) == "http://127.0.0.1:7000"
    assert normalise_url(" http://h:1 ", True) == "http://h:1"
    assert normalise_url("https://h:1", False) == "https://h:1"
    for empty in ("", "  "):
        with pytest.raises(ConfigError, match="the coordinator URL is empty"):
            normalise_url(empty, False)
    for other in ("ftp://x", "unix:///run/p.sock", "https://", "://h:1"):
        with pytest.raises(ConfigError, match=r"is not http\(s\)"):
            normalise_url(other, False)
    with pytest.raises(ConfigError, match="plaintext") as e:
        normalise_url("http://h:1", False)
    assert "insecure=True" in str(e.value)
    with pytest.raises(ConfigError, match="is https"):
        normalise_url("https://h:1", True)


def test_grpc_addresses() -> None:
    assert grpc_address("https://127.0.0.1:7000") == ("127.0.0.1:7000", True)
    assert grpc_address("http://coord") == ("coord:80", False)
    assert grpc_address("https://[::1]:9") == ("[::1]:9", True)
    with pytest.raises(ConfigError, match="invalid coordinator URL"):
        grpc_address("https://h:99999")
    with pytest.raises(ConfigError, match="scheme"):
        grpc_address("ftp://h:1")


def test_tokens_are_checked() -> None:
    assert parse_token(f"  {TOKEN}\n") == TOKEN
    for bad in ["", "plx_", TOKEN.upper(), TOKEN[:-1], "xyz_0123456789ab_" + "cd" * 32]:
        with pytest.raises(ConfigError, match="not a Plexus token"):
            parse_token(bad)


def _up_dir(root: Path, token: str = TOKEN, ca: bytes = b"-----BEGIN CERTIFICATE-----\nCA OF UP\n") -> None:
    d = root / ".plexus" / "coordinator"
    d.mkdir(parents=True)
    (d / "admin.token").write_text(token + "\n")
    (d / "ca.pem").write_bytes(ca)


def test_credentials_are_found_where_the_cli_finds_them(tmp_path: Path) -> None:
    # Nothing anywhere: the default URL, no token, no CA (the coordinator says what it needs).
    t = Target.resolve(env={}, cwd=tmp_path)
    assert (t.urls, t.token, t.ca) == ((f"https://{DEFAULT_COORDINATOR}",), None, None)

    # A `plexus up` cluster in the current directory.
    _up_dir(tmp_path)
    t = Target.resolve(env={}, cwd=tmp_path)
    assert (t.token, t.ca) == (TOKEN, b"-----BEGIN CERTIFICATE-----\nCA OF UP\n")

    # $PLEXUS_TOKEN_FILE and $PLEXUS_CA win over ./.plexus; $PLEXUS_TOKEN over the file.
    (tmp_path / "tok").write_text(OTHER)
    (tmp_path / "tok").chmod(0o600)
    (tmp_path / "ca.pem").write_bytes(b"-----BEGIN CERTIFICATE-----\nOTHER CA\n")
    env = {"PLEXUS_TOKEN_FILE": str(tmp_path / "tok"), "PLEXUS_CA": str(tmp_path / "ca.pem")}
    t = Target.resolve(env=env, cwd=tmp_path)
    assert (t.token, t.ca) == (OTHER, b"-----BEGIN CERTIFICATE-----\nOTHER CA\n")
    assert Target.resolve(env={**env, "PLEXUS_TOKEN": TOKEN}, cwd=tmp_path).token == TOKEN
    # A blank $PLEXUS_TOKEN is ignored, as the CLI ignores it.
    assert Target.resolve(env={**env, "PLEXUS_TOKEN": "  "}, cwd=tmp_path).token == OTHER
    # The arguments: token= as $PLEXUS_TOKEN; token_file= and ca= as --token-file and --ca.
    assert Target.resolve(token=OTHER, env={"PLEXUS_TOKEN": TOKEN}, cwd=tmp_path).token == OTHER
    assert Target.resolve(token_file=tmp_path / "tok", env={}, cwd=tmp_path).token == OTHER
    assert Target.resolve(ca=tmp_path / "ca.pem", env={}, cwd=tmp_path).ca == b"-----BEGIN CERTIFICATE-----\nOTHER CA\n"
    assert Target.resolve(ca=b"-----BEGIN CERTIFICATE-----\nPEM\n", env={}, cwd=tmp_path).ca == b"-----BEGIN CERTIFICATE-----\nPEM\n"

    # insecure: plaintext, no token, no CA, even where they exist.
    t = Target.resolve("h:1", insecure=True, env=env, cwd=tmp_path)
    assert (t.urls, t.token, t.ca, t.insecure) == (("http://h:1",), None, None, True)


def test_an_empty_or_foreign_coordinator_and_a_shared_token_file_are_reported(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="PLEXUS_COORDINATOR set but empty"):
        Target.resolve(env={"PLEXUS_COORDINATOR": ""}, cwd=tmp_path)
    with pytest.raises(ConfigError, match=r"'ftp://x' is not http\(s\)"):
        Target.resolve(env={"PLEXUS_COORDINATOR": "ftp://x"}, cwd=tmp_path)
    tok = tmp_path / "tok"
    tok.write_text(TOKEN)
    tok.chmod(0o644)
    with pytest.warns(UserWarning, match="can be read by other users \\(mode 644\\); make it owner-only"):
        assert Target.resolve(token_file=tok, env={}, cwd=tmp_path).token == TOKEN
    tok.chmod(0o600)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Target.resolve(token_file=tok, env={}, cwd=tmp_path).token == TOKEN


def test_coordinator_lists_and_their_errors(tmp_path: Path) -> None:
    t = Target.resolve(env={"PLEXUS_COORDINATOR": "a:1, https://b:2"}, cwd=tmp_path)
    assert t.urls == ("https://a:1", "https://b:2")
    assert Target.resolve("c:3", env={"PLEXUS_COORDINATOR": "a:1"}, cwd=tmp_path).urls == ("https://c:3",)
    with pytest.raises(ConfigError, match="cannot read the token file"):
        Target.resolve(env={"PLEXUS_TOKEN_FILE": str(tmp_path / "missing")}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="cannot read the CA certificate"):
        Target.resolve(env={"PLEXUS_CA": str(tmp_path / "missing.pem")}, cwd=tmp_path)
    (tmp_path / "bad").write_text("not a token")
    (tmp_path / "bad").chmod(0o600)
    with pytest.raises(ConfigError, match="the token: this is not a Plexus token"):
        Target.resolve(token_file=tmp_path / "bad", env={}, cwd=tmp_path)


def test_https_without_a_ca_says_where_to_find_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("PLEXUS_COORDINATOR", "PLEXUS_CA", "PLEXUS_TOKEN", "PLEXUS_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        plexus.Client("127.0.0.1:1").workers()
    assert "PLEXUS_CA" in str(e.value) and "ca=" in str(e.value)


def test_job_sources(tmp_path: Path) -> None:
    toml = tmp_path / "a.toml"
    toml.write_text('name = "a"\n')
    assert _job_source(toml, None, None) == ('name = "a"\n', "toml", str(toml))
    assert _job_source(str(toml), None, None) == ('name = "a"\n', "toml", str(toml))
    js = tmp_path / "b.JSON"
    js.write_text("{}")
    assert _job_source(js, None, None) == ("{}", "json", str(js))
    assert _job_source('name = "x"\n[[task]]\n', None, None) == ('name = "x"\n[[task]]\n', "toml", "job.toml")
    assert _job_source('name = "x"', None, "mine.toml") == ('name = "x"', "toml", "mine.toml")
    assert _job_source(b'{"name": "x"}', None, None) == ('{"name": "x"}', "json", "job.json")
    source, fmt, name = _job_source({"name": "d", "task": [{"name": "t", "command": "true"}]}, None, None)
    assert (fmt, name) == ("json", "job.json")
    assert json.loads(source) == {"name": "d", "task": [{"name": "t", "command": "true"}]}
    assert source.count("\n") > 5, "indented, so that error lines point at one key each"
    with pytest.raises(FileNotFoundError):
        _job_source(str(tmp_path / "missing.toml"), None, None)
    with pytest.raises(TypeError):
        _job_source(42, None, None)  # type: ignore[arg-type]


def test_job_references_resolve_by_id_prefix_or_name() -> None:
    items = [("job-1a2b0000", "etl"), ("job-1a2c0000", "train"), ("job-ffff0000", "train")]

    def get(r: str) -> str:
        return resolve_ref(items, r, prefix="job-", what="job", name="name", listed_by="plexus status")

    assert get("job-1a2b") == "job-1a2b0000"
    assert get("1A2C") == "job-1a2c0000"
    assert get("etl") == "job-1a2b0000"
    with pytest.raises(PlexusError) as e:
        get("train")
    assert "matches 2 jobs" in str(e.value) and "job-1a2c0000 (train)" in str(e.value)
    with pytest.raises(PlexusError, match="matches 3 jobs"):
        get("job-")
    with pytest.raises(NotFound, match='^no job matches "nope"'):
        get("nope")
    for bad, why in [("", "empty"), ("a b", "no spaces"), ("wkr-12", "worker id"), ("job-12x", "32 hex digits")]:
        with pytest.raises(ValueError, match=why):
            _check_job_ref(bad)


def test_statuses_convert_to_dataclasses() -> None:
    msg = pb.JobStatus(
        job_id="job-" + "0" * 32,
        name="demo",
        state=pb.JOB_STATE_COMPLETED_WITH_FAILURES,
        submitted_at=1_700_000_000_000,
        groups=[pb.TaskGroupStatus(task="gen", replicas=2, succeeded=1, failed=1, after=["a"])],
        subtasks=[
            pb.SubtaskStatus(
                task="gen",
                rank=1,
                state=pb.SUBTASK_STATE_FAILED,
                exit_code=3,
                error="exit code 3",
                outputs=[pb.ObjectInfo(object_id="job-x/gen/1/numbers", size=5)],
            )
        ],
        total_subtasks=2,
    )
    st = _convert.job_status(msg)
    assert st.state == plexus.JobState.COMPLETED_WITH_FAILURES and st.finished and not st.succeeded
    assert st.submitted_at is not None and st.submitted_at.year == 2023 and st.finished_at is None
    assert st.group("gen").finished == 2 and st.group("gen").after == ["a"]
    assert st.subtask("gen", 1).outputs == [plexus.Output("job-x/gen/1/numbers", "numbers", 5)]
    assert [s.rank for s in st.failed_subtasks] == [1]
    with pytest.raises(KeyError, match="its tasks: gen"):
        st.group("nope")
    e = JobFailed(st, st.failed_subtasks)
    assert str(e) == f"job {st.id} (demo) completed-with-failures [gen/1: exit code 3]"
    assert e.status is st and e.failures[0].exit_code == 3


class _Refusal(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """A failed call as grpc raises it, for the error mapping."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def initial_metadata(self):  # type: ignore[no-untyped-def]
        return ()

    def trailing_metadata(self):  # type: ignore[no-untyped-def]
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback) -> bool:  # type: ignore[no-untyped-def]
        return False


def test_errors_carry_the_coordinators_message_on_one_line() -> None:
    url = "https://127.0.0.1:1"
    e = from_rpc(_Refusal(grpc.StatusCode.INVALID_ARGUMENT, "TOML parse error at line 1\n  |\ninvalid string\n"), url)
    assert isinstance(e, plexus.InvalidJob) and isinstance(e, ValueError)
    assert str(e) == "TOML parse error at line 1 | invalid string" and e.code == grpc.StatusCode.INVALID_ARGUMENT
    assert isinstance(from_rpc(_Refusal(grpc.StatusCode.NOT_FOUND, "no job x"), url), plexus.NotFound)
    assert isinstance(from_rpc(_Refusal(grpc.StatusCode.UNAUTHENTICATED, "no token"), url), plexus.PermissionDenied)
    assert str(from_rpc(_Refusal(grpc.StatusCode.NOT_FOUND, ""), url)) == "the coordinator answered NOT_FOUND without a message"
    down = from_rpc(_Refusal(grpc.StatusCode.UNAVAILABLE, "failed to connect to all addresses; Connection refused"), url)
    assert isinstance(down, plexus.Unavailable) and str(down).startswith(f"cannot reach the coordinator at {url}: ")
    standby = from_rpc(_Refusal(grpc.StatusCode.UNAVAILABLE, "this coordinator is a standby and no coordinator leads yet"), url)
    assert str(standby) == "this coordinator is a standby and no coordinator leads yet"


def test_progress_bars_draw_each_group() -> None:
    def snapshot(running: int, succeeded: int, failed: int) -> plexus.JobStatus:
        return _convert.job_status(
            pb.JobStatus(
                job_id="job-" + "1" * 32,
                state=pb.JOB_STATE_RUNNING,
                groups=[
                    pb.TaskGroupStatus(task="gen", replicas=8, running=running, succeeded=succeeded, failed=failed),
                    pb.TaskGroupStatus(task="sum", replicas=1, waiting=1),
                ],
                total_subtasks=9,
            )
        )

    out = io.StringIO()
    bars = Bars(out, enabled=True)
    bars.update(snapshot(2, 3, 1))
    bars.update(snapshot(0, 7, 1))
    gen = bars.bar_of("gen")
    assert gen is not None and (gen.n, gen.total) == (7, 8)
    bars.close()
    text = out.getvalue()
    assert "7/8" in text and "0 running, 1 failed" in text and "sum" in text

    quiet = io.StringIO()
    off = Bars(quiet, enabled=False)
    off.update(snapshot(0, 8, 0))
    off.close()
    assert quiet.getvalue() == "" and off.bar_of("gen") is None


def test_ranks_and_attempts_out_of_range_are_refused_naming_them() -> None:
    from plexus.client import _u32

    assert _u32("rank", 0) == 0 and _u32("rank", 2**32 - 1) == 2**32 - 1
    for bad in (-1, 2**32, 2**40, 1.5, True, "3", None):
        with pytest.raises(ValueError) as e:
            _u32("rank", bad)  # type: ignore[arg-type]
        assert str(e.value) == f"rank must be a whole number from 0 to 4294967295, not {bad!r}"


def test_errors_survive_pickling_for_process_pools() -> None:
    import pickle

    e = NotFound("no job job-x", grpc.StatusCode.NOT_FOUND, "https://c:1")
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is NotFound and str(back) == "no job job-x" and back.code == grpc.StatusCode.NOT_FOUND and back.url == "https://c:1"
    status = _convert.job_status(pb.JobStatus(job_id="job-" + "a" * 32, name="n", state=pb.JOB_STATE_FAILED, error="boom"))
    failed = JobFailed(status, [])
    back = pickle.loads(pickle.dumps(failed))
    assert type(back) is JobFailed and str(back) == str(failed) and back.status == status and back.failures == []


def test_job_sources_that_cannot_be_sent_say_why(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="the job is empty"):
        _job_source("   ", None, None)
    with pytest.raises(ValueError, match="cannot be sent as JSON: Out of range float values"):
        _job_source({"name": "x", "task": [{"name": "t", "command": "true", "cpu": float("nan")}]}, None, None)
    deep: dict = {}
    cur = deep
    for _ in range(5000):
        cur["a"] = {}
        cur = cur["a"]
    with pytest.raises(ValueError, match="nested too deeply"):
        _job_source(deep, None, None)
    with pytest.raises(plexus.InvalidJob, match=r"^job.toml: not UTF-8 text"):
        _job_source(b'name = "\xff"\n', None, None)
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b'name = "\xff"\n')
    with pytest.raises(plexus.InvalidJob, match=rf"^{bad}: not UTF-8 text"):
        _job_source(str(bad), None, None)
    with pytest.raises(plexus.InvalidJob, match=r"^job.toml: job file is larger than 16 MiB$"):
        _job_source("name = 'x'\n" + "#" * (16 << 20), None, None)
    # A one-line .toml name that does not exist is a path (a typo says so), not TOML text.
    with pytest.raises(FileNotFoundError):
        _job_source("jobs/train=v2.toml", None, None)


def test_a_ca_that_is_not_a_certificate_is_refused_at_once(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=rf"^the CA certificate {garbage} is not a PEM certificate"):
        Target.resolve("https://127.0.0.1:1", TOKEN, ca=garbage, token_file=None, insecure=False)
    pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    assert Target.resolve("https://127.0.0.1:1", TOKEN, ca=pem, token_file=None, insecure=False).ca == pem.encode()


def test_a_certificate_of_another_cluster_blames_the_ca() -> None:
    class Refused(grpc.RpcError, grpc.Call):  # type: ignore[misc]
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.UNAVAILABLE

        def details(self) -> str:
            return "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:1: Tls handshake failed (TSI_PROTOCOL_FAILURE): SSL_ERROR_SSL: error:1000007d:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate"

    e = from_rpc(Refused(), "https://c:1")
    assert isinstance(e, ConfigError)
    assert str(e).startswith("the coordinator at https://c:1 presented a certificate that the CA given did not sign ("), str(e)
    assert str(e).endswith("pass the ca.pem of that coordinator's cluster (ca= or PLEXUS_CA)")


def test_a_requirements_file_is_put_in_the_job_as_json(tmp_path: Path) -> None:
    from plexus import _requirements

    (tmp_path / "req.txt").write_text("# pinned\nsix==1.16.0  # why\nrequests \\\n  >=2.31\n\n")
    src = 'python = { requirements = "req.txt", pip = ["attrs"] }\n[[task]]\nname = "t"\ncommand = "x"\n'
    out = json.loads(_requirements.inline(src, "toml", tmp_path))
    assert out["python"] == {"requirements": ["six==1.16.0", "requests    >=2.31"], "pip": ["attrs"]}
    per_task = {"task": [{"name": "t", "command": "x", "python": {"requirements": "req.txt"}}]}
    out = json.loads(_requirements.inline(json.dumps(per_task), "json", tmp_path))
    assert out["task"][0]["python"]["requirements"] == ["six==1.16.0", "requests    >=2.31"]
    assert _requirements.inline('python = { pip = ["six"] }\n', "toml", tmp_path) is None, "nothing to inline"
    assert _requirements.inline("not = = toml", "toml", tmp_path) is None, "left to the coordinator"

    (tmp_path / "opts.txt").write_text("six\n-r other.txt\n")
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00")
    for file, says in [
        ("opts.txt", r"line 2: '-r other.txt': options"),
        ("bin.txt", "not UTF-8 text"),
        ("missing.txt", "is not a file"),
    ]:
        job = f'[[task]]\nname = "train"\ncommand = "x"\npython = {{ requirements = "{file}" }}\n'
        with pytest.raises(ValueError, match=r"task 'train': python.requirements = '" + file + "': .*" + says):
            _requirements.inline(job, "toml", tmp_path)


def test_a_name_is_its_newest_job_and_name_tilde_n_the_ones_before() -> None:
    jobs = [("job-a", "train", 10), ("job-b", "train", 30), ("job-c", "etl", 20), ("job-d", "train", 20)]
    assert by_name(jobs, "train") == "job-b"
    assert by_name(jobs, "train~1") == "job-d" and by_name(jobs, "train~2") == "job-a"
    assert by_name(jobs, "1a2b") is None, "not a name: left to the id prefixes"
    with pytest.raises(NotFound, match=r'has 3 run\(s\); train is the newest and train~2 the oldest'):
        by_name(jobs, "train~3")
    with pytest.raises(ValueError, match="after '~' comes how many runs back"):
        by_name(jobs, "train~x")


def test_contexts_give_the_url_ca_and_token_when_nothing_else_does(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    (tmp_path / "t.token").write_text(TOKEN)
    (tmp_path / "t.token").chmod(0o600)
    (cfg / "contexts.toml").write_text(
        'current = "lab"\n[contexts.lab]\ncoordinator = "https://127.0.0.1:7070"\n'
        f'ca = "{tmp_path / "ca.pem"}"\ntoken_file = "{tmp_path / "t.token"}"\n'
        '[contexts.other]\ncoordinator = "https://10.0.0.9:7070"\n'
    )
    env = {"PLEXUS_CONFIG_DIR": str(cfg)}
    t = Target.resolve(env=env, cwd=tmp_path)
    assert t.urls == ("https://127.0.0.1:7070",) and t.ca is not None and t.token is not None
    assert Target.resolve(env=env, cwd=tmp_path, context="other").urls == ("https://10.0.0.9:7070",)
    assert Target.resolve(env={**env, "PLEXUS_CONTEXT": "other"}, cwd=tmp_path).urls == ("https://10.0.0.9:7070",)
    # The `plexus up` cluster of the folder comes before the current context; an explicit URL first.
    (tmp_path / ".plexus" / "coordinator").mkdir(parents=True)
    (tmp_path / ".plexus" / "coordinator" / "url").write_text("https://127.0.0.1:4242\n")
    assert Target.resolve(env=env, cwd=tmp_path).urls == ("https://127.0.0.1:4242",)
    assert Target.resolve(env={**env, "PLEXUS_COORDINATOR": "127.0.0.1:1"}, cwd=tmp_path).urls == ("https://127.0.0.1:1",)
    with pytest.raises(ConfigError, match="no context 'prod'"):
        Target.resolve(env=env, cwd=tmp_path, context="prod")
    assert Target.resolve(env={"PLEXUS_CONFIG_DIR": str(tmp_path / "none")}, cwd=tmp_path / "cfg").urls == (
        "https://" + DEFAULT_COORDINATOR,
    )


class _Shedding(object):
    """A job service on a real socket (grpc's own server) that refuses the first ``shed``
    ListJobs calls as a coordinator shedding load does (RESOURCE_EXHAUSTED, with the pushback
    when ``pushback``), then answers."""

    def __init__(self, shed: int, pushback: bool) -> None:
        self.shed, self.pushback, self.calls = shed, pushback, 0

    def ListCoordinators(self, request, context):  # noqa: N802 (the service's method name)
        return pb.ListCoordinatorsResponse()

    def ListJobs(self, request, context):  # noqa: N802
        self.calls += 1
        if self.calls <= self.shed:
            if self.pushback:
                context.set_trailing_metadata((("grpc-retry-pushback-ms", "20"),))
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "the coordinator is overloaded")
        return pb.ListJobsResponse()


def _serve_shedding(shed: int, pushback: bool):
    from concurrent import futures

    from plexus._pb import pb_grpc

    servicer = _Shedding(shed, pushback)
    handler = type("Handler", (pb_grpc.JobServiceServicer,), {
        "ListCoordinators": servicer.ListCoordinators, "ListJobs": servicer.ListJobs,
    })()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_JobServiceServicer_to_server(handler, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, servicer, f"http://127.0.0.1:{port}"


def test_a_coordinator_shedding_load_is_retried_and_other_exhaustion_is_not() -> None:
    server, servicer, url = _serve_shedding(3, True)
    try:
        with plexus.Client(url, insecure=True) as c:
            assert c.jobs() == []
        assert servicer.calls == 4
    finally:
        server.stop(None)
    # Without the pushback it is an answer (a full archive store), not load: no retry.
    server, servicer, url = _serve_shedding(1, False)
    try:
        with plexus.Client(url, insecure=True) as c:
            with pytest.raises(PlexusError, match="overloaded") as e:
                c.jobs()
            assert e.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert servicer.calls == 1
    finally:
        server.stop(None)


def test_shed_waits_grow_and_stop_at_the_budget() -> None:
    from plexus.client import SHED_MAX_WAIT, shed_wait

    class Refusal(grpc.RpcError):
        def __init__(self, code, trailing) -> None:
            self._code, self._trailing = code, trailing

        def code(self):
            return self._code

        def trailing_metadata(self):
            return self._trailing

    shed = Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, (("grpc-retry-pushback-ms", "250"),))
    first, later = shed_wait(shed, 0, 0.0), shed_wait(shed, 3, 1.0)
    assert first is not None and 0.18 <= first <= 0.32
    assert later is not None and 1.5 <= later <= 2.5
    assert shed_wait(shed, 20, 0.0) <= SHED_MAX_WAIT * 1.25
    assert shed_wait(shed, 0, 29.9) is None, "past the budget"
    for other in (
        Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, ()),
        Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, (("grpc-retry-pushback-ms", "soon"),)),
        Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, (("grpc-retry-pushback-ms", "-1"),)),
        Refusal(grpc.StatusCode.UNAVAILABLE, (("grpc-retry-pushback-ms", "250"),)),
    ):
        assert shed_wait(other, 0, 0.0) is None
