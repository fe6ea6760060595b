"""A job's ``python = { requirements = "requirements.txt" }`` at submit, as ``plexus submit``
does it: the file (relative to the job file's folder) is read on the submitter's machine and its
requirements put in the job in its place, so that the coordinator keeps them with the job and
workers never read the submitter's files. The coordinator checks every requirement and names a
bad one; options (``-r``, ``-e``, ``--index-url``) are refused here, with their line."""

import json
from pathlib import Path
from typing import Any, List, Optional

#: The largest requirements file read.
MAX_FILE = 1 << 20


class RequirementsError(ValueError):
    """A ``python.requirements`` file that cannot be read or is not a requirements file."""


def parse(text: str, path: Path) -> List[str]:
    """The requirements of a requirements file's text: comments and blank lines dropped,
    ``\\`` continuations joined; an option line is refused naming its line."""
    out: List[str] = []
    pending, start = "", 0
    for i, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = i
        line = raw
        at = raw.find("#")
        if at == 0 or (at > 0 and raw[at - 1].isspace()):
            line = raw[:at]
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        req = (pending + line).strip()
        pending = ""
        if not req:
            continue
        if req.startswith("-"):
            raise RequirementsError(
                f"{path} is not a requirements file: line {start}: {req[:80]!r}: options (-r, -e, --index-url, ...) "
                "are not taken: list requirements only"
            )
        out.append(req)
    if pending.strip():
        out.append(pending.strip())
    return out


def read(path: Path) -> List[str]:
    try:
        if not path.is_file():
            raise RequirementsError(f"{path} is not a file")
        if path.stat().st_size > MAX_FILE:
            raise RequirementsError(f"{path} is larger than a requirements file can be ({MAX_FILE} bytes)")
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise RequirementsError(f"{path} is not a requirements file: it is not UTF-8 text") from None
    except OSError as e:
        raise RequirementsError(f"cannot read {path}: {e}") from None
    reqs = parse(text, path)
    if not reqs:
        raise RequirementsError(f"{path} lists no requirement")
    return reqs


def _inline_one(at: Any, base: Path, what: str) -> bool:
    python = at.get("python") if isinstance(at, dict) else None
    if not isinstance(python, dict) or not isinstance(python.get("requirements"), str):
        return False
    file = Path(python["requirements"])
    path = file if file.is_absolute() else base / file
    try:
        python["requirements"] = read(path)
    except RequirementsError as e:
        raise RequirementsError(f"{what} = {str(file)!r}: {e}") from None
    return True


def inline(source: str, fmt: str, base: Optional[Path]) -> Optional[str]:
    """The job's text with every ``python.requirements`` file (the job's and each task's) put
    in as its lines, as JSON (the format to send it in); ``None`` when none names a file or the
    text does not parse (then it goes as it is, and the coordinator names any mistake)."""
    from ._working_dir import parse_job

    root = parse_job(source, fmt)
    if root is None:
        return None
    base = base or Path(".")
    changed = _inline_one(root, base, "python.requirements")
    for key in ("task", "tasks"):
        for t in root.get(key) or []:
            if isinstance(t, dict):
                changed |= _inline_one(t, base, f"task {t.get('name', '?')!r}: python.requirements")
    return json.dumps(root) if changed else None
