"""Progress of a job being waited for: one tqdm bar per task group (succeeded of its replicas,
with running and failed counts), as ``plexus watch`` draws them on a terminal."""

from __future__ import annotations

from typing import IO, Any, Dict, Optional

from .types import JobStatus


class Bars:
    """Draws ``JobStatus`` snapshots onto ``file``. Nothing is drawn (nor tqdm imported) unless
    ``enabled``."""

    def __init__(self, file: IO[str], enabled: bool) -> None:
        self._file = file
        self._enabled = enabled
        self._bars: Dict[str, Any] = {}
        self._width = 0

    def update(self, status: JobStatus) -> None:
        if not self._enabled:
            return
        from tqdm import tqdm

        if self._width == 0:
            # Sized from the first snapshot, which lists every group, so the bars line up.
            self._width = max((len(g.task) for g in status.groups), default=1)
        for g in status.groups:
            bar = self._bars.get(g.task)
            if bar is None:
                bar = tqdm(
                    total=g.replicas,
                    desc=g.task.ljust(self._width),
                    position=len(self._bars),
                    file=self._file,
                    unit="subtask",
                    leave=True,
                    dynamic_ncols=True,
                    bar_format="{desc} |{bar}| {n_fmt}/{total_fmt}{postfix} [{elapsed}]",
                )
                self._bars[g.task] = bar
            bar.total = g.replicas
            bar.n = g.succeeded
            bar.set_postfix_str(f"{g.running} running, {g.failed} failed", refresh=False)
            bar.refresh()

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()

    def bar_of(self, task: str) -> Optional[Any]:
        """The tqdm bar of ``task`` (for tests)."""
        return self._bars.get(task)
