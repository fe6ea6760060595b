"""Where gRPC messages become the client's dataclasses: the one place that reads protobuf."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from . import types as t
from ._pb import pb


def when(ms: int) -> Optional[datetime]:
    """Milliseconds since the epoch as a UTC datetime; 0 ("not yet") as None."""
    return datetime.fromtimestamp(ms / 1000.0, tz=timezone.utc) if ms else None


def _enum_name(enum_type: Any, value: int) -> str:
    try:
        return str(enum_type.Name(value))
    except ValueError:
        return ""


def job_state(value: int) -> t.JobState:
    name = _enum_name(pb.JobState, value).removeprefix("JOB_STATE_").lower().replace("_", "-")
    try:
        return t.JobState(name)
    except ValueError:
        # A state added to the contract after this client was built.
        return t.JobState.UNSPECIFIED


def subtask_state(value: int) -> t.SubtaskState:
    name = _enum_name(pb.SubtaskState, value).removeprefix("SUBTASK_STATE_").lower()
    try:
        return t.SubtaskState(name)
    except ValueError:
        return t.SubtaskState.UNSPECIFIED


def output(o: Any) -> t.Output:
    return t.Output(object_id=o.object_id, name=o.object_id.rsplit("/", 1)[-1], size=o.size, digest=o.digest.hex())


def attempt_failure(f: Any) -> t.AttemptFailure:
    return t.AttemptFailure(
        attempt=f.attempt, worker_id=f.worker_id, exit_code=f.exit_code, error=f.error, finished_at=when(f.finished_at)
    )


def subtask(s: Any) -> t.Subtask:
    return t.Subtask(
        task=s.task,
        rank=s.rank,
        state=subtask_state(s.state),
        attempt=s.attempt,
        failures=s.failures,
        worker_id=s.worker_id,
        exit_code=s.exit_code,
        error=s.error,
        ready_at=when(s.ready_at),
        assigned_at=when(s.assigned_at),
        started_at=when(s.started_at),
        finished_at=when(s.finished_at),
        fetch_ms=s.fetch_ms,
        fetched_bytes=s.fetched_bytes,
        evicted_bytes=s.evicted_bytes,
        outputs=[output(o) for o in s.outputs],
        failed_attempts=[attempt_failure(f) for f in s.failed_attempts],
        reruns=s.reruns,
        unfetched_requeues=s.unfetched_requeues,
    )


def task_group(g: Any) -> t.TaskGroup:
    return t.TaskGroup(
        task=g.task,
        replicas=g.replicas,
        waiting=g.waiting,
        ready=g.ready,
        assigned=g.assigned,
        running=g.running,
        succeeded=g.succeeded,
        failed=g.failed,
        cancelled=g.cancelled,
        waiting_reason=g.waiting_reason,
        failed_attempts=g.failed_attempts,
        after=list(g.after),
    )


def gang(g: Any) -> t.Gang:
    return t.Gang(
        name=g.name,
        tasks=list(g.tasks),
        min_members=g.min_members,
        members=g.members,
        reserved=g.reserved,
        phase=g.phase,
        rollbacks=g.rollbacks,
        reason=g.reason,
    )


def job_status(s: Any) -> t.JobStatus:
    return t.JobStatus(
        id=s.job_id,
        name=s.name,
        state=job_state(s.state),
        error=s.error,
        submitted_at=when(s.submitted_at),
        finished_at=when(s.finished_at),
        total_subtasks=s.total_subtasks,
        groups=[task_group(g) for g in s.groups],
        subtasks=[subtask(x) for x in s.subtasks],
        gangs=[gang(g) for g in s.gangs],
        priority=s.priority,
        queue=s.queue,
        phase=s.phase or job_state(s.state).value,
        phase_reason=s.phase_reason,
        started_at=when(s.started_at),
        failed_task=s.failed_task,
        failed_rank=s.failed_rank,
        failed_stderr=s.failed_stderr,
    )


def plan(subtasks: int, d: Any) -> t.Plan:
    return t.Plan(
        subtasks=subtasks,
        queue=d.queue,
        priority=d.priority,
        tasks=[
            t.TaskPlan(
                task=p.task,
                replicas=p.replicas,
                resources=t.Resources(cpu=p.resources.cpu, memory=p.resources.memory, gpu=p.resources.gpu),
                start_now=p.start_now,
                workers=list(p.workers),
                waits=p.waits,
            )
            for p in d.tasks
        ],
        ahead=d.ahead,
        ahead_jobs=d.ahead_jobs,
        cores=d.cores,
        cluster_cores=d.cluster_cores,
    )


def logs(r: Any) -> t.Logs:
    return t.Logs(
        stdout=bytes(r.stdout),
        stderr=bytes(r.stderr),
        worker_id=r.worker_id,
        attempt=r.attempt,
        truncated=r.truncated,
        state=subtask_state(r.state),
        latest_attempt=r.latest_attempt,
    )


def workers_summary(s: Any) -> t.WorkersSummary:
    return t.WorkersSummary(
        total=s.total,
        alive=s.alive,
        lost=max(0, s.total - s.alive),
        draining=s.draining,
        assigned=s.assigned,
        cpu_held=s.cpu_held,
        cpu_offered=s.cpu_offered,
        memory_held=s.memory_held,
        memory_offered=s.memory_offered,
        gpus_held=s.gpus_held,
        gpus_offered=s.gpus_offered,
    )


def worker(w: Any) -> t.WorkerInfo:
    cap, state = w.capacity, w.state
    load = {g.index: g for g in state.gpus}
    gpus = [
        t.Gpu(
            index=g.index,
            name=g.name,
            memory=g.memory,
            utilisation=load[g.index].utilisation if g.index in load else None,
            memory_used=load[g.index].memory_used if g.index in load else None,
        )
        for g in cap.gpus
    ]
    return t.WorkerInfo(
        id=w.worker_id,
        alive=w.alive,
        draining=w.draining,
        hostname=cap.hostname,
        peer_addr=w.peer_addr,
        cpus=cap.cpus,
        memory=cap.memory,
        gpus=gpus,
        rails=list(cap.rails),
        isolation=state.isolation or cap.isolation,
        labels=dict(cap.labels),
        cache_bytes=cap.cache_bytes,
        cache_used=state.cache_used,
        cpu_utilisation=state.cpu_utilisation,
        memory_free=state.memory_free,
        assigned=w.assigned,
        allocated=t.Resources(cpu=w.allocated.cpu, memory=w.allocated.memory, gpu=w.allocated.gpu),
        last_heartbeat=when(w.last_heartbeat),
        relative_speed=w.speed.relative_speed,
    )


def explanation(e: Any) -> t.Explanation:
    return t.Explanation(
        placer=e.placer,
        attempt=e.attempt,
        chosen_worker=e.chosen_worker,
        exploratory=e.exploratory,
        reason=e.reason,
        decided_at=when(e.decided_at),
        collective=e.collective,
        learner=e.learner,
        omitted=e.omitted,
        candidates=[
            t.Candidate(
                worker_id=c.worker_id,
                feasible=c.feasible,
                score=c.score,
                features={f.name: f.value for f in c.features},
                note=c.note,
                chosen=c.worker_id == e.chosen_worker,
            )
            for c in e.candidates
        ],
    )


def coordinator(c: Any) -> t.CoordinatorInfo:
    return t.CoordinatorInfo(id=c.id, url=c.url, leader=c.leader, started_at=when(c.started_ms), me=c.me)
