"""``crawl run``: overlapping cycles — fetch segment k+1 while segment k is updated.

A pipelined loop in one process. The main thread fetches a segment in the fetch pool;
meanwhile a helper thread (the *coordinator*) updates every fetched segment, oldest first.
When a fetch ends, the next segment is generated at once — from what the crawl DB knows
then, the just-fetched segment's URLs still leased — and fetched while the coordinator
updates the one just fetched. The fetch pool thus waits only for generate (about a second),
not for update too; what a segment discovers is fetched one segment later. Only when
nothing is due without it (a small crawl, every due URL in the segment just fetched) is the
segment updated before the next is generated, as ``crawl cycle`` does.

Such a segment, generated before the update of the one just fetched, is often *thin*: only
what was due without that update (the big hosts' URLs past their per-host budget). A thin
segment is fetched only while the update runs: the coordinator ends its fetch when the
update ends (cycles/fetch/fetch.py ``request_early_end``), bounded by twice what the last
updates took (:func:`thin_segment_seconds`), not by ``fetch.max_duration_s``, so the
hundreds of hosts the update makes due do not wait for a few big ones, and the big ones
do not wait for an update slower than the last ones.

Segment length: each segment is planned for :func:`run_segment_s` seconds — generate sizes
every host's share to fit it and the fetch ends there, or sooner once it is a tail
(cycles/fetch/tail.py; docs/segments.md). ``crawl run`` chooses it itself: long enough
that the update of one segment ends while the next is fetched (``RUN_SEGMENT_UPDATES`` ×
the last updates), at least ``generate.run_segment_min_s``, at most ``generate.segment_s``.

Hosts found by a fetch and known to nobody are fetched in that same segment by the worker
that claims them (cycles/tables/newhosts.py); a segment generated while it is in flight
leaves them out like the hosts of its fetch list.

With ``generate_ahead`` (the default) the coordinator generates the next segment *while*
the fetch runs, once the update before it is done, so it is ready the moment the fetch ends:
the fetch pool then waits for neither update nor generate. It holds the hosts of the running
segment too (cycles/tables/leases.py ``continuing_lease``): a busy host goes on in the next segment
about 0.1 s after its spacing allows, where stopping, generating and starting cost it ~0.45 s
at every boundary (bench_crawl, 8 boundaries on each time-bound host). What the running
fetch's discovery fetches after that generate, the next fetch neither lists nor takes again:
it reads the earlier segment's fetched rows when it starts (``fetched_by_continued``).

When nothing is due without the update of the segment just fetched — the seeds' segment
found all there is — the next one is made from what that fetch's discovery queued and did
not reach (``segment.LEFTOVER``, cycles/generate/generate.py ``with_leftovers_sql``) and is
fetched, thin, while the update runs.

What stays exclusive, and why:

- the **cycle lock** (cycles/tables/segment.py ``cycle_lock``): held for the whole run, so one
  process at a time starts segments (a ``crawl cycle``, ``crawl generate`` or second
  ``crawl run`` exits at once);
- the **crawl DB lock**: generate's read-and-lease and update's swap each take it; they
  never run at the same time here (generate runs only with no update under way);
- the **fetch lock**: one segment is fetched at a time (``fetch_segment``);
- **hosts**: generate leaves out every host of a segment generated or being fetched
  (``generate(mode=RunMode.overlapped(...))``, cycles/tables/leases.py ``in_flight_files``), so
  a host is never in two segments' fetch lists that are not fetched yet. A host of the
  next segment was last asked in a fetched segment, whose ``hosts/`` output (or the host DB,
  once that segment is updated: cycles/tables/hostdb.py ``load_host_state`` reads the segments
  first, so an update finishing meanwhile loses nothing) gives its not-before time:
  spacing holds across segments.

Updates are still applied in generation order (``update_segment`` of the oldest fetched
segment, cycles/tables/segment.py ``check_apply_order``), so the crawl DB stays exact: each
segment's results and links are merged once, in order, and a URL leased to a segment
waiting for its update is not generated again.

Crash-only like ``crawl cycle``: a run killed at any moment leaves segments in states the
next run (or ``crawl cycle``/``fetch``/``update``) finishes — it resumes the oldest
unfetched segment, updates fetched ones, and leases run out as usual. A resumed partition
keeps its killed run's ``hosts/`` rows and marks every host that run may have asked as
asked at the resume (cycles/fetch/resumed_hosts.py): a segment generated meanwhile may
list a host the killed one reached outside its fetch list (a redirect target), and reads
its spacing from there.

Stopping: ``seconds`` bounds the wall time — at the bound the running fetch commits what it
fetched and the run ends (exit 0; the segment is resumed by the next run). SIGTERM or
SIGINT stop it the same way (exit 4, :class:`cycles.errors.Interrupted`).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterator

from concurrent.futures import FIRST_EXCEPTION, wait
from concurrent.futures.process import BrokenProcessPool

from cycles.tables import segment as seg
from cycles.commands.compact import compact_when_due
from cycles.config import Config
from cycles.errors import FetchInterrupted, Interrupted, StageError
from cycles.executor import ProcessPool
from cycles.fetch.fetch import fetch_segment, request_early_end
from cycles.fetch.memory import worker_allocator_env
from cycles.fetch.partition import install_stop_handlers, stop_signal
from cycles.generate.generate import generate
from cycles.generate.mode import RunMode
from cycles.storage.store import Store
from cycles.update.update import update_segment


@dataclass
class RunState:
    """What a run did so far (the CLI's --json line reads it)."""

    fetched: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    generated: list[str] = field(default_factory=list)
    counters: Counter = field(default_factory=Counter)
    stopped_by: str = ""
    """"deadline", "signal", "nothing due" (or "" while running)."""
    update_seconds: list[float] = field(default_factory=list)
    """How long each update took (the estimate of how long a thin segment is fetched)."""
    compacted_after: str | None = None
    """The last update a coordinator's turn compacted after (:func:`coordinate`: at the start
    of the turn that follows it)."""
    from_leftovers: set[str] = field(default_factory=set)
    """Segments generated with leftovers, before an update: thin, whatever their size (they
    end when that update does: :func:`thin_segment_seconds`)."""


class RunStop:
    """SIGTERM/SIGINT and the wall-time bound, for the whole run.

    Outside a fetch a signal only sets :attr:`received`; the loop stops after the current
    step. During a fetch, ``fetch_segment``'s own handler takes over (it commits and raises
    :class:`FetchInterrupted`) and puts this one back after. The deadline sends the process
    SIGTERM, so a fetch stops exactly as on a signal."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.received: int | None = None
        self.deadline_hit = False
        self._previous: dict = {}
        self._timer: threading.Timer | None = None

    def __enter__(self) -> "RunStop":
        if threading.current_thread() is threading.main_thread():  # signal() works only there
            for signum in self.SIGNALS:
                self._previous[signum] = signal.signal(signum, self._handle)
        if self.seconds is not None:
            self._timer = threading.Timer(max(0.0, self.seconds), self._deadline)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _handle(self, signum, frame) -> None:
        self.received = signum

    def _deadline(self) -> None:
        self.deadline_hit = True
        if self._previous:  # our handlers are installed: SIGTERM only stops, never kills
            os.kill(os.getpid(), signal.SIGTERM)

    @property
    def requested(self) -> bool:
        return self.deadline_hit or self.received is not None

    def __exit__(self, *exc) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def next_to_fetch(store: Store) -> str | None:
    """The oldest segment generated or interrupted while fetching (fetched in generation order)."""
    return seg.oldest(store, seg.State.GENERATED, seg.State.FETCHING)


def update_fetched(store: Store, config: Config, state: RunState, before: str | None = None,
                   compact: bool = True) -> Iterator[str]:
    """Update every fetched segment, oldest first (the order that keeps the crawl DB exact);
    ``before``: only the segments generated before that one (ids sort by generation time);
    ``compact``: compact when due after each update (the coordinator compacts after its
    generate instead: :func:`coordinate`)."""
    while (segment := seg.oldest(store, seg.State.FETCHED)) is not None:
        if before is not None and segment >= before:
            break
        started = time.monotonic()
        result = update_segment(store, config, segment)
        state.update_seconds.append(time.monotonic() - started)
        state.updated.append(segment)
        state.counters["outlinks/new"] += result.counters.get("outlinks/new", 0)
        yield f"run: updated {segment}, {result.counters.get('outlinks/new', 0)} new URLs"
        if compact:
            yield from compact_when_due(store, config, "run")


def generate_next(store: Store, config: Config, state: RunState, top_n: int | None,
                  overlapped: bool, continuing: str | None = None, leftovers: bool = False) -> Iterator[str]:
    """Generate a segment; ``overlapped``: while another is in flight, so without its hosts —
    but those of ``continuing``, the segment being fetched, after which this one is fetched.
    ``leftovers``: from what fetched segments' discovery did not reach, too (:func:`next_segment`)."""
    mode = RunMode.overlapped(run_segment_s(config, state), continuing=continuing, leftovers=leftovers)
    result = generate(store, config, top_n=top_n, cycle_locked=True, mode=mode)
    if result.segment is None:
        yield f"run: generate{' (overlapped)' if overlapped else ''}: {result.reason}"
        return
    state.generated.append(result.segment)
    if leftovers:
        state.from_leftovers.add(result.segment)
    yield (f"run: generated {result.segment} ({result.urls} URLs, {result.hosts} hosts)"
           f"{' while fetching' if overlapped else ''}{' with leftovers' if leftovers else ''}")


def coordinate(store: Store, config: Config, state: RunState, top_n: int | None,
               stop: RunStop, generate_ahead: bool, fetching: str, thin: bool = False) -> Iterator[str]:
    """The coordinator's turn while ``fetching`` is fetched: update what was fetched before
    it, then (``generate_ahead``) generate the segment that follows it (:func:`generate_ahead_of`).

    Not ``fetching`` itself once its fetch ends: the main thread waits for this turn before
    it generates, so updating the segment it just fetched made every host wait for that
    update too — the serial cycle the run exists to avoid. bench_crawl at load 11–15: an
    update slower than the thin fetch beside it went on to update that thin segment, and
    no request was made for 8.8 s and 12.3 s.

    ``thin``: ``fetching`` is a thin segment, ended when the update ends (module doc).

    Compaction comes first, for the updates of earlier turns: the main thread waits for the
    whole turn when the fetch ends first, so a compaction after the update (or after the
    generate) kept every host idle that long (bench_crawl --real-web: 1.7 s and 2.6 s at the
    run's second boundary); at the start of the next turn it runs beside that turn's fetch."""
    started = time.monotonic()
    ahead_done = False
    if state.updated and state.updated[-1] != state.compacted_after:
        state.compacted_after = state.updated[-1]
        yield from compact_when_due(store, config, "run")
    try:
        yield from update_fetched(store, config, state, before=fetching, compact=False)
        if thin:
            # Before the thin fetch ends, so the next segment is ready when it has.
            ahead_done = True
            yield from generate_ahead_of(store, config, state, top_n, stop, generate_ahead, fetching)
    finally:
        if thin:
            end_thin_fetch(store, fetching, started, stop)
    if not ahead_done:
        yield from generate_ahead_of(store, config, state, top_n, stop, generate_ahead, fetching)


def generate_ahead_of(store: Store, config: Config, state: RunState, top_n: int | None, stop: RunStop,
                      generate_ahead: bool, fetching: str) -> Iterator[str]:
    """With ``generate_ahead``, the segment fetched after ``fetching``, generated while it is
    fetched (unless another is already waiting); its hosts included (cycles/generate/generate.py
    ``continuing``): a busy host goes on the moment this fetch ends."""
    if not generate_ahead or stop.requested:
        return
    in_flight = [s for s, st in seg.states(store) if st in (seg.State.GENERATED, seg.State.FETCHING)]
    if len(in_flight) <= 1:
        yield from generate_next(store, config, state, top_n, overlapped=True, continuing=fetching)


def next_segment(store: Store, config: Config, state: RunState, top_n: int | None) -> Iterator[str]:
    """Make the next segment when none waits: first without updating (the fetch pool waits
    only for generate); then, when nothing is due before the update of what was fetched,
    from what its discovery queued and did not reach (segment.LEFTOVER), fetched while that
    update runs (a thin segment); else after updating what is fetched."""
    # With a fetched segment waiting for its update, what its discovery did not reach is
    # listed too: at the start of a crawl nothing else is due (the seeds' segment found it
    # all), and every host of that segment stood idle through its update (bench_crawl: ~3 s each).
    waiting = seg.oldest(store, seg.State.FETCHED) is not None
    yield from generate_next(store, config, state, top_n, overlapped=False, leftovers=waiting)
    if next_to_fetch(store) is None and seg.oldest(store, seg.State.FETCHED) is not None:
        yield from update_fetched(store, config, state)
        yield from generate_next(store, config, state, top_n, overlapped=False)


RUN_SEGMENT_UPDATES = 3.0
"""A segment ``crawl run`` plans lasts at least this many times its last updates: segment
k's update runs while k+1 is fetched, so an update longer than a fetch would hold what k
discovered back by more than one segment, and updates would queue."""


def run_segment_s(config: Config, state: RunState) -> float:
    """The length ``crawl run`` plans its next segment for (module doc): ``RUN_SEGMENT_UPDATES``
    × the longer of the last two updates, within [``generate.run_segment_min_s``, ``generate.segment_s``].
    Short: what a segment's fetch discovers is due again one update later; bounded below so
    that generate and update do not run more often than they pay for."""
    recent = max(state.update_seconds[-2:], default=0.0)
    return min(config.generate.segment_s, max(config.generate.run_segment_min_s, RUN_SEGMENT_UPDATES * recent))


class Coordinator(threading.Thread):
    """Runs :func:`coordinate` beside the fetch; its lines and error are collected for the
    main thread (a generator cannot yield across threads)."""

    def __init__(self, work: Callable[[], Iterator[str]]):
        super().__init__(name="crawl-run-coordinator", daemon=True)
        self.work = work
        self.lines: list[str] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for line in self.work():
                self.lines.append(line)
        except BaseException as exc:  # re-raised in the main thread by finish()
            self.error = exc

    def finish(self) -> list[str]:
        self.join()
        if self.error is not None:
            raise self.error
        return self.lines


class FetchPool:
    """One pool of fetch processes for the whole run, handed to ``fetch_segment`` as its
    executor: spawning a pool per segment (Python start-up and imports in every worker)
    cost several seconds between segments, during which nothing was fetched.

    Workers die with this process (``die_with_parent``) and commit and stop on SIGTERM
    (``install_stop_handlers``). ``fetch_segment``'s signal handler only marks the stop in
    this process (``request_stop``); :meth:`map` sees the mark and forwards it to the workers,
    as ``fetch_segment``'s own pool does."""

    def __init__(self, processes: int):
        self.workers = processes
        self.died = StageError("run: a fetch worker process died (killed, or out of memory); what it "
                               "committed is kept; run `crawl run` again to resume")
        with worker_allocator_env():  # the fetch workers' allocator settings, as fetch's own pool
            self.pool = ProcessPool(processes, "fetch", initializer=install_stop_handlers, die_with_parent=True,
                                    death_error=self.died)
            # Start the workers now (one no-op each): their start-up overlaps the first generate.
            for _ in range(processes):
                self.pool.submit(os.getpid)

    def map(self, fn, tasks):
        futures = [self.pool.submit(fn, task) for task in tasks]
        pending, forwarded = set(futures), False
        try:
            while pending:
                done, pending = wait(pending, timeout=0.2, return_when=FIRST_EXCEPTION)
                if not forwarded and stop_signal() is not None:
                    self.pool.signal_workers(signal.SIGTERM)
                    forwarded = True
                for future in done:
                    future.result()  # a partition's error ends the fetch now
        except BrokenProcessPool:
            raise self.died from None
        except BaseException:
            self.pool.signal_workers(signal.SIGTERM)  # the others commit and stop
            raise
        return [future.result() for future in futures]

    def close(self) -> None:
        self.pool.__exit__(None, None, None)


THIN_SHARE = 0.25
"""A segment is *thin* when it has fewer hosts than this share of the fetched segment
waiting for its update (:func:`thin_segment_seconds`)."""

THIN_MIN_S = 2.0
"""The shortest fetch of a thin segment (its hosts' robots.txt and first pages)."""


def thin_segment_seconds(store: Store, segment: str, state: RunState) -> float | None:
    """How long to fetch ``segment`` when it is thin, else None (``fetch.max_duration_s`` holds).

    A segment generated right after a fetch, before that fetch's update, holds only what was
    due without it: the big hosts' URLs past their per-host budget — a few hosts, while the
    update is about to make hundreds due. Fetched to ``fetch.max_duration_s`` it kept those
    hundreds waiting (bench_crawl: 2 hosts for 16 s, between segments of 250 hosts). It is
    fetched while the update runs and ends when the update should have ended (the longer of
    the last two updates), so the next generate has the update's URLs; its hosts' URLs not
    reached are handed back, due at that generate."""
    waiting = seg.oldest(store, seg.State.FETCHED)
    if waiting is not None and segment in state.from_leftovers:
        # Made when nothing else was due: the update beside it makes the rest of the crawl due.
        return max(THIN_MIN_S, *state.update_seconds[-2:]) if state.update_seconds else THIN_FIRST_S
    if waiting is None or not state.update_seconds:
        return None
    this = seg.read_marker(store, segment, seg.Generated)
    before = seg.read_marker(store, waiting, seg.Generated)
    if this is None or before is None or this.hosts >= THIN_SHARE * before.hosts:
        return None
    return max(THIN_MIN_S, *state.update_seconds[-2:])


THIN_FIRST_S = 15.0
"""How long a thin segment is fetched when no update was measured yet (the first of a run):
ended by the update beside it, at the latest after twice this."""

THIN_BOUND_FACTOR = 2.0
"""A thin segment's fetch ends with the update beside it, and at the latest after this many
times :func:`thin_segment_seconds` (the end request reaches only workers on this machine)."""


def end_thin_fetch(store: Store, segment: str, started: float, stop: RunStop) -> None:
    """The update beside thin ``segment`` ended: end its fetch, after ``THIN_MIN_S`` from
    ``started`` (its hosts' robots.txt and first pages). Its URLs not reached are handed
    back, due at the generate that follows."""
    while not stop.requested and (left := THIN_MIN_S - (time.monotonic() - started)) > 0:
        time.sleep(min(left, 0.1))
    if seg.state(store, segment) == seg.State.FETCHING:  # not after its bound ended it
        request_early_end(store, segment)


def fetch_config(store: Store, config: Config, segment: str, state: RunState) -> tuple[Config, str]:
    """The config to fetch ``segment`` with (``config`` itself unless the segment is thin),
    and a note for the progress line."""
    seconds = thin_segment_seconds(store, segment, state)
    limit = config.fetch.max_duration_s
    if limit <= 0 and seconds is not None:  # the segment's own plan (cycles/fetch/worker.py)
        marker = seg.read_marker(store, segment, seg.Generated)
        limit = (marker.planned_s or 0.0) if marker is not None else 0.0
    if seconds is None or (limit > 0 and limit <= seconds and segment not in state.from_leftovers):
        return config, ""
    bound = THIN_BOUND_FACTOR * seconds if limit <= 0 else min(limit, THIN_BOUND_FACTOR * seconds)
    return (dataclasses.replace(config, fetch=dataclasses.replace(config.fetch, max_duration_s=bound)),
            f" (thin: while the update runs, at most {bound:.1f}s)")


def fetch_one(store: Store, config: Config, segment: str, pool: FetchPool | None, state: RunState,
              stop: RunStop, note: str = "") -> Iterator[str]:
    """Fetch ``segment`` (in ``pool``; None: in this process); a stop (deadline or signal)
    commits and ends the run's fetching. ``note``: appended to the progress line."""
    try:
        result = fetch_segment(store, config, segment, 1, executor=pool)
    except FetchInterrupted:
        if not stop.deadline_hit and stop.received is None:
            stop.received = signal.SIGTERM  # stopped by a signal fetch_segment's handler took
        yield f"run: fetch of {segment} stopped; what it fetched is committed (the next `crawl run` resumes it)"
        return
    state.fetched.append(segment)
    c = result.counters
    state.counters["fetch/requests"] += c.get("fetch/requests", 0)
    state.counters["fetch/outcome/ok"] += c.get("fetch/outcome/ok", 0)
    yield (f"run: fetched {segment}: {c.get('fetch/requests', 0)} requests, {c.get('fetch/outcome/ok', 0)} pages "
           f"in {result.seconds:.1f}s{note}")


def run_crawl(store: Store, config: Config, seconds: float | None = None, top_n: int | None = None,
              processes: int | None = None, state: RunState | None = None,
              generate_ahead: bool = True) -> Iterator[str]:
    """Crawl in overlapping cycles until ``seconds`` pass, a signal comes, or nothing is due
    and nothing is pending; yields one progress line per step. ``state`` (optional) is
    filled with what was done. Raises :class:`Interrupted` when stopped by a signal."""
    state = state if state is not None else RunState()
    started = time.monotonic()
    processes = processes or config.fetch.processes or os.cpu_count() or 1
    with seg.cycle_lock(store, "run", config.db), RunStop(seconds) as stop:
        pool = FetchPool(processes) if processes > 1 else None
        try:
            yield from crawl_loop(store, config, top_n, pool, state, stop, generate_ahead)
        finally:
            if pool is not None:
                pool.close()
        if not state.stopped_by:
            state.stopped_by = "deadline" if stop.deadline_hit else "signal"
        received = stop.received
    yield f"run: stopped ({state.stopped_by}) after {time.monotonic() - started:.1f}s"
    if state.stopped_by == "signal":
        name = signal.Signals(received).name if received else "a signal"
        raise Interrupted(f"run: stopped by {name}; every page fetched is committed; `crawl run` resumes")


def crawl_loop(store: Store, config: Config, top_n: int | None, pool: FetchPool | None, state: RunState,
               stop: RunStop, generate_ahead: bool) -> Iterator[str]:
    """The pipelined loop of :func:`run_crawl` (module doc), until a stop or nothing is due."""
    while not stop.requested:
        segment = next_to_fetch(store)
        if segment is None:
            yield from next_segment(store, config, state, top_n)
            segment = next_to_fetch(store)
            if segment is None:
                yield from update_fetched(store, config, state)  # the last one, if any
                state.stopped_by = "nothing due"
                break
        elif seg.state(store, segment) == seg.State.FETCHING:
            yield f"run: resuming the fetch of {segment}"
        if stop.requested:
            break
        # Before the coordinator starts: whether the segment is thin depends on the update it runs.
        segment_config, note = fetch_config(store, config, segment, state)
        thin = segment_config is not config  # fetch_config returns config itself unless thin
        helper = Coordinator(lambda fetching=segment, thin=thin: coordinate(store, config, state, top_n, stop,
                                                                            generate_ahead, fetching, thin))
        helper.start()
        try:
            yield from fetch_one(store, segment_config, segment, pool, state, stop, note)
        finally:
            lines = helper.finish()
        yield from lines
