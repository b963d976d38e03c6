"""A segment: one cycle's folder, its layout, and its lifecycle — the one home of both.

Layout of ``segments/<id>/`` (ids sort by creation time, :func:`cycles.storage.store.new_id`)::

    fetchlist/part-NNNNN.parquet          generate: the URLs chosen (schema.FETCHLIST)
    assignment.parquet                    generate: the partition of each host (schema.ASSIGNMENT)
    seen/part-NNNNN.bloom                 generate: the URLs the crawl DB holds for the partition's
                                          hosts, a Bloom filter (cycles/storage/bloom.py), for discovery
    seen/part-NNNNN.parquet               generate: those URLs counted by host and pattern (schema.SEEN_COUNTS)
    seen/hosts.bloom                      generate: the hosts the crawl DB (or a pending segment) knows,
                                          a Bloom filter, for new-host discovery (cycles/tables/newhosts.py)
    newhosts/<host>.json                  fetch (and a later overlapped generate): one claim per host the
                                          crawl DB did not know, created if absent (cycles/tables/newhosts.py)
    fetched/part-NNNNN-cNNNNNN.parquet    fetch, chunk by chunk: one row per attempt (schema.FETCHED)
    outlinks/part-NNNNN-cNNNNNN.parquet   fetch: links found (schema.OUTLINKS)
    warc/<prefix>-<id>-part-NNNNN-cNNNNNN-<host>.warc.gz   fetch: every exchange (cycles/fetch/warc_records.py)
    archive/                              export: CDXJ, URL index, WET (cycles/archive/)
    hosts/part-NNNNN.parquet              fetch: host state after the partition (schema.HOSTS)
    stats/<stage>*.json                   counters of each stage
    _GENERATED _FETCHING _FETCHED _UPDATED _ABANDONED   markers (JSON), see below

Lifecycle — each step is a marker, written last by the stage that makes it::

    generated ─> fetching ─> fetched ─> updated
        └───────────┴───────────┴─────> abandoned

- ``_GENERATED`` (:class:`Generated`): the fetch list is complete and leased until
  ``lease_until``. Without it the folder is ``incomplete`` (generate was interrupted) and
  leases nothing.
- ``_FETCHING`` (:class:`Fetching`): a fetch started; run ``crawl fetch SEGMENT`` to resume.
- ``_FETCHED`` (:class:`Fetched`): every partition finished; lists every chunk committed,
  with row counts, so update can tell a complete segment from one that lost files.
- ``_UPDATED`` (:class:`Updated`): merged into the crawl DB; the lease is released.
- ``_ABANDONED`` (:class:`Abandoned`): never to be applied — its lease ran out and generate
  leased the URLs again, a newer segment was applied first, or ``crawl abandon SEGMENT``.
  Applying it later would put older fetch results over newer rows.

Segments are applied in generation order: update takes the oldest fetched segment, and
refuses a newer one while an older one waits (:func:`check_apply_order`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import socket
from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import ClassVar, Iterator, TypeVar

from cycles.config import DbConfig
from cycles.errors import LockedError, StageError, StoreError
from cycles.storage.store import SEGMENTS, Store, StorePath, utcnow

FETCHLIST = "fetchlist"
FETCHED = "fetched"
OUTLINKS = "outlinks"
SITEMAPS = "sitemaps"
"""URLs listed by the hosts' sitemaps (schema.SITEMAP_URLS; cycles/tables/sitemaps.py)."""
WARC = "warc"
ARCHIVE = "archive"
"""``crawl export``'s indexes and text of the segment's WARC files (cycles/archive/)."""
HOSTS = "hosts"
LEFTOVER = "leftover"
"""What discovery queued and the fetch did not reach (schema.LEFTOVER): ``crawl run`` may list
it before the segment's update (cycles/generate/generate.py ``with_leftovers_sql``)."""
SEEN = "seen"
NEWHOSTS = "newhosts"
"""Claims of hosts the crawl DB did not know, fetched inside this segment (cycles/tables/newhosts.py)."""
STATS = "stats"
UPDATE_INPUTS = "update"
"""update's routed inputs (removed after the swap)."""
CANDIDATES = "candidates"
"""generate's per-bucket choices (removed when the fetch list is written)."""
PROGRESS = "progress"
"""Under ``stats/``: counters fetch workers publish while running (local only)."""

PART_GLOB = "part-*.parquet"


class State(str, Enum):
    INCOMPLETE = "incomplete"
    """No marker: generate was interrupted; nothing is leased."""
    GENERATED = "generated"
    FETCHING = "fetching"
    FETCHED = "fetched"
    UPDATED = "updated"
    ABANDONED = "abandoned"

    def __str__(self) -> str:
        return self.value


PENDING = (State.GENERATED, State.FETCHING, State.FETCHED)
"""States whose segment still has work to do (and holds its lease while it is live)."""

M = TypeVar("M", bound="Marker")


@dataclass
class Marker:
    """A marker file: a small JSON object written last by the stage it names."""

    FILE: ClassVar[str] = ""
    """``_<STATE>``: the marker's file name in the segment's folder."""
    STATE: ClassVar[State]
    segment: str

    def __init_subclass__(cls, state: State | None = None, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if state is not None:  # class Generated(Marker, state=State.GENERATED): file _GENERATED
            cls.STATE, cls.FILE = state, "_" + state.value.upper()

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, default=str) + "\n"

    @classmethod
    def from_dict(cls: type[M], data: dict) -> M:
        # Unknown keys (written by a newer version) are kept out; missing optional keys
        # (markers written by older versions and by tests) take their defaults.
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def from_json(cls: type[M], text: str | bytes) -> M:
        return cls.from_dict(json.loads(text))


@dataclass
class Generated(Marker, state=State.GENERATED):
    """Written last by generate: the fetch list is complete and its URLs are leased."""

    generated_at: str | None = None
    """ISO time the fetch list was complete."""
    urls: int = 0
    """URLs in the fetch list, over ``hosts`` hosts in ``partitions`` partitions."""
    hosts: int = 0
    partitions: int = 0
    lease_until: str | None = None
    """ISO time until which the fetch list's URLs are not generated again."""
    crawldb_version: str | None = None
    continues: str | None = None
    """The segment being fetched when this one was generated, which it may go on from (its
    hosts listed again; ``crawl run``, cycles/tables/leases.py ``continuing_lease``)."""
    planned_s: float | None = None
    """The length, in seconds, its fetch list was sized for and its fetch ends at
    (``generate.segment_s`` or ``crawl run``'s choice; docs/segments.md). None: a segment
    generated before plans were written (no planned end)."""

    def lease_expired(self, now: dt.datetime) -> bool:
        return self.lease_until is not None and dt.datetime.fromisoformat(self.lease_until) <= now


@dataclass
class Fetching(Marker, state=State.FETCHING):
    """Written when a fetch first starts (where: ``host``, ``pid``); a resumed fetch keeps it, so
    ``started_at`` times the whole fetch."""

    started_at: str | None = None
    host: str | None = None
    pid: int | None = None


@dataclass
class Fetched(Marker, state=State.FETCHED):
    """Written last by fetch, after every partition's chunks: what update reads is complete
    (``chunks``: what it must find)."""

    fetched_at: str | None = None
    seconds: float = 0.0
    partitions: int = 0
    """The fetch's partitions (worker tasks), which took ``seconds`` together, wall clock."""
    requests: int = 0
    """Requests sent (the ``fetch/requests`` counter)."""
    chunks: list[dict] | None = None
    """Every chunk committed: ``{"partition", "chunk", "fetched_rows", "outlinks_rows",
    "warc_bytes", "warc_file"}`` (``warc_bytes`` and ``warc_file`` None when the chunk had no
    WARC; ``warc_file`` absent in older markers, whose WARC is ``<chunk>.warc.gz``). None in
    markers of older versions: such a segment is not verified."""


@dataclass
class Updated(Marker, state=State.UPDATED):
    updated_at: str | None = None
    new_urls: int = 0
    results: int = 0
    feed_batch: str | None = None


@dataclass
class Abandoned(Marker, state=State.ABANDONED):
    reason: str = ""
    abandoned_at: str = field(default_factory=lambda: utcnow().isoformat())


MARKERS: dict[str, type[Marker]] = {m.STATE.value: m for m in (Generated, Fetching, Fetched, Updated, Abandoned)}

_PRECEDENCE = (Updated, Abandoned, Fetched, Fetching, Generated)
"""A segment's state is its most advanced marker; updated wins over abandoned (it was
applied), abandoned over the fetch markers (a fetch finishing after it changes nothing)."""


# --- paths ------------------------------------------------------------------------------
def segments_root(store: Store) -> StorePath:
    return store.path(SEGMENTS)


def segment_ids(store: Store) -> list[str]:
    """Every segment id, oldest first."""
    return store.segments()


def segment_dir(store: Store, segment: str, must_exist: bool = True) -> StorePath:
    return store.segment_dir(segment, must_exist)


def part_name(partition: int) -> str:
    return f"part-{partition:05d}"


def fetchlist_file(seg_dir: StorePath, partition: int) -> StorePath:
    return seg_dir / FETCHLIST / f"{part_name(partition)}.parquet"


def assignment_file(seg_dir: StorePath) -> StorePath:
    """Which partition fetches each host (generate; cycles/tables/assign.py)."""
    return seg_dir / "assignment.parquet"


def seen_bloom_file(seg_dir: StorePath, partition: int) -> StorePath:
    """The partition's seen-set: a Bloom filter of the URLs the crawl DB holds for its hosts."""
    return seg_dir / SEEN / f"{part_name(partition)}.bloom"


def seen_counts_file(seg_dir: StorePath, partition: int) -> StorePath:
    """Those URLs counted by host and pattern (schema.SEEN_COUNTS): the inline trap caps."""
    return seg_dir / SEEN / f"{part_name(partition)}.parquet"


def known_hosts_file(seg_dir: StorePath) -> StorePath:
    """The hosts the crawl DB or a pending segment knew at generate: a Bloom filter (cycles/tables/newhosts.py)."""
    return seg_dir / SEEN / "hosts.bloom"


def newhost_claims_dir(seg_dir: StorePath) -> StorePath:
    """One claim object per new host fetched in this segment (cycles/tables/newhosts.py)."""
    return seg_dir / NEWHOSTS


def newhost_claim_file(seg_dir: StorePath, host: str) -> StorePath:
    """The claim of ``host`` (its name %-quoted: IPv6 brackets and colons stay out of file names)."""
    from urllib.parse import quote

    return seg_dir / NEWHOSTS / f"{quote(host, safe='.-_')}.json"


def leftover_file(seg_dir: StorePath, partition: int) -> StorePath:
    return seg_dir / LEFTOVER / f"{part_name(partition)}.parquet"


def hosts_file(seg_dir: StorePath, partition: int) -> StorePath:
    return seg_dir / HOSTS / f"{part_name(partition)}.parquet"


def stats_file(seg_dir: StorePath, name: str) -> StorePath:
    return seg_dir / STATS / f"{name}.json"


def partition_stats_file(seg_dir: StorePath, partition: int) -> StorePath:
    return stats_file(seg_dir, f"fetch-{part_name(partition)}")


def files(store: Store, segment: str, folder: str) -> list[StorePath]:
    """The Parquet part files of one of the segment's folders (``FETCHLIST``, ``FETCHED`` …)."""
    return store.list(store.path(SEGMENTS, segment, folder), PART_GLOB)


def partitions_of(store: Store, segment: str) -> list[int]:
    """Partition numbers of the segment's fetch list."""
    return sorted(int(p.name.split("-")[1].split(".")[0]) for p in files(store, segment, FETCHLIST))


# --- markers ----------------------------------------------------------------------------
def read_marker(store: Store, segment: str, kind: type[M]) -> M | None:
    path = segment_dir(store, segment) / kind.FILE
    try:
        data = store.read_json(path)
    except FileNotFoundError:
        return None
    try:
        return kind.from_dict(data)
    except TypeError as exc:
        raise StoreError(f"{store.uri_of(path)} is not a {kind.__name__} marker ({exc}); restore it, or "
                         f"`crawl abandon {segment}` and let its URLs come back") from None


def write_marker(store: Store, marker: Marker) -> None:
    store.write_bytes(segment_dir(store, marker.segment) / marker.FILE, marker.to_json().encode())


def state(store: Store, segment: str) -> State:
    """The segment's lifecycle state, from one listing of its folder."""
    names = store.names(segment_dir(store, segment))
    for kind in _PRECEDENCE:
        if kind.FILE in names:
            return kind.STATE
    return State.INCOMPLETE


def states(store: Store) -> list[tuple[str, State]]:
    """(segment, state) of every segment, oldest first."""
    return [(s, state(store, s)) for s in segment_ids(store)]


def oldest(store: Store, *wanted: State) -> str | None:
    for segment, current in states(store):
        if current in wanted:
            return segment
    return None


def abandon(store: Store, segment: str, reason: str) -> Abandoned:
    """Mark a segment never to be applied (``crawl abandon``): its URLs are leased no more.

    An updated segment cannot be abandoned: its results are in the crawl DB already.
    """
    current = state(store, segment)
    if current == State.UPDATED:
        raise StageError(f"abandon: segment {segment} is already updated (merged into the crawl DB); "
                         "nothing to abandon")
    marker = Abandoned(segment, reason)
    write_marker(store, marker)
    return marker


def abandon_expired(store: Store, now: dt.datetime) -> list[str]:
    """Abandon every pending segment whose lease ran out: generate is about to lease its
    URLs again, and applying it after that would put older results over newer ones."""
    abandoned = []
    for segment, current in states(store):
        if current not in PENDING:
            continue
        marker = read_marker(store, segment, Generated)
        if marker is not None and marker.lease_expired(now):
            write_marker(store, Abandoned(segment, f"lease ran out at {marker.lease_until} before it was "
                                                   "updated; its URLs were due to be generated again"))
            abandoned.append(segment)
    return abandoned


def mark_fetching(store: Store, segment: str) -> None:
    if not store.exists(segment_dir(store, segment) / Fetching.FILE):
        write_marker(store, Fetching(segment, utcnow().isoformat(), socket.gethostname(), os.getpid()))


def check_apply_order(store: Store, segment: str) -> None:
    """Segments are applied in generation order: refuse ``segment`` while an older one is
    fetched and waits, and abandon it if a newer one was applied already."""
    ids = segment_ids(store)
    for other in ids:
        if other >= segment:
            break
        if state(store, other) == State.FETCHED:
            raise StageError(f"update: segment {other} is older than {segment} and not applied yet; segments are "
                             f"applied in generation order: run `crawl update {other}` first (or `crawl abandon "
                             f"{other}`)")
    newer = [s for s in ids if s > segment and state(store, s) == State.UPDATED]
    if newer:
        write_marker(store, Abandoned(segment, f"newer segment {newer[0]} was applied first; applying this "
                                               "one would put older fetch results over newer rows"))
        raise StageError(f"update: segment {segment} is older than the applied segment {newer[0]}; it is now "
                         "abandoned (its URLs come back when due)")


def next_command(segment: str, current: State) -> str | None:
    """The command that moves a pending segment on."""
    if current in (State.GENERATED, State.FETCHING):
        return f"crawl fetch {segment}"
    if current == State.FETCHED:
        return f"crawl update {segment}"
    return None


# --- locks ------------------------------------------------------------------------------
@contextlib.contextmanager
def cycle_lock(store: Store, who: str, db: DbConfig | None = None) -> Iterator[None]:
    """The store-wide lock of the stages that start segments (``crawl cycle``, ``crawl
    generate``): taken *before* anything is leased, so a second one exits at once with
    one line and leaves no stranded lease behind it (two at once: the loser leased URLs,
    then died on the fetch lock, its lease stranded for ``generate.lease_s``)."""
    lock = store.lock("cycle", db=db)
    try:
        lock.__enter__()
    except LockedError:
        raise LockedError(f"{who}: another `crawl cycle` or `crawl generate` is running on {store.uri}; "
                          "nothing was generated or leased; wait for it to finish") from None
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


# --- fetch output, as the fetched marker lists it -----------------------------------------
def verify_fetched(store: Store, segment: str) -> Fetched | None:
    """Check that every chunk the fetched marker lists is present with its row count (from
    the Parquet footer; the WARC by its presence). Update runs this before changing
    anything: a lost ``fetched/`` chunk or ``outlinks/`` folder was silently dropped.
    Files the marker does not list are ignored. Returns the marker (None if missing)."""
    marker = read_marker(store, segment, Fetched)
    if marker is None or marker.chunks is None:
        return marker  # no marker, or written by an older version: nothing to check against
    folder = segment_dir(store, segment)
    fix = (f"restore it from a copy, or give the segment up with `crawl abandon {segment}` (its URLs come "
           "back when due)")
    present = {sub: store.names(folder / sub) for sub in (FETCHED, OUTLINKS, WARC)}
    for entry in marker.chunks:
        for sub, suffix, rows in ((FETCHED, ".parquet", entry["fetched_rows"]),
                                  (OUTLINKS, ".parquet", entry["outlinks_rows"]),
                                  (WARC, ".warc.gz", entry.get("warc_bytes"))):
            if sub == WARC and rows is None:
                continue  # the chunk had no response with a body
            path = folder / sub / (entry.get("warc_file") or entry["chunk"] + suffix if sub == WARC
                                   else entry["chunk"] + suffix)
            if path.name not in present[sub]:
                raise StoreError(f"update: segment {segment} is incomplete: {store.uri_of(path)} is missing "
                                 f"(the fetched marker lists it); nothing was changed; {fix}")
            if sub == WARC:
                continue
            try:
                found = store.read_metadata(path).num_rows
            except (OSError, ValueError) as exc:
                raise StoreError(f"update: segment {segment}: {store.uri_of(path)} is not a readable Parquet file "
                                 f"({exc}); nothing was changed; {fix}") from None
            if found != rows:
                raise StoreError(f"update: segment {segment}: {store.uri_of(path)} has {found} rows, the fetched "
                                 f"marker lists {rows}; nothing was changed; {fix}")
    return marker


def output_files(store: Store, seg_dir: StorePath, sub: str) -> list[StorePath]:
    """The ``fetched/`` or ``outlinks/`` chunk files update reads: those the fetched marker
    lists (files it does not list — a chunk of an interrupted commit — are ignored), or
    every part file when the marker has no list (older versions, hand-made segments)."""
    segment = seg_dir.name
    marker = read_marker(store, segment, Fetched) if store.exists(seg_dir / Fetched.FILE) else None
    if marker is None or marker.chunks is None:
        return store.list(seg_dir / sub, PART_GLOB)
    return sorted(seg_dir / sub / f"{entry['chunk']}.parquet" for entry in marker.chunks)


def stage_marker(store: Store, segment: str, stage: str) -> dict | None:
    """A marker as a dict (``stage``: generated, fetching, fetched, updated, abandoned)."""
    marker = read_marker(store, segment, MARKERS[stage])
    return None if marker is None else marker.__dict__.copy()


def write_stage_marker(store: Store, segment: str, stage: str, data: dict) -> None:
    write_marker(store, MARKERS[stage].from_dict({**data, "segment": segment}))


def segment_state(store: Store, segment: str) -> str:
    """The segment's lifecycle state as its name (:func:`state`)."""
    return state(store, segment).value
