"""Tasks for the executors (module level, so that a process pool can pickle them)."""

from __future__ import annotations

import os


def write_pid_and_sleep(task) -> None:
    folder, k = task
    with open(os.path.join(folder, f"{k}.pid.tmp"), "w") as out:
        out.write(str(os.getpid()))
    os.replace(os.path.join(folder, f"{k}.pid.tmp"), os.path.join(folder, f"{k}.pid"))
    import time

    time.sleep(60)
