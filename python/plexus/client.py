"""The client: :class:`Client` connects to the coordinator's ``JobService`` and submits jobs;
:class:`Job` is a submitted job (status, wait, logs, outputs, cancel, explain).

Each method mirrors a ``plexus`` command and keeps its rules: job files are sent as text for
the coordinator to parse and check (``plexus submit``), outputs are relayed by the coordinator
from whichever worker holds them (``plexus get``), waiting follows the ``WatchJob`` stream and
rides through a coordinator restart (``plexus watch``).

Connecting: the coordinators of the URL list are tried in order; the first that answers is
asked who leads (``ListCoordinators``) and the client goes to the leader. A call refused with
UNAVAILABLE and the leader's URL in ``plexus-leader`` metadata (a standby) is sent once more,
to that URL. A call that fails because the coordinator went away drops the connection, so the
next call starts over from the list.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import grpc

from . import _convert as convert
from . import _requirements, _working_dir
from ._pb import pb, pb_grpc
from ._progress import Bars
from ._target import COORDINATOR_NAME, PathLike, Target, grpc_address, normalise_url
from .errors import ConfigError, InvalidJob, JobFailed, NotFound, PlexusError, Unavailable, from_rpc, never_sent, one_line, unreachable
from .types import CoordinatorInfo, Explanation, JobState, JobStatus, Logs, Plan, WorkerInfo, WorkersSummary

#: How long connecting to one coordinator may take before the next one is tried (the CLI's).
CONNECT_TIMEOUT = 5.0
#: The cluster's message-size limit (``proto/src/rules.rs``): a large job with every subtask,
#: or a 1 MiB log tail of each stream, exceeds gRPC's 4 MiB default.
MAX_MESSAGE = 64 << 20
#: While a call is in flight, the coordinator is pinged after this long without data, and the
#: call fails if the ping is not answered within as long again.
KEEPALIVE_S = 10.0
#: What a call on a closed client says.
CLOSED = "this client is closed (Client.close, or the end of its `with` block); make a new one"
#: The metadata key of a standby's refusal that holds the leader's URL.
LEADER_METADATA = "plexus-leader"
#: Waiting for a job: the first pause before reconnecting to a coordinator that went away,
#: doubled after each failed try up to the second; given up after the third (as ``plexus watch``).
RECONNECT_FIRST = 0.2
RECONNECT_MAX = 5.0
RECONNECT_FOR = 600.0

#: A coordinator shedding load refuses a call at once with RESOURCE_EXHAUSTED and says, in this
#: trailing metadata, after how many milliseconds to retry (``proto/src/rules.rs``); the call is
#: then sent again, waiting the pushback doubled at each refusal (at most SHED_MAX_WAIT, with
#: jitter), for at most SHED_RETRY_FOR seconds, as the CLI does. A RESOURCE_EXHAUSTED without it
#: (a full archive store) is an answer, not retried.
RETRY_PUSHBACK_METADATA = "grpc-retry-pushback-ms"
SHED_RETRY_FOR = 30.0
SHED_MAX_WAIT = 4.0


def shed_wait(error: grpc.RpcError, tries: int, waited: float, budget: float = SHED_RETRY_FOR) -> Optional[float]:
    """Seconds to wait before sending again a call refused with ``error``, after ``tries``
    refusals and ``waited`` seconds; None when it is not a shed refusal or the budget is spent."""
    code = getattr(error, "code", lambda: None)()
    if code != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    trailing = getattr(error, "trailing_metadata", lambda: None)() or ()
    pushback = next((v for k, v in trailing if k == RETRY_PUSHBACK_METADATA), None)
    try:
        base = int(pushback) / 1000.0 if pushback is not None else None
    except (TypeError, ValueError):
        base = None
    if base is None or base < 0:
        return None
    wait = min(base * (2 ** min(tries, 8)), SHED_MAX_WAIT) * (0.75 + 0.5 * (time.monotonic_ns() % 1000) / 1000.0)
    return wait if waited + wait <= budget else None


#: Codes of a call or stream that may succeed once the coordinator is back (a restart, a
#: dropped connection), as opposed to an answer (no such job, no permission).
_RETRYABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN, grpc.StatusCode.CANCELLED, grpc.StatusCode.ABORTED)

_JOB_ID = re.compile(r"job-[0-9a-f]{32}")
_EPOCH = datetime.fromtimestamp(0, tz=timezone.utc)
_MAX_JOB_REF = 256

JobSource = Union[PathLike, str, bytes, Mapping[str, Any]]


class _Connection:
    """A channel to one coordinator and the stub on it."""

    def __init__(self, url: str, channel: grpc.Channel) -> None:
        self.url = url
        self.channel = channel
        self.stub = pb_grpc.JobServiceStub(channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        self.channel.close()


def _leader_hint(error: grpc.RpcError) -> Optional[str]:
    """The leader's URL a standby named in its refusal, if any."""
    if not isinstance(error, grpc.Call) or error.code() != grpc.StatusCode.UNAVAILABLE:
        return None
    for md in (error.trailing_metadata(), error.initial_metadata()):
        for key, value in md or ():
            if key == LEADER_METADATA:
                text = value.decode() if isinstance(value, bytes) else str(value)
                if text.strip():
                    return text.strip()
    return None


class Client:
    """A connection to a Plexus coordinator.

    ``url``, ``token``, ``ca``, ``token_file`` and ``insecure`` are resolved as the ``plexus``
    CLI resolves ``--coordinator``, ``$PLEXUS_TOKEN``, ``--ca``, ``--token-file`` and
    ``--insecure`` (see :mod:`plexus._target`): with no arguments it reaches the ``plexus up``
    cluster of the current directory, else the current context (``plexus context``); ``context``
    names another. ``timeout`` bounds each unary call (seconds;
    None: no bound). ``keepalive``: while a call is in flight, the coordinator is pinged after
    this many seconds without data, and a coordinator that does not answer within as long again
    (frozen, cut off) fails the call with ``Unavailable``. Nothing is dialled until the first call. Use it as a context manager, or
    call :meth:`close`.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        ca: Union[PathLike, bytes, None] = None,
        token_file: Optional[PathLike] = None,
        insecure: bool = False,
        timeout: Optional[float] = None,
        keepalive: float = KEEPALIVE_S,
        context: Optional[str] = None,
    ) -> None:
        self._target = Target.resolve(url, token, ca=ca, token_file=token_file, insecure=insecure, context=context)
        self._timeout = timeout
        if not keepalive > 0:
            raise ValueError(f"keepalive is a positive number of seconds, not {keepalive!r}")
        self._keepalive_ms = max(int(keepalive * 1000), 1)
        self._lock = threading.Lock()
        self._conn: Optional[_Connection] = None
        self._closed = False
        self._metadata: Tuple[Tuple[str, str], ...] = (
            (("authorization", f"Bearer {self._target.token}"),) if self._target.token else ()
        )

    # ------------------------------------------------------------------ the public calls

    @property
    def target(self) -> Target:
        """The resolved coordinators and credentials."""
        return self._target

    @property
    def url(self) -> str:
        """The coordinator in use, or the configured list before the first call."""
        conn = self._conn
        return conn.url if conn is not None else ",".join(self._target.urls)

    def submit(
        self,
        job: JobSource,
        *,
        format: Optional[str] = None,
        filename: Optional[str] = None,
        after: Union[str, "Job", Iterable[Union[str, "Job"]]] = (),
    ) -> "Job":
        """Submits a job and returns it; the coordinator parses and checks it, and a refused file
        raises :class:`~plexus.errors.InvalidJob` with its ``file:line: why`` message.

        ``job`` is a path (``str`` or ``os.PathLike``: TOML, or JSON when it ends in ``.json``),
        a mapping (sent as JSON, with the keys of a job file), or the file's text (a ``str`` with
        a newline, or one starting with ``{`` or holding ``=`` that names no file). ``filename``
        is what error messages call it (default: the path, or ``job.toml``/``job.json``).
        ``after``: jobs (ids, unique prefixes, names, or :class:`Job`) that must succeed
        first, added to the file's ``after_jobs``.
        """
        source, fmt, name = _job_source(job, format, filename)
        if isinstance(after, (str, Job)):
            after = (after,)
        after_ids = [a.id if isinstance(a, Job) else self.job(a).id for a in after]
        base = Path(job).parent if isinstance(job, os.PathLike) or (isinstance(job, str) and not _is_text(job)) else None
        upload = None
        inlined = _requirements.inline(source, fmt, base)
        if inlined is not None:
            source, fmt = inlined, "json"
        code = _working_dir.declared(source, fmt, base)
        if code is not None:
            upload = self.upload_working_dir(code[0], excludes=code[1])
        request = pb.SubmitJobRequest(
            source=source, format=fmt, filename=name, after_jobs=after_ids, working_dir=upload.digest if upload else b""
        )
        response = self._unary("SubmitJob", request)
        submitted = Job(self, response.job_id, subtasks=response.subtasks)
        submitted.working_dir = upload
        return submitted

    def plan(self, job: JobSource, *, format: Optional[str] = None, filename: Optional[str] = None) -> "Plan":
        """What submitting ``job`` now would do, without storing anything (``plexus submit
        --dry-run``): raises :class:`~plexus.errors.InvalidJob` as ``submit`` would, else returns
        the :class:`~plexus.types.Plan` — per task, how many replicas would start now and where,
        or why they would wait, and what is ahead of it in its queue. A ``working_dir`` is not
        uploaded."""
        source, fmt, name = _job_source(job, format, filename)
        base = Path(job).parent if isinstance(job, os.PathLike) or (isinstance(job, str) and not _is_text(job)) else None
        inlined = _requirements.inline(source, fmt, base)
        if inlined is not None:
            source, fmt = inlined, "json"
        response = self._unary("SubmitJob", pb.SubmitJobRequest(source=source, format=fmt, filename=name, dry_run=True))
        return convert.plan(response.subtasks, response.dry_run)

    def upload_working_dir(self, directory: PathLike, *, excludes: Sequence[str] = ()) -> "WorkingDirUpload":
        """Packs ``directory`` as a job's ``working_dir`` (``.gitignore`` and ``excludes``
        honoured) and uploads it unless the coordinator holds it already; ``submit`` does this
        for a job file that names a ``working_dir``. Raises ``ValueError`` naming
        ``working_dir`` for a directory that cannot be packed or is over the coordinator's limit."""
        packed = _working_dir.pack(Path(directory), excludes)
        digest = _blake3(packed.data)
        stat = self._unary("StatWorkingDir", pb.StatWorkingDirRequest(digest=digest))
        sent = 0
        if not stat.present:
            if len(packed.data) > stat.limit_bytes:
                raise _working_dir.WorkingDirError(
                    f"working_dir: {directory} packs to {len(packed.data)} bytes, over the coordinator's limit of "
                    f"{stat.limit_bytes} bytes; leave large files out with `excludes` or .gitignore"
                )
            chunk = 1 << 20
            chunks = [
                pb.WorkingDirChunk(
                    digest=digest if i == 0 else b"", size=len(packed.data) if i == 0 else 0, data=packed.data[i : i + chunk]
                )
                for i in range(0, max(len(packed.data), 1), chunk)
            ]
            sent = self._unary("UploadWorkingDir", lambda: iter(chunks)).received_bytes
        return WorkingDirUpload(digest=digest, size=len(packed.data), entries=packed.entries, uploaded=sent)

    def job(self, ref: str) -> "Job":
        """The job ``ref`` names: its id, a unique prefix of its id (with or without ``job-``), or
        its name when one job has it (as the CLI's JOB arguments). A full id is taken as it is
        (an unknown one raises :class:`~plexus.errors.NotFound` at the first call); otherwise
        the coordinator's job list is searched, and no match raises ``NotFound``, several a
        :class:`~plexus.errors.PlexusError` naming them."""
        _check_job_ref(ref)
        if _JOB_ID.fullmatch(ref):
            return Job(self, ref)
        jobs = self._unary("ListJobs", pb.ListJobsRequest()).jobs
        named = by_name([(j.job_id, j.name, j.submitted_at) for j in jobs], ref)
        if named is not None:
            return Job(self, named)
        items = [(j.job_id, j.name) for j in jobs]
        return Job(self, resolve_ref(items, ref, prefix="job-", what="job", name="name", listed_by="plexus status"))

    def jobs(self, *, state: Union[JobState, str, None] = None, name: Optional[str] = None, limit: Optional[int] = None) -> List[JobStatus]:
        """Every job the coordinator keeps (summaries, no subtasks), as ``plexus status``:
        only those in ``state``, whose name contains ``name``, the newest ``limit``."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit must be a whole number of jobs, 0 or more, not {limit!r}")
        want = None
        if state is not None:
            try:
                want = JobState(state)
            except ValueError:
                raise ValueError(f"unknown job state {state!r}: one of {', '.join(s.value for s in JobState if s is not JobState.UNSPECIFIED)}") from None
        statuses = [convert.job_status(j) for j in self._unary("ListJobs", pb.ListJobsRequest()).jobs]
        if want is not None:
            statuses = [s for s in statuses if s.state == want]
        if name is not None:
            statuses = [s for s in statuses if name in s.name]
        if limit is not None and len(statuses) > limit:
            newest = sorted(range(len(statuses)), key=lambda i: statuses[i].submitted_at or _EPOCH, reverse=True)
            keep = set(newest[:limit])
            statuses = [s for i, s in enumerate(statuses) if i in keep]
        return statuses

    def workers(self, page_size: int = 500) -> List[WorkerInfo]:
        """The workers the coordinator knows, alive or not, in id order (``plexus workers``),
        asked for ``page_size`` at a time (at most 5,000)."""
        if not 1 <= page_size <= 5000:
            raise ValueError(f"page_size must be between 1 and 5000, not {page_size}")
        out: List[WorkerInfo] = []
        token = ""
        while True:
            page = self._unary("ListWorkers", pb.ListWorkersRequest(page_size=page_size, page_token=token))
            out.extend(convert.worker(w) for w in page.workers)
            if not page.next_page_token:
                return out
            token = page.next_page_token

    def workers_summary(self) -> WorkersSummary:
        """The cluster in counts and sums, in one request at any size (``plexus workers --summary``)."""
        response = self._unary("ListWorkers", pb.ListWorkersRequest(summary_only=True))
        return convert.workers_summary(response.summary)

    def coordinators(self) -> List[CoordinatorInfo]:
        """The coordinators of the control plane and which one leads (``plexus coordinators``)."""
        response = self._unary("ListCoordinators", pb.ListCoordinatorsRequest())
        return [convert.coordinator(c) for c in response.coordinators]

    def close(self) -> None:
        """Closes the connection; calls after it (and calls it cuts short) raise
        :class:`~plexus.errors.PlexusError` saying the client is closed."""
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    # ------------------------------------------------------------------ connecting

    def _open(self, url: str) -> _Connection:
        address, tls = grpc_address(url)
        options: List[Tuple[str, Any]] = [
            ("grpc.max_receive_message_length", MAX_MESSAGE),
            ("grpc.max_send_message_length", MAX_MESSAGE),
            # As the CLI (tonic): straight to the coordinator, whatever *_proxy says.
            ("grpc.enable_http_proxy", 0),
            # A coordinator that stops answering (frozen, cut off) fails the calls in flight
            # after KEEPALIVE_S + KEEPALIVE_S, where TCP alone would wait for ever.
            ("grpc.keepalive_time_ms", self._keepalive_ms),
            ("grpc.keepalive_timeout_ms", self._keepalive_ms),
            # Newer grpc-core waits this long for a ping's answer, whatever keepalive_timeout says.
            ("grpc.http2.ping_timeout_ms", self._keepalive_ms),
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.keepalive_permit_without_calls", 0),
        ]
        if tls:
            if self._target.ca is None:
                raise ConfigError(
                    "no CA certificate to check the coordinator with: pass ca=FILE or set PLEXUS_CA "
                    "(ca.pem in the coordinator's data dir), or insecure=True for a coordinator run with --insecure"
                )
            # The coordinator's certificate names COORDINATOR_NAME, whatever address was dialled.
            options.append(("grpc.ssl_target_name_override", COORDINATOR_NAME))
            credentials = grpc.ssl_channel_credentials(root_certificates=self._target.ca)
            channel = grpc.secure_channel(address, credentials, options=options)
        else:
            channel = grpc.insecure_channel(address, options=options)
        return _Connection(url, channel)

    def _probe(self, conn: _Connection) -> Tuple[bool, bool, Optional[str], str]:
        """Asks ``conn``'s coordinator who leads: (it answered, it is the one to use: it leads or
        cannot say, the leader's URL when another coordinator leads, why it did not answer)."""
        try:
            response = conn.stub.ListCoordinators(
                pb.ListCoordinatorsRequest(),
                metadata=self._metadata,
                # A client asked to give up sooner than the CLI's connect timeout does so here too.
                timeout=CONNECT_TIMEOUT if self._timeout is None else min(CONNECT_TIMEOUT, self._timeout),
            )
        except grpc.RpcError as e:
            hint = _leader_hint(e)
            if hint is not None:
                return True, False, hint, ""
            if e.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return False, False, None, one_line(e.details() or e.code().name)
            # It answered (an older coordinator without the call, a token without the scope):
            # it is the one to use, and the real call will say what is wrong.
            return True, True, None, ""
        coordinators = list(response.coordinators)
        if not coordinators or any(c.me and c.leader for c in coordinators):
            return True, True, None, ""
        leader = next((c.url for c in coordinators if c.leader), None)
        return True, False, (leader if leader and leader != conn.url else None), ""

    def _connect(self) -> _Connection:
        """The first coordinator of the list that leads, or the leader a standby names. When the
        leader's advertised URL does not answer from here (a name only a container network
        resolves), the rest of the list is tried; no leader reached: the first standby, whose
        refusals name the leader."""
        failures: List[Tuple[str, str]] = []
        standby: Optional[_Connection] = None
        for url in self._target.urls:
            conn = self._open(url)
            answered, leads, leader, why = self._probe(conn)
            if not answered:
                conn.close()
                failures.append((url, why))
                continue
            if leads:
                if standby is not None:
                    standby.close()
                return conn
            if leader is not None:
                try:
                    there: Optional[_Connection] = self._open(normalise_url(leader, self._target.insecure))
                except ConfigError:
                    there = None
                if there is not None:
                    if self._probe(there)[1]:
                        conn.close()
                        if standby is not None:
                            standby.close()
                        return there
                    there.close()
            if standby is None:
                standby = conn
            else:
                conn.close()
        if standby is not None:
            return standby
        url, why = failures[-1] if failures else (",".join(self._target.urls), "no coordinator URL given")
        raise Unavailable(unreachable(url, why), grpc.StatusCode.UNAVAILABLE, url)

    def _connection(self) -> _Connection:
        with self._lock:
            if self._closed:
                raise PlexusError(CLOSED, grpc.StatusCode.CANCELLED)
            if self._conn is None:
                self._conn = self._connect()
            return self._conn

    def _switch_to(self, leader: str, stale: _Connection) -> _Connection:
        """Replaces ``stale`` by a connection to ``leader``, the URL a standby named."""
        conn = self._open(normalise_url(leader, self._target.insecure))
        with self._lock:
            if self._conn is stale:
                stale.close()
            self._conn = conn
        return conn

    def _failed(self, error: grpc.RpcError, conn: _Connection) -> PlexusError:
        """The exception for a failed call; a connection that went away is dropped, so that the
        next call starts over from the list of coordinators."""
        if self._closed:
            return PlexusError(CLOSED, grpc.StatusCode.CANCELLED, conn.url)
        if isinstance(error, grpc.Call) and error.code() == grpc.StatusCode.UNAVAILABLE:
            with self._lock:
                if self._conn is conn:
                    conn.close()
                    self._conn = None
        return from_rpc(error, conn.url)

    def _retarget(self, error: grpc.RpcError, conn: _Connection) -> _Connection:
        """Where to send a call again that failed on ``conn`` with ``error``, before any answer:
        the leader a standby named; or, when the call never reached ``conn``'s coordinator (it is
        gone: a leader killed, say) and there are others, whichever of the list leads now.
        Anything else raises the call's error."""
        leader = _leader_hint(error)
        if leader is not None:
            return self._switch_to(leader, conn)
        if len(self._target.urls) > 1 and never_sent(error):
            self._failed(error, conn)
            try:
                return self._connection()
            except PlexusError:
                pass
        raise self._failed(error, conn) from None

    def _invoke(self, conn: _Connection, method: str, request: Any, timeout: Optional[float]) -> Any:
        """``method`` on ``conn``: a unary call's answer, or a stream's call object. grpc raises
        ValueError for a channel closed under it: the client was closed meanwhile."""
        try:
            # A client stream is given as a function making its iterator: a call sent again (to
            # the leader) sends it from its start.
            payload = request() if callable(request) else request
            return getattr(conn.stub, method)(payload, metadata=self._metadata, timeout=timeout)
        except ValueError:
            if self._closed:
                raise PlexusError(CLOSED, grpc.StatusCode.CANCELLED, conn.url) from None
            raise

    def _invoke_shed(self, conn: _Connection, method: str, request: Any, timeout: Optional[float]) -> Any:
        """``_invoke`` of a unary call, sent again while the coordinator sheds it (``shed_wait``)."""
        started, tries = time.monotonic(), 0
        while True:
            try:
                return self._invoke(conn, method, request, timeout)
            except grpc.RpcError as e:
                wait = shed_wait(e, tries, time.monotonic() - started)
                if wait is None:
                    raise
                tries += 1
                time.sleep(wait)

    def _unary(self, method: str, request: Any, timeout: Optional[float] = None) -> Any:
        conn = self._connection()
        timeout = timeout if timeout is not None else self._timeout
        try:
            return self._invoke_shed(conn, method, request, timeout)
        except grpc.RpcError as e:
            conn = self._retarget(e, conn)
            try:
                return self._invoke_shed(conn, method, request, timeout)
            except grpc.RpcError as again:
                raise self._failed(again, conn) from None

    def _stream(self, method: str, request: Any, timeout: Optional[float] = None) -> Iterator[Any]:
        """The messages of a server stream. A standby's refusal, or a coordinator gone (before any
        message), is followed once, as for a unary call; a shed refusal is sent again
        (``shed_wait``)."""
        conn = self._connection()
        call = self._invoke(conn, method, request, timeout)
        try:
            started, tries, retargeted = time.monotonic(), 0, False
            while True:
                try:
                    first = next(call)
                    break
                except StopIteration:
                    return
                except grpc.RpcError as e:
                    wait = shed_wait(e, tries, time.monotonic() - started)
                    if wait is not None:
                        tries += 1
                        time.sleep(wait)
                    elif retargeted:
                        raise self._failed(e, conn) from None
                    else:
                        conn = self._retarget(e, conn)
                        retargeted = True
                    call.cancel()
                    call = self._invoke(conn, method, request, timeout)
            yield first
            try:
                for message in call:
                    yield message
            except grpc.RpcError as e:
                raise self._failed(e, conn) from None
        finally:
            call.cancel()


class Job:
    """A job of a coordinator, by id. Every method asks the coordinator afresh."""

    def __init__(self, client: Client, job_id: str, subtasks: Optional[int] = None) -> None:
        self.client = client
        self.id = job_id
        #: The number of subtasks the coordinator expanded it into, when it was just submitted.
        self.subtasks = subtasks
        #: What ``submit`` packed and uploaded of the job's ``working_dir`` (``None``: none).
        self.working_dir: Optional[WorkingDirUpload] = None

    def __repr__(self) -> str:
        return f"Job({self.id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def status(self, subtasks: bool = False) -> JobStatus:
        """The job's status; with ``subtasks``, one entry per subtask (``plexus status JOB
        --subtasks``)."""
        return convert.job_status(self.client._unary("GetJob", pb.GetJobRequest(job_id=self.id, subtasks=subtasks)))

    def wait(self, progress: bool = True, *, check: bool = True, timeout: Optional[float] = None) -> JobStatus:
        """Follows the job until it ends (``plexus watch``) and returns its final status, with
        subtasks. With ``progress`` and stderr on a terminal, draws a bar per task group. A job
        that did not succeed (failed, completed with failures, cancelled) raises
        :class:`~plexus.errors.JobFailed`, carrying the failed subtasks' errors, unless
        ``check`` is false. A coordinator that goes away is reconnected to with back-off for up
        to ten minutes. ``timeout`` (seconds) raises ``TimeoutError`` if the job is still
        running then."""
        deadline = time.monotonic() + timeout if timeout is not None else None
        bars = Bars(sys.stderr, enabled=progress and _is_terminal(sys.stderr))
        last: Optional[JobStatus] = None
        pause = RECONNECT_FIRST
        lost_since: Optional[float] = None
        try:
            while True:
                remaining = None if deadline is None else max(deadline - time.monotonic(), 0.001)
                try:
                    for message in self.client._stream("WatchJob", pb.WatchJobRequest(job_id=self.id), timeout=remaining):
                        lost_since, pause = None, RECONNECT_FIRST
                        last = convert.job_status(message)
                        bars.update(last)
                    if last is not None and last.finished:
                        break
                    why = "the coordinator ended the watch before the job finished"
                except PlexusError as e:
                    if e.code == grpc.StatusCode.DEADLINE_EXCEEDED and deadline is not None:
                        raise TimeoutError(f"job {self.id} is still running after {timeout} s") from None
                    if e.code not in _RETRYABLE:
                        raise
                    why = e.message
                now = time.monotonic()
                lost_since = lost_since if lost_since is not None else now
                if now - lost_since > RECONNECT_FOR:
                    raise PlexusError(
                        f"lost the coordinator at {self.client.url} for {int(RECONNECT_FOR)} s while watching {self.id} "
                        f"({why}); the job may still be running",
                        grpc.StatusCode.UNAVAILABLE,
                        self.client.url,
                    )
                if deadline is not None and now >= deadline:
                    raise TimeoutError(f"job {self.id} is still running after {timeout} s ({why})")
                time.sleep(pause if deadline is None else min(pause, deadline - now))
                pause = min(pause * 2, RECONNECT_MAX)
        finally:
            bars.close()
        final = self.status(subtasks=True)
        if check and final.state != JobState.SUCCEEDED:
            raise JobFailed(final, final.failed_subtasks)
        return final

    def cancel(self) -> JobStatus:
        """Cancels the job (``plexus cancel``) and returns its resulting status."""
        return convert.job_status(self.client._unary("CancelJob", pb.CancelJobRequest(job_id=self.id)))

    def logs(self, task: str, rank: int = 0, *, attempt: Optional[int] = None) -> Logs:
        """The stdout and stderr of one subtask (``plexus logs JOB TASK --rank R``): its latest
        attempt that reached a worker, or ``attempt`` (1 is the first)."""
        request = pb.GetLogsRequest(job_id=self.id, task=_check_task(task), rank=_u32("rank", rank), attempt=_u32("attempt", attempt or 0))
        return convert.logs(self.client._unary("GetLogs", request))

    def explain(self, task: str, rank: int = 0) -> Explanation:
        """Why the placer put the subtask's latest attempt where it did, with every candidate it
        considered (``plexus explain``)."""
        request = pb.ExplainPlacementRequest(job_id=self.id, task=_check_task(task), rank=_u32("rank", rank))
        return convert.explanation(self.client._unary("ExplainPlacement", request))

    def resubmit(self) -> "Job":
        """The same job file again, as a new job (``plexus resubmit``)."""
        response = self.client._unary("ResubmitJob", pb.ResubmitJobRequest(job_id=self.id))
        return Job(self.client, response.job_id, subtasks=response.subtasks)

    def get(self, task: str, rank: Optional[int] = None, output: Optional[str] = None, dest: PathLike = ".") -> List[Path]:
        """Downloads outputs of finished subtasks (``plexus get JOB TASK[/RANK[/OUTPUT]] -o
        DEST``) into ``DEST/TASK/RANK/OUTPUT``, each checked against its size, and returns the
        paths written. The coordinator relays each from whichever live worker holds it, checking
        it against the digest its attempt reported: a copy that does not match raises
        ``PlexusError`` (gRPC DATA_LOSS, naming the object, the holder and both digests) and
        nothing is written; that holder is then treated as having lost the object."""
        _check_task(task)
        if rank is not None:
            _u32("rank", rank)
        status = self.status(subtasks=True)
        if not any(g.task == task for g in status.groups):
            tasks = ", ".join(g.task for g in status.groups)
            raise NotFound(f"job {self.id} has no task {json.dumps(task)} (its tasks: {tasks})")
        wanted = [
            (o, s.rank)
            for s in status.subtasks
            if s.task == task and (rank is None or s.rank == rank)
            for o in s.outputs
            if output is None or o.name == output
        ]
        if not wanted:
            what = task + (f"/{rank}" if rank is not None else "") + (f"/{output}" if output is not None and rank is not None else "")
            if output is not None and rank is None:
                what += f"/*/{output}"
            raise NotFound(
                f"nothing to get: no finished subtask of {self.id} matches {json.dumps(what)} "
                "(outputs exist once a subtask has succeeded)"
            )
        written: List[Path] = []
        for o, r in wanted:
            # Task and output names are checked to be safe path components when a job is accepted.
            path = Path(dest) / task / str(r) / o.name
            _download(self.client, o.object_id, o.size, path)
            written.append(path)
        return written


def _download(client: Client, object_id: str, size: int, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # A name no output can have (output names never start with a dot).
    partial = path.with_name("." + path.name + ".plexus-partial")
    got = 0
    try:
        with open(partial, "wb") as f:
            for chunk in client._stream("GetObject", pb.GetObjectRequest(object_id=object_id)):
                got += len(chunk.data)
                if got > size:
                    raise PlexusError(f"{object_id}: the holder sent more than its {size} bytes", None, client.url)
                f.write(chunk.data)
            if got != size:
                raise PlexusError(f"{object_id}: got {got} of its {size} bytes", None, client.url)
            f.flush()
            os.fsync(f.fileno())
        os.replace(partial, path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise


def by_name(jobs: Sequence[Tuple[str, str, int]], reference: str) -> Optional[str]:
    """A job named as git names commits: ``NAME`` is the newest job (id, name, submitted_at) of
    that name, ``NAME~N`` the one N runs before it; ``None`` when no job has the name (it may be
    an id prefix). As the CLI's ``by_name``."""
    name, back = reference, 0
    if "~" in reference:
        name, _, k = reference.rpartition("~")
        if not k.isdigit():
            raise ValueError(f"{json.dumps(reference)}: after '~' comes how many runs back, e.g. {name}~1 (the run before {name})")
        back = int(k)
    runs = sorted(((at, i) for i, n, at in jobs if n == name), reverse=True)
    if not runs:
        if "~" in reference:
            raise NotFound(f"no job is named {json.dumps(name)} (`plexus status` lists them)")
        return None
    if back >= len(runs):
        raise NotFound(
            f"{json.dumps(reference)}: {json.dumps(name)} has {len(runs)} run(s); {name} is the newest and {name}~{len(runs) - 1} the oldest"
        )
    return runs[back][1]


def resolve_ref(items: Sequence[Tuple[str, str]], reference: str, *, prefix: str, what: str, name: str, listed_by: str) -> str:
    """The id of the one item (id, name) that ``reference`` names: its id, a prefix of its id's
    hex digits (with or without ``prefix``), or its name; as the CLI's ``resolve_ref``."""
    hex_part = (reference[len(prefix):] if reference.startswith(prefix) else reference).lower()
    by_id = all(c in "0123456789abcdef" for c in hex_part) and (reference.startswith(prefix) or hex_part != "")
    matches = [
        (i, n)
        for i, n in items
        if i == reference or (by_id and i.startswith(prefix) and i[len(prefix):].startswith(hex_part)) or n == reference
    ]
    if len(matches) == 1:
        return matches[0][0]
    if not matches:
        raise NotFound(
            f"no {what} matches {json.dumps(reference)}: it is neither a prefix of a {what} id nor a {what}'s {name} "
            f"(`{listed_by}` lists them)"
        )
    shown = ", ".join(f"{i} ({n})" for i, n in matches[:5])
    more = f" and {len(matches) - 5} more" if len(matches) > 5 else ""
    raise PlexusError(f"{json.dumps(reference)} matches {len(matches)} {what}s: {shown}{more}; give more of the id")


def _check_job_ref(ref: str) -> None:
    """The form of a job reference, checked as the CLI checks its JOB arguments."""
    if not isinstance(ref, str):
        raise TypeError(f"a job reference is a str (an id, a unique prefix of one, or a name), not {type(ref).__name__}")
    if not ref:
        raise ValueError("an empty job reference: give a job id, a unique prefix of one, or a job's name")
    if len(ref) > _MAX_JOB_REF or any(c.isspace() or not c.isprintable() for c in ref):
        raise ValueError(f"{json.dumps(ref)} is not a job id, prefix or name (at most {_MAX_JOB_REF} characters, no spaces)")
    if ref.startswith("wkr-"):
        raise ValueError(f"{json.dumps(ref)} is a worker id; expected the prefix \"job-\" (or a job's name)")
    if ref.startswith("job-"):
        hex_part = ref[4:]
        if len(hex_part) > 32 or not all(c in "0123456789abcdefABCDEF" for c in hex_part):
            raise ValueError(f"{json.dumps(ref)}: after \"job-\" a job id has up to 32 hex digits")


#: The coordinator's bound on a job file (``coordinator/src/rpc.rs``), checked here first so that
#: a file too large gets the same words whatever its size.
MAX_JOB_SOURCE = 16 << 20


@dataclass(frozen=True)
class WorkingDirUpload:
    """A packed working dir: its BLAKE3 ``digest`` (32 bytes), archive ``size`` and ``entries``,
    and the bytes ``uploaded`` (0 when the coordinator held it already)."""

    digest: bytes
    size: int
    entries: int
    uploaded: int


def _blake3(data: bytes) -> bytes:
    """BLAKE3 of ``data``: the ``blake3`` package, the coordinator's content address."""
    try:
        import blake3  # type: ignore[import-not-found]
    except ImportError:
        raise ConfigError("a working_dir needs the `blake3` package (pip install blake3), the coordinator's content hash") from None
    return blake3.blake3(data).digest()


def _job_source(job: JobSource, format: Optional[str], filename: Optional[str]) -> Tuple[str, str, str]:
    """(text, format, filename) of what ``submit`` was given."""
    if isinstance(job, Mapping):
        fmt = format or "json"
        if fmt != "json":
            raise ValueError(f"a job given as a mapping is sent as JSON, not {fmt!r}")
        try:
            # Indented, so that the coordinator's line numbers point at one key each.
            text = json.dumps(dict(job), indent=2, allow_nan=False) + "\n"
        except (TypeError, ValueError) as e:
            raise ValueError(f"the job cannot be sent as JSON: {e}") from None
        except RecursionError:
            raise ValueError("the job cannot be sent as JSON: it is nested too deeply") from None
        return _bounded(text, "json", filename or "job.json")
    if isinstance(job, bytes):
        try:
            job = job.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidJob(f"{filename or 'job.toml'}: not UTF-8 text ({e})", grpc.StatusCode.INVALID_ARGUMENT) from None
    if isinstance(job, str) and not job.strip():
        raise ValueError("the job is empty: give a job file's path, its text, or a mapping")
    if isinstance(job, str) and _is_text(job):
        fmt = format or ("json" if job.lstrip().startswith("{") else "toml")
        return _bounded(job, fmt, filename or f"job.{fmt}")
    if isinstance(job, (str, os.PathLike)):
        path = Path(job)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise InvalidJob(f"{filename or path}: not UTF-8 text ({e})", grpc.StatusCode.INVALID_ARGUMENT) from None
        fmt = format or ("json" if path.suffix.lower() == ".json" else "toml")
        return _bounded(text, fmt, filename or str(path))
    raise TypeError(f"a job is a path, a mapping or a job file's text, not {type(job).__name__}")


def _bounded(text: str, fmt: str, name: str) -> Tuple[str, str, str]:
    if len(text.encode("utf-8")) > MAX_JOB_SOURCE:
        raise InvalidJob(f"{name}: job file is larger than {MAX_JOB_SOURCE >> 20} MiB", grpc.StatusCode.INVALID_ARGUMENT)
    return text, fmt, name


def _check_task(task: str) -> str:
    if not isinstance(task, str) or not task:
        raise ValueError(f"a task is named by a non-empty string, not {task!r}")
    return task


def _u32(what: str, value: int) -> int:
    """A rank or attempt number as the protocol carries it, or a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise ValueError(f"{what} must be a whole number from 0 to {2**32 - 1}, not {value!r}")
    return value


def _is_text(s: str) -> bool:
    if "\n" in s:
        return True
    if os.path.exists(s):
        return False
    # One line naming a .toml or .json file is a path, even one that does not exist (a typo
    # then says so, instead of being parsed as TOML).
    if s.strip().lower().endswith((".toml", ".json")) and not s.lstrip().startswith("{"):
        return False
    return s.lstrip().startswith("{") or "=" in s


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False

