"""Progress of a long stage (fetch, update) while it runs: done/total, rate and ETA.

On a terminal the line is redrawn in place on stderr (``\\r`` and erase-line); anywhere
else (cron, Airflow, a log file) it is logged at INFO as a plain line every
``log.progress_interval_s``, because redrawn lines turn a log into one line of
carriage returns. A background thread asks the stage for its line (``describe``), so
the stage's own loop pays nothing for it.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Callable

log = logging.getLogger(__name__)

ERASE_LINE = "\r\x1b[2K"
"""Back to the start of the line and clear it (ECMA-48 EL 2): the next frame replaces the last."""


def duration(seconds: float) -> str:
    """A short human duration: 42s, 3m05s, 2h07m, 3d04h."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def done_of_total(done: int, total: int, unit: str) -> str:
    """``120/400 URLs (30%)``; ``done`` is capped at ``total`` (a redirect followed inline
    can add a result the fetch list did not have)."""
    done = min(done, total)
    return f"{done}/{total} {unit} ({100 * done // total if total else 100}%)"


def eta(done: int, total: int, elapsed_s: float) -> str:
    """Time left at the rate so far (``?`` before anything is done)."""
    rate = done / elapsed_s if elapsed_s > 0 else 0.0
    return duration(max(0, total - done) / rate) if rate > 0 else "?"


class LiveProgress:
    """Reports ``describe(elapsed_s)`` while a stage runs: redrawn every ``redraw_s`` on a
    terminal, logged every ``log_interval_s`` elsewhere (0 turns either off). Use it as a
    context manager around the stage's work; the last frame is drawn (or logged) at the end."""

    def __init__(self, describe: Callable[[float], str], redraw_s: float, log_interval_s: float,
                 stream=None, name: str = "progress"):
        self.describe = describe
        self.stream = stream if stream is not None else sys.stderr
        self.interval_s = redraw_s if self.on_terminal() else log_interval_s
        self.name = name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = time.monotonic()

    def on_terminal(self) -> bool:
        isatty = getattr(self.stream, "isatty", None)
        return bool(isatty and isatty())

    def enabled(self) -> bool:
        """Whether anything will be shown: on a terminal only if redrawn, elsewhere only if
        INFO lines are logged (not with ``crawl -q``)."""
        if self.interval_s <= 0:
            return False
        return self.on_terminal() or log.isEnabledFor(logging.INFO)

    def start(self) -> "LiveProgress":
        self._started = time.monotonic()
        if self.enabled():
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.show()

    def show(self) -> None:
        line = self.describe(time.monotonic() - self._started)
        if self.on_terminal():
            self.stream.write(ERASE_LINE + line)
            self.stream.flush()
        else:
            log.info(line)

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        if self.on_terminal():  # the final numbers stay on screen; a log has its summary line
            self.show()
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> "LiveProgress":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class StepProgress(LiveProgress):
    """Progress of ``total`` steps of about equal size (update's bucket merges): the stage
    calls :meth:`advance` after each; the line is ``label: 3/8 buckets (37%), ETA 1m10s``."""

    def __init__(self, label: str, total: int, unit: str, redraw_s: float, log_interval_s: float, stream=None):
        self.label, self.total, self.unit, self.done = label, total, unit, 0
        super().__init__(self.line, redraw_s, log_interval_s, stream, name=f"{label.split()[0]}-progress")

    def advance(self, steps: int = 1) -> None:
        self.done += steps

    def line(self, elapsed_s: float) -> str:
        return f"{self.label}: {done_of_total(self.done, self.total, self.unit)}, ETA {eta(self.done, self.total, elapsed_s)}"
