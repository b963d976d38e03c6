"""Log lines for operators: one line each on stderr, ``crawl: message`` (warnings
``crawl: warning: message``), so cron mail and Airflow task logs read the same as a terminal.

Every module logs under the ``cycles`` logger (``logging.getLogger(__name__)``); the
``crawl`` command sets the level once (:func:`setup_logging`): INFO by default (progress
lines, what a stage is about to do), WARNING with ``-q``, DEBUG with ``-v``. Used as a
library, nothing is configured here and Python's defaults apply (warnings only).
"""

from __future__ import annotations

import logging
import sys

LOGGER = "cycles"

LEVELS = {-1: logging.WARNING, 0: logging.INFO, 1: logging.DEBUG}
"""Verbosity (-q: -1, default: 0, -v: 1) -> the level of the ``cycles`` logger."""


class StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a line is logged (a test runner swaps it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # logging.StreamHandler.__init__ assigns it
        pass


class OneLine(logging.Formatter):
    """``crawl: message``, ``crawl: warning: message``; a message is kept on one line."""

    def format(self, record: logging.LogRecord) -> str:
        text = " ".join(record.getMessage().split())
        if record.levelno >= logging.ERROR:
            return f"crawl: error: {text}"
        if record.levelno >= logging.WARNING:
            return f"crawl: warning: {text}"
        if record.levelno <= logging.DEBUG:
            return f"crawl: debug: {record.name}: {text}"
        return f"crawl: {text}"


def setup_logging(verbosity: int) -> None:
    """Send the ``cycles`` logger's lines at ``LEVELS[verbosity]`` and above to stderr.
    Called again (a second command in one process, as tests do), it replaces its handler."""
    logger = logging.getLogger(LOGGER)
    for handler in [h for h in logger.handlers if isinstance(h, StderrHandler)]:
        logger.removeHandler(handler)
    handler = StderrHandler()
    handler.setFormatter(OneLine())
    logger.addHandler(handler)
    logger.setLevel(LEVELS[max(-1, min(1, verbosity))])
