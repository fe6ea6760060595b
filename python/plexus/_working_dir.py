"""A job's ``working_dir``, packed as ``plexus submit`` packs it: a gzip'd tar with entries in
sorted order, uid/gid 0, mtime 0, modes 0644/0755 (files) and 0755 (directories), without
``.git``, what ``.gitignore`` files in it ignore and what the job's ``excludes`` name (both
gitignore-style: ``*``, ``?``, ``**``, a leading ``/`` anchors, a trailing ``/`` means
directories only, ``!`` re-includes). Symlinks are kept as links and must stay inside the
directory; sockets, FIFOs and devices are refused.

The archive is deterministic, so the same content uploads once; its bytes (and so its digest)
are not the same as the CLI's (another tar writer and another zlib), so the same directory
submitted from the CLI and from Python is kept twice. Both unpack the same on the workers.
"""

from __future__ import annotations

import fnmatch
import gzip
import io
import os
import re
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import List, Optional, Sequence, Tuple

#: The CLI's bounds (``plexus_archive::Limits::DEFAULT``); the coordinator states its own limit.
MAX_ARCHIVE = 100 << 20
MAX_UNPACKED = 1 << 30
MAX_ENTRIES = 100_000


class WorkingDirError(ValueError):
    """A working dir that cannot be packed; the message starts with ``working_dir:``."""


@dataclass(frozen=True)
class Packed:
    data: bytes
    entries: int
    unpacked: int


@dataclass(frozen=True)
class _Rule:
    base: str  # the directory (relative, posix, "" for the root) whose .gitignore holds it
    regex: "re.Pattern[str]"
    negate: bool
    dir_only: bool


def _compile(pattern: str) -> Tuple["re.Pattern[str]", bool, bool]:
    negate = pattern.startswith("!")
    if negate:
        pattern = pattern[1:]
    dir_only = pattern.endswith("/")
    pattern = pattern.rstrip("/")
    anchored = "/" in pattern
    pattern = pattern.lstrip("/")
    parts = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            parts.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            parts.append(".*")
            i += 2
        elif pattern[i] == "*":
            parts.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            parts.append("[^/]")
            i += 1
        else:
            parts.append(re.escape(pattern[i]))
            i += 1
    body = "".join(parts)
    regex = ("^" if anchored else "^(?:.*/)?") + body + "$"
    return re.compile(regex), negate, dir_only


def _rules(lines: Sequence[str], base: str) -> List[_Rule]:
    out = []
    for line in lines:
        line = line.rstrip("\n").rstrip()
        if not line or line.startswith("#"):
            continue
        regex, negate, dir_only = _compile(line)
        out.append(_Rule(base, regex, negate, dir_only))
    return out


def _ignored(rules: Sequence[_Rule], rel: str, is_dir: bool) -> bool:
    ignored = False
    for r in rules:
        if r.base and not rel.startswith(r.base + "/"):
            continue
        sub = rel[len(r.base) + 1 :] if r.base else rel
        if r.dir_only and not is_dir:
            continue
        if r.regex.match(sub):
            ignored = not r.negate
    return ignored


def _stays_inside(link: str, target: str) -> bool:
    if target.startswith("/"):
        return False
    depth = len(PurePosixPath(link).parts) - 1
    for part in PurePosixPath(target).parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                return False
        elif part != ".":
            depth += 1
    return True


def pack(directory: os.PathLike, excludes: Sequence[str] = ()) -> Packed:
    """``directory`` packed; raises :class:`WorkingDirError` naming what is wrong."""
    root = Path(directory)
    if not root.is_dir():
        raise WorkingDirError(f"working_dir: {root} is not a directory")
    for e in excludes:
        if not isinstance(e, str) or not e:
            raise WorkingDirError(f"working_dir: excludes: {e!r} is not a pattern")
    rules = _rules(list(excludes) + [".git"], "")
    buf = io.BytesIO()
    gz = gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0)
    tar = tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT)
    entries = unpacked = 0
    stack = [""]  # directories to walk, relative; an explicit stack, sorted output below
    pending: List[str] = []
    while stack:
        rel_dir = stack.pop()
        here = root / rel_dir if rel_dir else root
        gitignore = here / ".gitignore"
        if gitignore.is_file() and not gitignore.is_symlink():
            rules = rules + _rules(gitignore.read_text(encoding="utf-8", errors="replace").splitlines(), rel_dir)
        names = sorted(os.listdir(here), key=lambda n: n.encode("utf-8", "surrogateescape"))
        subdirs = []
        for name in names:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            st = os.lstat(root / rel)
            is_dir = stat.S_ISDIR(st.st_mode)
            if _ignored(rules, rel, is_dir):
                continue
            pending.append(rel)
            if is_dir:
                subdirs.append(rel)
        stack.extend(reversed(subdirs))
    # The walk above visits directories depth-first; the CLI's order is by path components.
    pending.sort(key=lambda p: [c.encode("utf-8", "surrogateescape") for c in p.split("/")])
    for rel in pending:
        path = root / rel
        st = os.lstat(path)
        info = tarfile.TarInfo(rel)
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        entries += 1
        if entries > MAX_ENTRIES:
            raise WorkingDirError(f"working_dir: more than {MAX_ENTRIES} files, directories and symlinks")
        if stat.S_ISDIR(st.st_mode):
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        elif stat.S_ISLNK(st.st_mode):
            target = os.readlink(path)
            if not _stays_inside(rel, target):
                raise WorkingDirError(f"working_dir: {path} is a symlink to {target}, which leads outside the directory")
            info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, target
            tar.addfile(info)
        elif stat.S_ISREG(st.st_mode):
            unpacked += st.st_size
            if unpacked > MAX_UNPACKED:
                raise WorkingDirError(f"working_dir: the directory's files (at {rel}) are over the limit of {MAX_UNPACKED} bytes")
            data = path.read_bytes()
            info.type, info.size = tarfile.REGTYPE, len(data)
            info.mode = 0o755 if st.st_mode & 0o111 else 0o644
            tar.addfile(info, io.BytesIO(data))
        else:
            raise WorkingDirError(f"working_dir: {path} is not a file, directory or symlink (add it to `excludes`)")
        if buf.tell() > MAX_ARCHIVE:
            raise WorkingDirError(f"working_dir: the packed directory is over the limit of {MAX_ARCHIVE} bytes")
    tar.close()
    gz.close()
    data = buf.getvalue()
    if len(data) > MAX_ARCHIVE:
        raise WorkingDirError(f"working_dir: the packed directory is over the limit of {MAX_ARCHIVE} bytes")
    return Packed(data, entries, unpacked)


def parse_job(source: str, fmt: str) -> Optional[dict]:
    """A job file's text (``fmt`` ``json``, else TOML) as a table; ``None`` when it does not
    parse, or is not a table (the coordinator then names the mistake with its line)."""
    try:
        if fmt == "json":
            import json

            root = json.loads(source)
        else:
            import tomllib

            root = tomllib.loads(source)
    except Exception:
        return None
    return root if isinstance(root, dict) else None


def declared(source: str, fmt: str, base: Optional[Path]) -> Optional[Tuple[Path, List[str]]]:
    """The ``working_dir`` (resolved against ``base``, the job file's folder, else the current
    directory) and ``excludes`` of a job file's text; ``None`` when it names none, or when the
    text does not parse (the coordinator then names the mistake with its line)."""
    root = parse_job(source, fmt)
    if root is None or not isinstance(root.get("working_dir"), str) or not root["working_dir"].strip():
        return None
    excludes = [e for e in root.get("excludes") or [] if isinstance(e, str)]
    wd = Path(root["working_dir"])
    return (wd if wd.is_absolute() else (base or Path(".")) / wd), excludes
