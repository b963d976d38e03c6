"""A fetch pool worker's memory settings: no page faults for the same memory page after page."""

from __future__ import annotations

import gc

HEAP_TRIM_THRESHOLD_BYTES = 256 << 20
"""In a pool worker, glibc's malloc gives free memory at the top of its heap back to the
kernel only past this (see :func:`keep_memory_mapped`)."""

HEAP_MMAP_THRESHOLD_BYTES = 16 << 20
"""In a pool worker, glibc's malloc serves blocks up to this from its heap, larger ones by
mmap(2) (see :func:`keep_memory_mapped`)."""

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt(3) parameters (glibc's malloc.h)
_PR_SET_THP_DISABLE = 41  # prctl(2) (linux/prctl.h)


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
