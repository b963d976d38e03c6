"""A fetch pool worker's memory settings: no page faults for the same memory page after page."""

from __future__ import annotations

import contextlib
import gc
import os
from typing import Iterator

HEAP_TRIM_THRESHOLD_BYTES = 256 << 20
"""In a pool worker, glibc's malloc gives free memory at the top of its heap back to the
kernel only past this (see :func:`keep_memory_mapped`)."""

HEAP_MMAP_THRESHOLD_BYTES = 16 << 20
"""In a pool worker, glibc's malloc serves blocks up to this from its heap, larger ones by
mmap(2) (see :func:`keep_memory_mapped`)."""

WORKER_ALLOCATOR_ENV = {"MIMALLOC_PURGE_DELAY": "-1"}
"""Environment a spawned fetch worker starts with (:func:`worker_allocator_env`): Arrow's
allocator (mimalloc, read once when it starts) keeps the memory a chunk's commit freed
instead of giving it back 10 ms later, so the next commit's Parquet buffers are not page
faults again. ``pq.write_table`` of the replay's 1,500-row chunk, 8 commits with 0.3 s idle
between (load 3-4): 109-125 against 140-150 µs a row, 63,000 against 831,000 minor faults
(``perf stat``); a worker's whole commit (``PartitionOutput.flush``, 6 commits): 126-148
against 159-164 µs a row, 181,000 against 418,000 faults. Peak memory is the same (a
commit's); it is kept between commits, as glibc's heap here is."""

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt(3) parameters (glibc's malloc.h)
_PR_SET_THP_DISABLE = 41  # prctl(2) (linux/prctl.h)


@contextlib.contextmanager
def worker_allocator_env() -> Iterator[None]:
    """:data:`WORKER_ALLOCATOR_ENV` in this process's environment while a pool spawns its
    workers (they inherit it; this process's allocator has long started and keeps its own
    settings); a value the user set stays."""
    added = {name: value for name, value in WORKER_ALLOCATOR_ENV.items() if name not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


def keep_memory_mapped() -> None:
    """Stop a fetch worker process from paying page faults for the same memory page after page.

    perf on the workers of scripts/bench_fetch.py (the production-shaped run): 6-10 % of
    their CPU was page faults, nearly all of it the kernel zeroing 2 MiB transparent huge
    pages (clear_page_erms under do_huge_pmd_anonymous_page, in memmove): Arrow's allocator
    (mimalloc) madvises a 1 GiB arena MADV_HUGEPAGE and gives its 4 MiB segments back
    (MADV_DONTNEED) between commits, so each chunk's commit faulted in and zeroed fresh huge
    pages; and glibc's heap grew and shrank by brk(2) ~120 times a second (its trim threshold
    follows the largest block freed, about twice a page's ~240 KB numpy temporaries). With
    transparent huge pages off for this process and glibc's thresholds fixed, faults were
    2-3 % of the workers' CPU and zeroing 0.1 %; system time 0.15-0.17 ms a page, against
    0.20-0.25 (20 s runs, load 1.6-2.5). Peak RSS unchanged (~400 MB a worker).

    Only in a pool worker (the process is the fetch's own): in-process, the settings would
    stay with the caller (``crawl run``'s DuckDB work). A C library without mallopt or a
    kernel without the prctl keeps its behaviour.
    """
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(_PR_SET_THP_DISABLE, 1, 0, 0, 0)
        libc.mallopt(_M_TRIM_THRESHOLD, HEAP_TRIM_THRESHOLD_BYTES)
        libc.mallopt(_M_MMAP_THRESHOLD, HEAP_MMAP_THRESHOLD_BYTES)
    except (OSError, AttributeError, TypeError):
        pass


def freeze_loaded_objects() -> None:
    """Leave what a pool worker has loaded (its fetch list, host slots, robots rules, libraries)
    out of the garbage collector's full collections from now on (``gc.freeze``).

    A full collection walks every tracked object, and the loaded ones make most of a worker's
    heap while never becoming garbage in a cycle (a fetch list item is freed by its reference
    count when fetched, frozen or not). bench_fetch --real-web (load ~11): a worker's 3-4 full
    collections took 0.11-0.20 CPU-s of its ~12 CPU-s, 50 ms each. Only in a pool worker, as
    :func:`keep_memory_mapped`: in-process, the caller's objects would be frozen with ours.
    """
    gc.freeze()
