"""The exceptions of the client.

Every failure of a call is a :class:`PlexusError` that carries the gRPC status code and the
coordinator's own message, unchanged (``str(e)`` is that message, as ``plexus`` prints it after
``error:``). The subclasses name the codes a caller usually handles:

============================  ==========================================================
``NotFound``                  NOT_FOUND: no such job, task, rank, attempt or output
``InvalidJob``                INVALID_ARGUMENT: a refused job file (``file:line: why``) or
                              request
``PermissionDenied``          PERMISSION_DENIED or UNAUTHENTICATED: the token's scope, or no
                              token
``Unavailable``               UNAVAILABLE: the coordinator cannot be reached, or is a
                              standby with no leader to point to
``JobFailed``                 raised by :meth:`plexus.Job.wait` for a job that did not
                              succeed
``ConfigError``               the client's own set-up: a malformed URL or token, an
                              unreadable CA or token file
============================  ==========================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional, Sequence

import grpc

if TYPE_CHECKING:
    from .types import JobStatus, Subtask


class PlexusError(Exception):
    """A call failed. ``code`` is the gRPC status code (``None`` for failures found on this side),
    ``message`` the coordinator's message, ``url`` the coordinator that was asked."""

    def __init__(self, message: str, code: Optional[grpc.StatusCode] = None, url: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.url = url

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> Any:
        # Pickled whole, code and url too (process pools send exceptions between processes).
        return (type(self), (self.message, self.code, self.url))


class NotFound(PlexusError):
    """No such job, task, rank, attempt or output (NOT_FOUND)."""


class InvalidJob(PlexusError, ValueError):
    """The coordinator refused a job file or a request (INVALID_ARGUMENT); for a job file the
    message starts with ``file:line:``."""


class PermissionDenied(PlexusError):
    """The token does not allow the call, or none was sent (PERMISSION_DENIED, UNAUTHENTICATED)."""


class Unavailable(PlexusError):
    """The coordinator could not be reached or cannot serve now (UNAVAILABLE)."""


class ConfigError(PlexusError, ValueError):
    """The client's own set-up is wrong: URL, token, CA (nothing was sent)."""


class JobFailed(PlexusError):
    """A waited-for job ended in a state other than succeeded: failed, completed with failures,
    or cancelled. ``status`` is its final status (with subtasks); ``failures`` its failed
    subtasks, each with its error and exit code."""

    def __reduce__(self) -> Any:
        # Pickled by what it was made from (process pools send exceptions between processes).
        return (type(self), (self.status, self.failures))

    def __init__(self, status: "JobStatus", failures: Sequence["Subtask"]) -> None:
        self.status = status
        self.failures = list(failures)
        head = f"job {status.id}"
        if status.name:
            head += f" ({status.name})"
        text = f"{head} {status.state.value}"
        if status.error:
            text += f": {status.error}"
        details = []
        for s in self.failures[:5]:
            why = s.error or (f"exit code {s.exit_code}" if s.exit_code else "failed")
            details.append(f"{s.task}/{s.rank}: {why}")
        if details:
            more = f" and {len(self.failures) - 5} more" if len(self.failures) > 5 else ""
            text += " [" + "; ".join(details) + more + "]"
        #: The last lines of stderr of the subtask whose failure ended the job ("" if none).
        self.stderr = status.failed_stderr
        if self.stderr.strip():
            text += f"\nstderr of {status.failed_task} rank {status.failed_rank} (last lines):\n"
            text += "\n".join("  | " + line for line in self.stderr.splitlines())
        super().__init__(text)


_BY_CODE = {
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidJob,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.UNAUTHENTICATED: PermissionDenied,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
}


def from_rpc(error: grpc.RpcError, url: str) -> PlexusError:
    """The exception for a failed call: its class chosen by the status code, its message the
    coordinator's (on one line, as the CLI prints it)."""
    code = error.code() if isinstance(error, grpc.Call) else grpc.StatusCode.UNKNOWN
    details = (error.details() if isinstance(error, grpc.Call) else None) or ""
    message = one_line(details)
    cls = _BY_CODE.get(code, PlexusError)
    if code == grpc.StatusCode.UNAVAILABLE and any(w in details for w in _CERTIFICATE):
        # It answered, with a certificate of another cluster: the CA is wrong, not the URL.
        cls = ConfigError
        message = (
            f"the coordinator at {url} presented a certificate that the CA given did not sign ({message}): "
            "pass the ca.pem of that coordinator's cluster (ca= or PLEXUS_CA)"
        )
    elif code == grpc.StatusCode.UNAVAILABLE and _is_transport(details):
        message = unreachable(url, message)
    elif not message:
        message = f"the coordinator answered {code.name} without a message"
    return cls(message, code, url)


def unreachable(url: str, cause: str) -> str:
    """The CLI's words for a coordinator that did not answer at all."""
    return (
        f"cannot reach the coordinator at {url}: {cause} (is it running? start one with `plexus up`, "
        "or point at it with url=... or PLEXUS_COORDINATOR)"
    )


def one_line(text: str) -> str:
    """A possibly multi-line message (a TOML parse error, say) on one line, as the CLI shows it."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


# BoringSSL's words for a certificate the CA did not sign.
_CERTIFICATE = ("CERTIFICATE_VERIFY_FAILED", "unable to get local issuer certificate")

# Words of grpc's own transport failures (never the coordinator's messages, which are sentences
# about jobs and coordinators).
_TRANSPORT = (
    "failed to connect",
    "connection refused",
    "socket closed",
    "connection reset",
    "dns resolution failed",
    "ssl handshake",
    "handshake failed",
    "connections to all backends failing",
    "end of tcp stream",
    "broken pipe",
)


def _is_transport(details: str) -> bool:
    d = details.lower()
    return any(w in d for w in _TRANSPORT)


# Of those, the ones that say the call never reached a coordinator (no connection was made), so
# it can be sent to another one without any risk of running it twice.
_NEVER_SENT = ("failed to connect", "connection refused", "dns resolution failed", "connections to all backends failing")


def never_sent(error: grpc.RpcError) -> bool:
    """The call failed before any coordinator got it: UNAVAILABLE for want of a connection."""
    if not isinstance(error, grpc.Call) or error.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    d = (error.details() or "").lower()
    return any(w in d for w in _NEVER_SENT)
