"""Collectives from inside a Plexus task, over the worker's data plane.

A task of a ``communicator = true`` gang (a command task whose replicas are one gang, one
member per worker) finds its worker's collective endpoint in ``$PLEXUS_COLLECTIVE_SOCKET`` and
proves itself with ``$PLEXUS_COLLECTIVE_SECRET``. Every member must make the same calls in the
same order; the worker runs them over the gang's communicator (striped over the node's rails)::

    from plexus.collective import Communicator
    comm = Communicator()                    # rank and size from the worker
    grad = torch.ones(1024)                  # or any writable buffer (array.array, bytearray...)
    comm.allreduce(grad, op="sum")           # in place; async_op=True returns a Handle
    h = comm.allreduce(grad, async_op=True); ...; h.wait()

Operations: allreduce, reduce (sum, mean, min, max, prod), broadcast, allgather,
reduce_scatter, alltoall, alltoallv, barrier. Element types: f32, f64, i32, i64, bf16 and f16
(reduced in f32 by the worker), and u8 for the ops that only move data. torch tensors (CPU, or
CUDA staged through host memory) and C-contiguous buffer-protocol objects; no numpy needed.

A mistake (a size that differs between members, an unsupported dtype) or a member that dies
fails the operation on every member with a :class:`CollectiveError` naming it.

Data goes through shared memory: each operation's bytes are copied into a region of its own (a
memfd this process creates, seals against shrinking and passes to the worker over the socket,
reused from call to call and regrown when too small, at most 16), the worker reduces there, and
the result is copied back out; only a small header crosses the socket. While every region is
busy, or with ``Communicator(shared_memory=False)`` (the default when
``$PLEXUS_COLLECTIVE_SHARED_MEMORY`` is ``0``), payloads cross the socket instead.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import mmap
import os
import socket
import struct
import threading
import weakref
from collections import deque
from typing import Any, Callable, List, Optional, Sequence

__all__ = ["Communicator", "CollectiveError", "NotInGang", "Handle", "DTYPES", "OPS"]

_HELLO = b"PXS1"
_REQUEST = struct.Struct("<QBBBBIQQ")
_REPLY = struct.Struct("<QBB6xQ")
_SHARED = struct.Struct("<I4xQQQ")  # region, in_off, out_off, out_cap
_FLAG_SHARED = 1
_MAX_REGIONS = 16
_MIN_REGION = 64 << 10
_MAX_REGION = 8 << 30
OPS = {
    "allreduce": 1,
    "reduce": 2,
    "broadcast": 3,
    "allgather": 4,
    "reduce_scatter": 5,
    "alltoall": 6,
    "alltoallv": 7,
    "barrier": 8,
    "poison": 9,
    "map": 10,
}
DTYPES = {"f32": (0, 4), "f64": (1, 8), "i32": (2, 4), "i64": (3, 8), "bf16": (4, 2), "f16": (5, 2), "u8": (6, 1)}
_REDUCE = {"sum": 0, "mean": 1, "avg": 1, "min": 2, "max": 3, "prod": 4, "product": 4}
_REDUCING = ("allreduce", "reduce", "reduce_scatter")
_TORCH_DTYPES = {
    "float32": "f32",
    "float64": "f64",
    "int32": "i32",
    "int64": "i64",
    "bfloat16": "bf16",
    "float16": "f16",
    "uint8": "u8",
    "int8": "u8",
    "bool": "u8",
}
_FORMATS = {"f": "f32", "d": "f64", "e": "f16", "B": "u8", "b": "u8", "c": "u8", "?": "u8"}


class CollectiveError(RuntimeError):
    """An operation failed; the message names the member and the cause, and every member of
    the gang gets it."""


class NotInGang(CollectiveError):
    """This process is not a task of a ``communicator = true`` gang."""


class _Buffer:
    """A caller's buffer as bytes: a writable byte view, its element type, and (for a CUDA
    tensor) the host copy staged for it and the copy back."""

    def __init__(self, obj: Any, dtype: Optional[str], what: str, writable: bool):
        self.obj = obj
        self.device = None
        self.host = obj
        if _is_tensor(obj):
            name = str(obj.dtype).replace("torch.", "")
            self.dtype = dtype or _TORCH_DTYPES.get(name)
            if self.dtype is None:
                raise _Unsupported(f"{what}: unsupported dtype torch.{name}")
            if not obj.is_contiguous():
                raise CollectiveError(f"{what}: the tensor is not contiguous (call .contiguous() first)")
            if obj.device.type != "cpu":
                # Staged through host memory: copied to the host before, back after.
                self.device = obj
                self.host = obj.detach().to("cpu")
            self.view = _tensor_bytes(self.host)
        else:
            try:
                mv = memoryview(obj)
            except TypeError:
                raise CollectiveError(f"{what}: {type(obj).__name__} is neither a tensor nor a buffer") from None
            if not mv.c_contiguous:
                raise CollectiveError(f"{what}: the buffer is not C-contiguous")
            if writable and mv.readonly:
                raise CollectiveError(f"{what}: the buffer is read-only")
            self.dtype = dtype or _format_dtype(mv)
            if self.dtype is None:
                raise _Unsupported(f"{what}: unsupported buffer format {mv.format!r} (pass dtype=...)")
            self.view = mv.cast("B") if mv.nbytes else memoryview(bytearray(0))
        if self.dtype not in DTYPES:
            raise _Unsupported(f"{what}: unsupported dtype {self.dtype!r} (one of {', '.join(DTYPES)})")
        self.size = DTYPES[self.dtype][1]

    def done(self) -> None:
        if self.device is not None:
            self.device.copy_(self.host)


class _Unsupported(CollectiveError):
    pass


def _is_tensor(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _tensor_bytes(t: Any) -> memoryview:
    n = t.numel() * t.element_size()
    if n == 0:
        return memoryview(bytearray(0))
    return memoryview((ctypes.c_char * n).from_address(t.data_ptr())).cast("B")


def _format_dtype(mv: memoryview) -> Optional[str]:
    f = mv.format.lstrip("@=<")
    if f in _FORMATS:
        return _FORMATS[f]
    if f in ("i", "l", "q", "h") and mv.itemsize in (4, 8):
        return "i32" if mv.itemsize == 4 else "i64"
    return None


class Handle:
    """An operation in flight: :meth:`wait` returns once it completed (raising
    :class:`CollectiveError` if it failed)."""

    def __init__(self, finish: Callable[[], Any]):
        self._event = threading.Event()
        self._finish = finish
        self._error: Optional[str] = None
        self._result: Any = None
        self._callbacks: List[Callable[["Handle"], None]] = []
        self._lock = threading.Lock()

    def _complete(self, error: Optional[str]) -> None:
        if error is None:
            try:
                self._result = self._finish()
            except Exception as e:  # a staging copy that failed
                error = f"copying the result back: {e}"
        with self._lock:
            self._error = error
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb(self)

    def add_done_callback(self, cb: Callable[["Handle"], None]) -> None:
        """Calls ``cb(handle)`` once the operation completed (at once if it has)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(cb)
                return
        cb(self)

    def is_completed(self) -> bool:
        return self._event.is_set()

    def error(self) -> Optional[str]:
        return self._error

    def wait(self, timeout: Optional[float] = None) -> Any:
        if not self._event.wait(timeout):
            raise TimeoutError(f"the collective did not complete within {timeout} s")
        if self._error is not None:
            raise CollectiveError(self._error)
        return self._result


class _Region:
    """A shared region: a sealed memfd mapped here and by the worker (number ``n``)."""

    def __init__(self, n: int, size: int):
        self.n = n
        self.size = size
        self.busy = True
        fd = os.memfd_create("plexus-collective", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
            self.mm = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self.fd: Optional[int] = fd
        self.view = memoryview(self.mm)

    def close_fd(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def unmap(self) -> None:
        self.close_fd()
        self.view.release()
        self.mm.close()


# Every Communicator not closed yet: closed at exit (see `Communicator.__init__`).
_OPEN: "weakref.WeakSet[Communicator]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for c in list(_OPEN):
        c.close()


class Communicator:
    """This task's end of its gang's communicator (``rank`` of ``size``); ``shared_memory=False``
    (default: ``$PLEXUS_COLLECTIVE_SHARED_MEMORY`` is not ``0``) sends every payload on the socket."""

    def __init__(self, path: Optional[str] = None, secret: Optional[str] = None, *, shared_memory: Optional[bool] = None):
        path = path or os.environ.get("PLEXUS_COLLECTIVE_SOCKET")
        secret = secret or os.environ.get("PLEXUS_COLLECTIVE_SECRET", "")
        if not path:
            where = ""
            if "PLEXUS_TASK" in os.environ:
                where = f" (task {os.environ['PLEXUS_TASK']!r}, rank {os.environ.get('PLEXUS_RANK', '?')})"
            raise NotInGang(
                "no collective endpoint: $PLEXUS_COLLECTIVE_SOCKET is not set, so this process is not a "
                f"member of a Plexus gang{where}; give the task `replicas = N` and `communicator = true`"
            )
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _connect(self._sock, path)
        except OSError as e:
            raise CollectiveError(f"cannot reach the collective endpoint {path}: {e}") from None
        self._sock.sendall(_HELLO + secret.encode().ljust(32, b"\0")[:32])
        _, status, _, n = _REPLY.unpack(_recv_exact(self._sock, _REPLY.size))
        body = _recv_exact(self._sock, n)
        if status != 0:
            raise CollectiveError(f"the collective endpoint refused this process: {body.decode(errors='replace')}")
        self.rank, self.size = struct.unpack("<II", body)
        self._send_lock = threading.Lock()
        self._pending: deque = deque()
        self._pending_lock = threading.Lock()
        self._next_id = 1
        self._closed: Optional[str] = None
        self._regions: List[_Region] = []
        self._region_lock = threading.Lock()
        if shared_memory is None:
            shared_memory = os.environ.get("PLEXUS_COLLECTIVE_SHARED_MEMORY", "1") != "0"
        self._sharing = shared_memory
        self._reader = threading.Thread(target=self._read_replies, name="plexus-collective", daemon=True)
        self._reader.start()
        # Stop the reader before the interpreter finalizes: a daemon thread that is still inside
        # a completion callback (torch's Future, C++) when finalization takes the GIL away is
        # ended by a forced unwind through C++ frames, and the process aborts ("terminate called
        # without an active exception") after its work is done.
        _OPEN.add(self)

    # -- operations -------------------------------------------------------------------------

    def allreduce(self, buf: Any, op: str = "sum", *, dtype: Optional[str] = None, async_op: bool = False):
        """Replaces ``buf`` with the element-wise reduction over every member's ``buf``."""
        b = self._buffer(buf, dtype, "allreduce", True)
        return self._submit("allreduce", b, b.view, [b.view], b.done, op=op, async_op=async_op)

    def reduce(self, buf: Any, root: int = 0, op: str = "sum", *, dtype=None, async_op: bool = False):
        """Reduces every member's ``buf`` into the root's; the others' are left unchanged."""
        b = self._buffer(buf, dtype, "reduce", True)
        sink = [b.view] if self.rank == root else []
        return self._submit("reduce", b, b.view, sink, b.done, op=op, root=root, async_op=async_op)

    def broadcast(self, buf: Any, root: int = 0, *, dtype=None, async_op: bool = False):
        """Every member's ``buf`` (all the same size) becomes the root's."""
        b = self._buffer(buf, dtype, "broadcast", True)
        return self._submit("broadcast", b, b.view, [b.view], b.done, root=root, async_op=async_op)

    def allgather(self, out: Any, inp: Any, *, dtype=None, async_op: bool = False):
        """``out`` (``size`` times ``inp``) becomes every member's ``inp`` in rank order."""
        i = self._buffer(inp, dtype, "allgather", False)
        o = self._buffer(out, dtype or i.dtype, "allgather", True)
        self._same_len(o.view.nbytes, i.view.nbytes * self.size, "allgather: out must be size x inp")
        return self._submit("allgather", i, i.view, [o.view], o.done, async_op=async_op)

    def reduce_scatter(self, out: Any, inp: Any, op: str = "sum", *, dtype=None, async_op: bool = False):
        """Part ``rank`` of the reduction of every member's ``inp`` (``size`` equal parts)."""
        i = self._buffer(inp, dtype, "reduce_scatter", False)
        o = self._buffer(out, dtype or i.dtype, "reduce_scatter", True)
        self._same_len(o.view.nbytes * self.size, i.view.nbytes, "reduce_scatter: inp must be size x out")
        return self._submit("reduce_scatter", i, i.view, [o.view], o.done, op=op, async_op=async_op)

    def alltoall(self, out: Any, inp: Any, *, dtype=None, async_op: bool = False):
        """Block j of ``inp`` goes to member j; ``out``'s block j is what member j sent."""
        i = self._buffer(inp, dtype, "alltoall", False)
        o = self._buffer(out, dtype or i.dtype, "alltoall", True)
        self._same_len(o.view.nbytes, i.view.nbytes, "alltoall: out and inp must be the same size")
        return self._submit("alltoall", i, i.view, [o.view], o.done, async_op=async_op)

    def alltoallv(self, out: Any, inp: Any, send_counts: Sequence[int], *, dtype=None, async_op: bool = False):
        """Sends ``send_counts[j]`` elements of ``inp`` (in order) to member j; fills ``out`` with
        what each member sent, in rank order, and returns (or the handle yields) the element
        counts received from each member."""
        i = self._buffer(inp, dtype, "alltoallv", False)
        o = self._buffer(out, dtype or i.dtype, "alltoallv", True)
        counts = [int(c) * i.size for c in send_counts]
        recv = bytearray(8 * self.size)

        def finish():
            o.done()
            return [c // i.size for c in struct.unpack(f"<{self.size}Q", recv)]

        return self._submit(
            "alltoallv", i, i.view, [memoryview(recv), o.view], finish, counts=counts, async_op=async_op, partial=True
        )

    def barrier(self, *, async_op: bool = False):
        """Returns once every member called it."""
        return self._submit("barrier", None, memoryview(b""), [], lambda: None, async_op=async_op)

    def close(self) -> None:
        """Closes the connection: pending calls fail, and the reader thread ends (awaited, up to
        a few seconds, unless this is the reader itself)."""
        _OPEN.discard(self)
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if self._reader is not threading.current_thread():
            self._reader.join(timeout=5.0)
        self._sock.close()

    # -- machinery --------------------------------------------------------------------------

    def _buffer(self, obj: Any, dtype: Optional[str], what: str, writable: bool) -> _Buffer:
        try:
            return _Buffer(obj, dtype, what, writable)
        except _Unsupported as e:
            # Every member must fail, not wait for this one: the worker tells them.
            self._poison(f"{e}")
            raise CollectiveError(str(e)) from None

    def _same_len(self, a: int, b: int, msg: str) -> None:
        if a != b:
            self._poison(f"{msg} ({a} != {b} bytes)")
            raise CollectiveError(msg)

    def _poison(self, reason: str) -> None:
        try:
            h = self._submit("poison", None, memoryview(reason.encode()), [], lambda: None, async_op=True)
            h.wait(10)
        except (CollectiveError, TimeoutError, OSError):
            pass

    def _submit(self, what, buf, payload, sinks, finish, **kw):
        reduce = kw.get("op", "sum")
        if reduce not in _REDUCE:
            self._poison(f"{what}: unknown reduction {reduce!r}")
            raise CollectiveError(f"{what}: unknown reduction {reduce!r} (one of {', '.join(_REDUCE)})")
        dtype = DTYPES[buf.dtype][0] if buf is not None else DTYPES["u8"][0]
        counts = kw.get("counts") or []
        handle = Handle(finish)
        room = sum(s.nbytes for s in sinks)
        region = self._region_for(max(payload.nbytes, room)) if what != "poison" else None
        if region is not None:
            region.view[: payload.nbytes] = payload
        with self._send_lock:
            if self._closed is not None:
                if region is not None:
                    region.busy = False
                raise CollectiveError(self._closed)
            rid = self._next_id
            self._next_id += 1
            flags = _FLAG_SHARED if region is not None else 0
            header = _REQUEST.pack(
                rid, OPS[what], dtype, _REDUCE[reduce], flags, kw.get("root", 0), len(counts), payload.nbytes
            )
            frame = header + b"".join(struct.pack("<Q", c) for c in counts)
            if region is not None:
                frame += _SHARED.pack(region.n, 0, 0, room)
            with self._pending_lock:
                self._pending.append((rid, handle, sinks, kw.get("partial", False), region))
            try:
                self._sock.sendall(frame)
                if region is None and payload.nbytes:
                    self._sock.sendall(payload)
            except OSError as e:
                self._fail_all(f"the collective endpoint is gone: {e}")
        if kw.get("async_op"):
            return handle
        return handle.wait()

    def _region_for(self, need: int) -> Optional[_Region]:
        """An idle region of at least ``need`` bytes, now busy: the smallest idle one that is
        large enough, else a new one (or an idle one regrown), mapped on the worker first;
        ``None`` (send on the socket) when every region is busy or the worker refused one."""
        if not self._sharing or need == 0 or need > _MAX_REGION:
            return None
        with self._region_lock:
            fits = [r for r in self._regions if not r.busy and r.size >= need]
            if fits:
                r = min(fits, key=lambda r: r.size)
                r.busy = True
                return r
            idle = [r for r in self._regions if not r.busy]
            if idle:
                old = max(idle, key=lambda r: r.size)
                n = old.n
                self._regions.remove(old)
                old.unmap()
            elif len(self._regions) < _MAX_REGIONS:
                n = len(self._regions)
            else:
                return None
            size = max(_MIN_REGION, 1 << (need - 1).bit_length())
            try:
                r = _Region(n, size)
            except OSError:
                self._sharing = False
                return None
            self._regions.append(r)  # busy: no other call takes it while it is mapped
        if not self._map(r):
            with self._region_lock:
                self._sharing = False
                self._regions.remove(r)
            r.unmap()
            return None
        return r

    def _map(self, r: _Region) -> bool:
        """Passes region ``r``'s memfd to the worker; whether the worker mapped it."""
        handle = Handle(lambda: None)
        with self._send_lock:
            if self._closed is not None:
                return False
            rid = self._next_id
            self._next_id += 1
            frame = _REQUEST.pack(rid, OPS["map"], 0, 0, 0, r.n, 0, 0)
            with self._pending_lock:
                self._pending.append((rid, handle, [], False, None))
            try:
                sent = socket.send_fds(self._sock, [frame], [r.fd])
                if sent < len(frame):
                    self._sock.sendall(frame[sent:])
            except OSError as e:
                self._fail_all(f"the collective endpoint is gone: {e}")
        r.close_fd()
        handle._event.wait()
        return handle.error() is None

    def _read_replies(self) -> None:
        try:
            while True:
                rid, status, flags, n = _REPLY.unpack(_recv_exact(self._sock, _REPLY.size))
                with self._pending_lock:
                    want, handle, sinks, partial, region = self._pending.popleft()
                error: Optional[str] = f"the collective endpoint answered request {rid} for {want}"
                try:
                    if rid != want:
                        raise OSError(error)
                    error = self._reply(sinks, partial, region, status, flags, n)
                except Exception as e:
                    error = f"the collective endpoint closed: {e}"
                    raise
                finally:
                    # Free before completing: a caller that waits may submit again at once.
                    if region is not None:
                        region.busy = False
                    handle._complete(error)
        except Exception as e:  # the stream cannot be read on: every pending call fails
            self._fail_all(f"the collective endpoint closed: {e}")

    def _reply(self, sinks, partial: bool, region, status: int, flags: int, n: int) -> Optional[str]:
        """Reads one reply's body into ``sinks``; the error it carries, if any."""
        shared = flags & _FLAG_SHARED
        if status != 0:
            return _recv_exact(self._sock, n).decode(errors="replace")
        if shared and (region is None or n > region.size):
            raise OSError(f"a result of {n} bytes in a region the request did not use")
        room = sum(s.nbytes for s in sinks)
        if n > room or (n < room and not partial and n != 0):
            if not shared:
                _recv_exact(self._sock, n)
            return f"the worker answered {n} bytes where {room} were expected"
        left, at = n, 0
        for s in sinks:
            k = min(left, s.nbytes)
            if shared:
                s[:k] = region.view[at : at + k]
            else:
                _recv_into(self._sock, s[:k])
            left -= k
            at += k
        return None

    def _fail_all(self, why: str) -> None:
        self._closed = why
        with self._pending_lock:
            pending, self._pending = list(self._pending), deque()
        for entry in pending:
            handle, region = entry[1], entry[4]
            if region is not None:
                region.busy = False
            if not handle.is_completed():
                handle._complete(why)


def _connect(sock: socket.socket, path: str) -> None:
    """Connects to ``path``, through ``/proc/self/fd/<dir>/<name>`` when it is longer than a
    socket address holds (108 bytes)."""
    if len(os.fsencode(path)) < 100:
        sock.connect(path)
        return
    fd = os.open(os.path.dirname(path) or ".", os.O_PATH)
    try:
        sock.connect(f"/proc/self/fd/{fd}/{os.path.basename(path)}")
    finally:
        os.close(fd)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    _recv_into(sock, memoryview(buf))
    return bytes(buf)


def _recv_into(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < view.nbytes:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise OSError("end of stream")
        got += k
