"""New hosts fetched inside the fetch: a host no one knows is claimed by the worker that found it.

Discovery (cycles/fetch/discovery.py) fetches in the same segment new links to the hosts of
its own partition. A link to a host the crawl DB does not know at all used to wait: the
host entered the crawl DB at the segment's update and was fetched one generate later — a
whole segment of a 1 request/s budget lost per new host, and on a link-following crawl
most hosts are new once. Now the worker that finds such a link may take the host over for
this segment, when nobody else can be fetching it:

- **the crawl DB does not know the host**: generate writes beside the seen-sets a Bloom
  filter of every host of the crawl DB it read, plus every host claimed by a segment not
  yet updated (``seen/hosts.bloom``, cycles/generate/generate.py ``write_known_hosts``; a false positive leaves a
  host to the usual path, a later generate). A known host is some partition's, or will be
  generated (and fetched with its spacing from the host DB) like any other;
- **no other pending segment claimed it**: the claims of every other segment generated,
  fetching or fetched but not updated, read once when the partition starts (one fetch runs
  at a time — the fetch lock — so an earlier segment claims nothing more meanwhile);
- **the claim**: one object per host in the segment folder, ``newhosts/<host>.json``,
  created if absent (a local store: ``os.link`` of a complete temporary file, which fails
  when the name exists; S3: ``PUT`` with ``If-None-Match: *``, as the S3 lock and the
  partition lease). Exactly one worker process of the segment, on any machine, gets it; a
  resumed run of the same partition reads its own claim back and keeps the host.

A claimed host is then the worker's like a host of its fetch list: robots.txt first, its
own slot and delay (set up from the host DB, which knows nothing of it, so the floor
delay), the same per-host budget and trap caps as discovery, and the SSRF guard as for
every request. Its fetched rows are merged by update like any discovered page's (a row for
a URL the crawl DB does not hold adds it); its slot goes into the partition's ``hosts/``
output, so the next segment that fetches it keeps the spacing.

**A segment generated while this one is fetched** (``crawl run --generate-ahead``) must
not list a host claimed here while this segment is in flight. Its generate, for every
host it selected that this segment's known-hosts filter does not hold (only those can be
claimed here), creates the claim itself in this segment's ``newhosts/`` folder (owner:
the new segment); when a worker claimed the host first, the create fails and generate
leaves the host out (:func:`leave_out_claimed`). One atomic create per host decides, so
there is no window in which both take it.

Counters: ``discover/new_host_claimed``, ``discover/new_host_known`` (in the filter),
``discover/new_host_taken`` (claimed by another partition or segment),
``generate/new_hosts_left_out``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from cycles.tables import segment as seg
from cycles.storage.bloom import BloomFilter
from cycles.errors import StoreError
from cycles.tables.leases import IN_FLIGHT
from cycles.storage.durable import fsync_dir, fsync_file, make_dirs, tmp_name
from cycles.storage.store import Store, StorePath

KNOWN_HOSTS_FP = 0.001
"""False-positive rate of the known-hosts filter: hosts are few next to URLs (a million
hosts ≈ 1.8 MB), and a false positive costs the host a whole segment."""

MIN_KNOWN_HOSTS_CAPACITY = 1000


# --- the claim object -----------------------------------------------------------------
def create_if_absent(store: Store, path: StorePath, data: bytes) -> bool:
    """Write ``path`` only if it does not exist; True when this call created it.

    Local: the data goes to a temporary file first and is hard-linked to the name (link(2)
    fails with EEXIST), so a reader never sees a half-written claim. S3: a conditional PUT."""
    if not store.local:
        return _s3_create_if_absent(store, path, data)
    make_dirs(path.parent)
    tmp = tmp_name(path)
    tmp.write_bytes(data)
    fsync_file(tmp)
    try:
        os.link(tmp, path)
        fsync_dir(path.parent)  # the claim's name is durable before the worker acts on it
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def _s3_create_if_absent(store: Store, path: StorePath, data: bytes) -> bool:
    from botocore.exceptions import ClientError

    bucket, _, key = str(path).partition("/")
    try:
        store.s3_client().put_object(Bucket=bucket, Key=key, Body=data, IfNoneMatch="*")
        return True
    except ClientError as exc:
        code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
        if code in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
            return False
        raise StoreError(f"fetch: cannot write the host claim {store.uri_of(path)}: {exc}") from None


def claim_body(segment: str, partition: int | None, host: str) -> bytes:
    """``partition`` None: claimed by a later segment's generate (the host is in its fetch list)."""
    return json.dumps({"host": host, "segment": segment, "partition": partition}).encode()


def read_claim(store: Store, path: StorePath) -> dict:
    try:
        return json.loads(store.read_bytes(path))
    except (FileNotFoundError, ValueError):
        return {}


def claimed_hosts(store: Store, segment: str) -> set[str]:
    """The hosts claimed in ``segment`` (by its workers, or by a later generate): one listing,
    the host read back from each claim's name (:func:`cycles.tables.segment.newhost_claim_file`)."""
    folder = seg.newhost_claims_dir(store.segment_dir(segment, must_exist=False))
    return {unquote(path.name[:-len(".json")]) for path in store.list(folder, "*.json")}


def pending_claims(store: Store, but: str | None = None) -> set[str]:
    """Hosts claimed by every segment not updated yet (generated, fetching, fetched), but ``but``."""
    hosts: set[str] = set()
    for segment, state in seg.states(store):
        if state in seg.PENDING and segment != but:
            hosts |= claimed_hosts(store, segment)
    return hosts


# --- generate's side ---------------------------------------------------------------------
def read_known_hosts(store: Store, folder: StorePath) -> BloomFilter | None:
    path = seg.known_hosts_file(folder)
    try:
        return BloomFilter.from_bytes(store.read_bytes(path))
    except (FileNotFoundError, ValueError):
        return None


def leave_out_claimed(store: Store, segment: str, selected: pa.Table, counters: Counter | None = None) -> pa.Table:
    """``selected`` without the hosts a segment in flight claimed (:func:`claimed_elsewhere`)."""
    if selected.num_rows == 0:
        return selected
    dropped = claimed_elsewhere(store, segment, pc.unique(selected["host"]).to_pylist(), counters)
    if not dropped:
        return selected
    return selected.filter(pc.invert(pc.is_in(selected["host"], pa.array(sorted(dropped), pa.string()))))


def claimed_elsewhere(store: Store, segment: str, hosts: list[str], counters: Counter | None = None) -> set[str]:
    """The ``hosts`` a segment in flight claimed, which ``segment`` must leave out (module doc).

    For each other segment generated or fetching, each host its known-hosts filter lacks is
    claimed in its name for ``segment``; a host whose claim is another's is left out."""
    others = [s for s, state in seg.states(store) if state in IN_FLIGHT and s != segment]
    dropped: set[str] = set()
    if not others or not hosts:
        return dropped
    for other in others:
        folder = store.segment_dir(other, must_exist=False)
        known = read_known_hosts(store, folder)
        if known is None:
            continue  # generated without discovery: its workers claim nothing
        candidates = [h for h in hosts if h not in dropped]
        for host, is_known in zip(candidates, known.contains_many(candidates)):
            if is_known:
                continue
            path = seg.newhost_claim_file(folder, host)
            if create_if_absent(store, path, claim_body(segment, None, host)):
                continue
            if read_claim(store, path).get("segment") != segment:
                dropped.add(host)
    if dropped and counters is not None:
        counters["generate/new_hosts_left_out"] += len(dropped)
    return dropped


# --- the worker's side ----------------------------------------------------------------------
class NewHosts:
    """Which hosts outside its fetch list one partition claims in its segment."""

    def __init__(self, store: Store, seg_dir: StorePath, segment: str, partition: int, stats: Counter):
        self.store = store
        self.seg_dir = seg_dir
        self.segment = segment
        self.partition = partition
        self.stats = stats
        self.known: BloomFilter | None = None
        """The crawl DB's hosts at generate (None: off — no filter, so nothing is new)."""
        self.elsewhere: set[str] = set()
        """Hosts claimed by other pending segments."""
        self.verdict: dict[str, bool] = {}
        """host → claimed by this partition (True) or not claimable (False), asked once."""

    def load(self) -> None:
        self.known = read_known_hosts(self.store, self.seg_dir)
        if self.known is not None:
            self.elsewhere = pending_claims(self.store, but=self.segment)

    @property
    def enabled(self) -> bool:
        return self.known is not None

    def is_new(self, host: str) -> bool:
        """The host is known to nobody: not in the crawl DB's filter."""
        return self.known is not None and host not in self.known

    def claim(self, host: str) -> bool:
        """Take ``host`` for this partition in this segment (True), or learn it is not ours."""
        verdict = self.verdict.get(host)
        if verdict is not None:
            return verdict
        verdict = self._claim(host)
        self.verdict[host] = verdict
        return verdict

    def _claim(self, host: str) -> bool:
        if self.known is None or host in self.known:
            self.stats["discover/new_host_known"] += 1
            return False
        if host in self.elsewhere:
            self.stats["discover/new_host_taken"] += 1
            return False
        path = seg.newhost_claim_file(self.seg_dir, host)
        if not create_if_absent(self.store, path, claim_body(self.segment, self.partition, host)):
            holder = read_claim(self.store, path)
            if holder.get("segment") != self.segment or holder.get("partition") != self.partition:
                self.stats["discover/new_host_taken"] += 1
                return False
            # our own claim, from an earlier run of this partition (resumed after a crash)
        self.stats["discover/new_host_claimed"] += 1
        return True
