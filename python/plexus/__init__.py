"""Python client of Plexus, a distributed job orchestrator.

    import plexus
    client = plexus.Client()                       # as the CLI: PLEXUS_COORDINATOR, the token, the CA
    job = client.submit("examples/fanout.toml")    # a path, a dict, or the file's text
    job.wait()                                     # progress bars on a terminal; JobFailed if it failed
    print(job.logs("sum").stdout_text)

The calls mirror the ``plexus`` commands (submit, watch, status, logs, get, cancel, workers,
explain); results are dataclasses (:mod:`plexus.types`), failures exceptions carrying the
coordinator's message (:mod:`plexus.errors`).

Inside a task of a ``communicator = true`` gang, :mod:`plexus.collective` runs collectives over
the worker's data plane, and importing :mod:`plexus.distributed` registers the
``torch.distributed`` backend ``plexus`` (neither needs grpcio).
"""

from .types import (
    AttemptFailure,
    Candidate,
    CoordinatorInfo,
    Explanation,
    Gang,
    Gpu,
    JobState,
    JobStatus,
    Logs,
    Output,
    Plan,
    Resources,
    Subtask,
    SubtaskState,
    TaskGroup,
    TaskPlan,
    WorkerInfo,
    WorkersSummary,
)

__version__ = "0.1.0"

# The gRPC client (and its errors) load on first use, so that `plexus.collective` and
# `plexus.distributed` import inside a task whose Python has no grpcio (e.g. torch's venv).
_LAZY = {
    "Client": "client",
    "Job": "client",
    "ConfigError": "errors",
    "InvalidJob": "errors",
    "JobFailed": "errors",
    "NotFound": "errors",
    "PermissionDenied": "errors",
    "PlexusError": "errors",
    "Unavailable": "errors",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'plexus' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value

__all__ = [
    "AttemptFailure",
    "Candidate",
    "Client",
    "ConfigError",
    "CoordinatorInfo",
    "Explanation",
    "Gang",
    "Gpu",
    "InvalidJob",
    "Job",
    "JobFailed",
    "JobState",
    "JobStatus",
    "Logs",
    "NotFound",
    "Output",
    "PermissionDenied",
    "Plan",
    "PlexusError",
    "Resources",
    "Subtask",
    "SubtaskState",
    "TaskGroup",
    "TaskPlan",
    "Unavailable",
    "WorkerInfo",
    "WorkersSummary",
]
