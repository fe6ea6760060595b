"""The typed results of the client: plain dataclasses, built from the gRPC messages in one place
(``_convert``), so callers never handle protobuf objects.

Times are ``datetime`` in UTC, or ``None`` where the coordinator sent 0 ("not yet"); sizes are
bytes; durations that the coordinator measures in milliseconds keep ``_ms`` in their name.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Dict, List, Optional


class JobState(str, enum.Enum):
    """A job's state (``plexus status`` prints these values)."""

    UNSPECIFIED = "unspecified"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    #: Every subtask ended, some failed under ``on_failure = "continue"``.
    COMPLETED_WITH_FAILURES = "completed-with-failures"

    @property
    def finished(self) -> bool:
        return self not in (JobState.RUNNING, JobState.UNSPECIFIED)


class SubtaskState(str, enum.Enum):
    UNSPECIFIED = "unspecified"
    WAITING = "waiting"
    READY = "ready"
    ASSIGNED = "assigned"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (SubtaskState.SUCCEEDED, SubtaskState.FAILED, SubtaskState.CANCELLED)


@dataclass(frozen=True)
class Output:
    """An output of a finished subtask: ``object_id`` is ``<job>/<task>/<rank>/<name>``;
    ``digest`` is the BLAKE3 of its bytes (64 hex digits) as its attempt reported it, empty when
    not known. ``Job.get`` receives only copies the coordinator checked against it."""

    object_id: str
    name: str
    size: int
    digest: str = ""


@dataclass(frozen=True)
class AttemptFailure:
    attempt: int
    worker_id: str
    exit_code: int
    error: str
    finished_at: Optional[datetime]


@dataclass(frozen=True)
class Subtask:
    """One replica of a task (``plexus status JOB --subtasks``)."""

    task: str
    rank: int
    state: SubtaskState
    attempt: int
    failures: int
    worker_id: str
    exit_code: int
    error: str
    ready_at: Optional[datetime]
    assigned_at: Optional[datetime]
    started_at: Optional[datetime]
    finished_at: Optional[datetime]
    fetch_ms: int
    fetched_bytes: int
    evicted_bytes: int
    outputs: List[Output]
    failed_attempts: List[AttemptFailure]
    reruns: int
    # Attempts placed again, uncounted, after no holder could serve one of their inputs.
    unfetched_requeues: int


@dataclass(frozen=True)
class TaskGroup:
    """A task and the counts of its replicas by state."""

    task: str
    replicas: int
    waiting: int
    ready: int
    assigned: int
    running: int
    succeeded: int
    failed: int
    cancelled: int
    #: Why ready replicas are not placed, when some wait.
    waiting_reason: str
    failed_attempts: int
    #: Tasks that must succeed first.
    after: List[str]

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.cancelled


@dataclass(frozen=True)
class Gang:
    """A gang: members of which ``min_members`` start together or none does."""

    name: str
    tasks: List[str]
    min_members: int
    members: int
    reserved: int
    phase: str
    rollbacks: int
    reason: str


@dataclass(frozen=True)
class JobStatus:
    """A job as the coordinator reports it. ``subtasks`` is filled only when asked for
    (``Job.status(subtasks=True)``, and the status ``Job.wait`` returns)."""

    id: str
    name: str
    state: JobState
    error: str
    submitted_at: Optional[datetime]
    finished_at: Optional[datetime]
    total_subtasks: int
    groups: List[TaskGroup]
    subtasks: List[Subtask] = field(default_factory=list)
    gangs: List[Gang] = field(default_factory=list)
    priority: int = 0
    queue: str = ""
    #: What it is doing: ``"pending"`` (nothing of it has started; ``phase_reason`` says why),
    #: ``"blocked"`` (waiting for its ``after_jobs``), ``"running"``, or how it ended.
    phase: str = ""
    phase_reason: str = ""
    #: When its first subtask started running (``None``: none has yet).
    started_at: Optional[datetime] = None
    #: A failed job: the subtask whose failure ended it, and the last lines of its stderr.
    failed_task: str = ""
    failed_rank: int = 0
    failed_stderr: str = ""

    @property
    def finished(self) -> bool:
        return self.state.finished

    @property
    def queued(self) -> Optional[float]:
        """Seconds from submission until its first subtask started (or, while none has, until
        now or its end)."""
        if self.submitted_at is None:
            return None
        end = self.started_at or self.finished_at or datetime.now(self.submitted_at.tzinfo)
        return max(0.0, (end - self.submitted_at).total_seconds())

    @property
    def ran(self) -> Optional[float]:
        """Seconds from its first subtask's start to its end (or to now while it runs)."""
        if self.started_at is None:
            return None
        end = self.finished_at or datetime.now(self.started_at.tzinfo)
        return max(0.0, (end - self.started_at).total_seconds())

    @property
    def succeeded(self) -> bool:
        return self.state == JobState.SUCCEEDED

    def group(self, task: str) -> TaskGroup:
        """The task group of ``task``; ``KeyError`` naming the job's tasks when there is none."""
        for g in self.groups:
            if g.task == task:
                return g
        raise KeyError(f"job {self.id} has no task {task!r} (its tasks: {', '.join(g.task for g in self.groups)})")

    def subtask(self, task: str, rank: int = 0) -> Subtask:
        for s in self.subtasks:
            if s.task == task and s.rank == rank:
                return s
        raise KeyError(f"no subtask {task}/{rank} in this status of job {self.id} (fetched with subtasks?)")

    @property
    def failed_subtasks(self) -> List[Subtask]:
        return [s for s in self.subtasks if s.state == SubtaskState.FAILED]


@dataclass(frozen=True)
class Logs:
    """A subtask's output as the worker (or, when it is gone, the coordinator's tail) has it.
    Bytes as the task wrote them; ``stdout_text``/``stderr_text`` decode them."""

    stdout: bytes
    stderr: bytes
    worker_id: str
    attempt: int
    #: Only the tail kept by the coordinator could be served.
    truncated: bool
    #: The subtask's state now.
    state: SubtaskState
    latest_attempt: int

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Resources:
    cpu: float
    memory: int
    gpu: int


@dataclass(frozen=True)
class TaskPlan:
    """One task of a dry run (``Client.plan``): how many of its replicas would start now and
    on which workers, and why the others (or all) would wait ("" when none would)."""

    task: str
    replicas: int
    resources: Resources
    start_now: int
    workers: List[str]
    waits: str


@dataclass(frozen=True)
class Plan:
    """What submitting a job now would do (``plexus submit --dry-run``); nothing was stored."""

    subtasks: int
    queue: str
    priority: int
    tasks: List[TaskPlan]
    #: Ready subtasks (of ``ahead_jobs`` jobs) its queue would place before it.
    ahead: int
    ahead_jobs: int
    #: Cores its root tasks ask for at once, and what the live workers have.
    cores: float
    cluster_cores: float


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory: int
    utilisation: Optional[float] = None
    memory_used: Optional[int] = None


@dataclass(frozen=True)
class WorkersSummary:
    """Counts and sums over every worker (``plexus workers --summary``)."""

    total: int
    alive: int
    lost: int
    draining: int
    #: Attempts placed and not finished.
    assigned: int
    #: Held and offered, over the alive workers.
    cpu_held: float
    cpu_offered: float
    memory_held: int
    memory_offered: int
    gpus_held: int
    gpus_offered: int


@dataclass(frozen=True)
class WorkerInfo:
    """A worker the coordinator knows (``plexus workers``)."""

    id: str
    alive: bool
    draining: bool
    hostname: str
    peer_addr: str
    cpus: int
    memory: int
    gpus: List[Gpu]
    rails: List[str]
    isolation: str
    labels: Dict[str, str]
    cache_bytes: int
    cache_used: int
    cpu_utilisation: float
    memory_free: int
    #: Attempts placed on it and not finished.
    assigned: int
    allocated: Resources
    last_heartbeat: Optional[datetime]
    #: Measured relative speed (> 1 is faster than the cluster's mean; 0 = not measured).
    relative_speed: float


@dataclass(frozen=True)
class Candidate:
    """A worker the placer considered for a subtask, with what it saw there."""

    worker_id: str
    feasible: bool
    #: Higher is better (a Q-value under the learned placer).
    score: float
    features: Dict[str, float]
    #: Why it was infeasible, when it was.
    note: str
    chosen: bool


@dataclass(frozen=True)
class Explanation:
    """Why a subtask's latest attempt went where it did (``plexus explain``)."""

    placer: str
    attempt: int
    chosen_worker: str
    exploratory: bool
    reason: str
    decided_at: Optional[datetime]
    candidates: List[Candidate]
    #: A collective member's algorithm and why; empty for other tasks.
    collective: str = ""
    #: The learned placer's record when the coordinator runs one (its departures from
    #: ``fastest``, what they gained, the guard); empty for a heuristic.
    learner: str = ""
    #: Candidates considered and not kept (a decision keeps the chosen and the best 31).
    omitted: int = 0

    @property
    def chosen(self) -> Optional[Candidate]:
        return next((c for c in self.candidates if c.chosen), None)


@dataclass(frozen=True)
class CoordinatorInfo:
    """A coordinator of the control plane (several with an HA control plane)."""

    id: str
    url: str
    leader: bool
    started_at: Optional[datetime]
    #: The coordinator that answered.
    me: bool
