"""A live progress bar on stderr (rich), fed by callbacks; silent when stderr is not a TTY or --quiet.

Progress is an observer: the load runner calls ``on_level`` and ``on_done`` and never waits on it.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

__all__ = ["ProgressBar"]


class ProgressBar:
    """``with ProgressBar(quiet) as bar: runner(on_done=bar.on_done, on_level=bar.on_level)``."""

    def __init__(self, quiet: bool = False) -> None:
        self.enabled = not quiet and sys.stderr.isatty()
        self._progress: Any = None
        self._task: Any = None
        self._failed = 0

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TextColumn("{task.fields[failed]} failed"), TimeElapsedColumn(),
                                      console=Console(stderr=True), transient=False)
            self._progress.start()
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._progress is not None:
            self._progress.stop()

    def on_level(self, label: str, total: int) -> None:
        """A new phase starts: ``total`` requests (0 = unknown, e.g. duration mode)."""
        if self._progress is None:
            return
        if self._task is not None:
            self._progress.update(self._task, visible=True)
        self._failed = 0
        self._task = self._progress.add_task(label, total=total or None, failed=0)

    def on_done(self, label: str, ok: bool) -> None:
        if self._progress is None or self._task is None:
            return
        self._failed += not ok
        self._progress.update(self._task, advance=1, failed=self._failed)
