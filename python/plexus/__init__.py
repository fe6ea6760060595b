"""Python client of Plexus, a distributed job orchestrator.

    import plexus
    client = plexus.Client()                       # as the CLI: PLEXUS_COORDINATOR, the token, the CA
    job = client.submit("examples/fanout.toml")    # a path, a dict, or the file's text
    job.wait()                                     # progress bars on a terminal; JobFailed if it failed
    print(job.logs("sum").stdout_text)

The calls mirror the ``plexus`` commands (submit, watch, status, logs, get, cancel, workers,
explain); results are dataclasses (:mod:`plexus.types`), failures exceptions carrying the
coordinator's message (:mod:`plexus.errors`).
"""

from .client import Client, Job
from .errors import ConfigError, InvalidJob, JobFailed, NotFound, PermissionDenied, PlexusError, Unavailable
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
    Resources,
    Subtask,
    SubtaskState,
    TaskGroup,
    WorkerInfo,
)

__version__ = "0.1.0"

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
    "PlexusError",
    "Resources",
    "Subtask",
    "SubtaskState",
    "TaskGroup",
    "Unavailable",
    "WorkerInfo",
]
