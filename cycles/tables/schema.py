"""The tables of the crawler, column by column and status by status.

Every Parquet file the crawler writes has one of the schemas below, and carries
``crawl.schema`` and ``crawl.schema_version`` in its metadata. Timestamps are UTC,
microseconds. A column's doc is kept in the field metadata too, so
``pyarrow.parquet.read_schema(path)`` shows it.

Tables and where they live (see ``cycles/storage/store.py`` for paths):

- crawl DB     ``crawldb/<version>/bucket-NNNNN.parquet``   one row per known URL
- fetch list   ``segments/<id>/fetchlist/part-NNNNN.parquet`` written by generate
- assignment   ``segments/<id>/assignment.parquet``  which partition owns each host: the
  heaviest slot keys by name, every other host by its key's hash group
- chosen hosts ``segments/<id>/candidates/chosen-hosts-NNNNN.parquet``  a bucket's hosts of
  the fetch list with their key and group; ``candidates/hosts-NNNNN.parquet``  every host of a
  crawl DB bucket, for the known-hosts filter (both generate's own, deleted when it ends)
- seen counts  ``segments/<id>/seen/part-NNNNN.parquet``  known URLs per host and pattern
  (beside the partition's seen-set Bloom filter ``seen/part-NNNNN.bloom``)
- fetched      ``segments/<id>/fetched/part-NNNNN-*.parquet``  one row per fetch attempt
- outlinks     ``segments/<id>/outlinks/part-NNNNN-*.parquet`` links found by fetch
- sitemap URLs ``segments/<id>/sitemaps/part-NNNNN-*.parquet`` URLs the hosts' sitemaps list
  (only chunks that found some have a file)
- hosts        ``segments/<id>/hosts/part-NNNNN.parquet`` and ``hostdb/`` per-host state
- pages feed   ``pages/<segment id>.parquet``  new or changed pages for the indexer
- link DB      ``linkdb/<version>/``  the link graph update accumulates (cycles/update/linkgraph.py):
  ``inlinks-NNNNN.parquet`` (LINK_INLINKS), ``urls-NNNNN.parquet`` (LINK_URLS), by host-hash bucket,
  ``host_edges-NNNNN.parquet`` (LINK_HOST_EDGES), ``hosts-NNNNN.parquet`` (LINK_HOSTS), by the
  part of the source host / the host (cycles/update/hostrank.py; one ``host_edges.parquet`` and
  one ``hosts.parquet`` in versions written before, still read)
- URL index    ``segments/<id>/archive/<prefix>-<id>.cc-index.parquet``  Common Crawl's
  cc-index columns, one row per WARC response or revisit record (``crawl export``)
"""

from __future__ import annotations

import pyarrow as pa

from cycles.storage.parquet import rename_columns

SCHEMA_VERSION = 3
"""2: the crawl DB lost lease_until / lease_segment (leases live in the segments' fetch
lists, cycles/tables/leases.py) and gained pattern_hash. 3: the crawl DB gained unchanged_s (the
change-rate estimate from Last-Modified, cycles/update/schedule.py). cycles/tables/crawldb.py
upgrades an older crawl DB as it reads it."""

RENAMED_COLUMNS = {"simhash": "minhash"}
"""Columns renamed in every table, old name -> new: a stored file with the old name reads
under the new one (cycles/storage/parquet.py), so no schema version is needed and nothing is
rewritten. ``simhash`` held a 1-bit MinHash, never a SimHash (issue 25)."""
rename_columns(RENAMED_COLUMNS)

TS = pa.timestamp("us", tz="UTC")


def _field(name: str, type_: pa.DataType, doc: str, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable=nullable, metadata={"doc": doc})


def _schema(name: str, fields: list[pa.Field]) -> pa.Schema:
    return pa.schema(fields, metadata={"crawl.schema": name, "crawl.schema_version": str(SCHEMA_VERSION)})


# --- Crawl DB statuses (what we know of a URL) -------------------------------------------
class DbStatus:
    UNFETCHED = "unfetched"          # known, never fetched (new outlink or seed)
    FETCHED = "fetched"              # fetched with 2xx; content stored
    NOT_MODIFIED = "not_modified"    # last fetch answered 304; previous content still current
    REDIRECTED = "redirected"        # answered 3xx; the target is in redirect_to (and in the DB)
    GONE = "gone"                    # answered 404/410 (or other 4xx); retried rarely
    ROBOTS_DENIED = "robots_denied"  # robots.txt disallows it for our agent
    ERROR = "error"                  # transient failure (5xx, timeout, network); retried soon
    DEAD = "dead"                    # failed max_retries times in a row; retried very rarely
    DUPLICATE = "duplicate"          # text identical to duplicate_of's; not indexed, links not followed
    NEAR_DUPLICATE = "near_duplicate"  # fingerprint (minhash column) within update.minhash_max_distance of duplicate_of's; not indexed
    SKIPPED = "skipped"              # fetched but not stored: not HTML or too large
    BLOCKED = "blocked"              # its host's address is not public nor in fetch.allowed_networks
                                     # (SSRF guard); looked at again after update.gone_interval_s

    ALL = (UNFETCHED, FETCHED, NOT_MODIFIED, REDIRECTED, GONE, ROBOTS_DENIED, ERROR, DEAD,
           DUPLICATE, NEAR_DUPLICATE, SKIPPED, BLOCKED)


DNS_FAILURE_KINDS = ("nxdomain", "servfail", "timeout", "no_address")
"""Why a lookup failed: the host row's ``dns_error`` and the fetch's ``dns/failures/<kind>``
counters (cycles/fetch/dns.py; here, so that cycles/metrics.py need not import the fetch stage)."""


# --- Fetch outcomes (what one fetch attempt gave) -----------------------------------------
class FetchOutcome:
    OK = "ok"                        # 2xx with an HTML body, stored in WARC and parsed
    NOT_MODIFIED = "not_modified"    # 304 to a conditional GET; no body
    REDIRECT = "redirect"            # 3xx with a Location; redirect_to holds the target
    GONE = "gone"                    # 404 or 410
    CLIENT_ERROR = "client_error"    # other 4xx (except 429)
    SERVER_ERROR = "server_error"    # 5xx or 429
    NETWORK_ERROR = "network_error"  # DNS, connect, reset, timeout, too slow
    ROBOTS_DENIED = "robots_denied"  # disallowed by robots.txt; never requested
    NOT_HTML = "not_html"            # not HTML; body not downloaded
    TOO_LARGE = "too_large"          # body over fetch.max_page_bytes; transfer aborted
    PARSE_ERROR = "parse_error"      # 2xx stored in WARC, but the parser crashed on it
    DEFERRED = "deferred"            # not attempted this cycle (host set aside, robots
                                     # unavailable, out of time); goes back unfetched
    BLOCKED = "blocked"              # not connected: the address is not public and not in
                                     # fetch.allowed_networks (SSRF guard); no packet sent
    TLS_FAILED = "tls_failed"        # the host's TLS handshake failed (error: "<reason>: ...",
                                     # cycles/fetch/tls.py); no HTTP request sent. Every
                                     # queued URL of the host gets it; the host is backed off

    ALL = (OK, NOT_MODIFIED, REDIRECT, GONE, CLIENT_ERROR, SERVER_ERROR, NETWORK_ERROR,
           ROBOTS_DENIED, NOT_HTML, TOO_LARGE, PARSE_ERROR, DEFERRED, BLOCKED, TLS_FAILED)


CRAWLDB = _schema("crawldb", [
    _field("url", pa.string(), "Normalised URL (cycles.urls.normalize_url); the primary key", False),
    _field("host", pa.string(), "Lower-case host name of url", False),
    _field("host_hash", pa.uint64(), "cycles.urls.host_hash(host); bucket = host_hash % db.buckets", False),
    _field("pattern_hash", pa.uint64(), "Hash of the URL's pattern (digit and hex runs and query values "
           "masked: cycles.tables.crawldb.url_pattern_sql); the URLs a trap generates share it", False),
    _field("status", pa.string(), "DbStatus: unfetched, fetched, not_modified, redirected, gone, "
           "robots_denied, error, dead, duplicate, near_duplicate, skipped, blocked", False),
    _field("first_seen", TS, "When the URL was first added", False),
    _field("first_fetched", TS, "Start of the first successful fetch (2xx or 304); with fetch_count and "
           "change_count it gives the page's change rate"),
    _field("last_fetched", TS, "Start of the last fetch attempt; null if never attempted"),
    _field("next_fetch", TS, "When the URL is next due", False),
    _field("fetch_interval_s", pa.int32(), "Current refetch interval in seconds", False),
    _field("retries", pa.int16(), "Consecutive transient failures", False),
    _field("fetch_count", pa.int32(), "Successful fetches (2xx or 304)", False),
    _field("change_count", pa.int32(), "Refetches that found changed content (the first fetch is not a change)", False),
    _field("last_changed", TS, "When content was last seen to change"),
    _field("http_status", pa.int16(), "HTTP status of the last attempt; null if none"),
    _field("content_hash", pa.string(), "Hex digest of the normalised page text of the last 2xx"),
    _field("minhash", pa.uint64(), "64-bit near-duplicate fingerprint (1-bit MinHash, cycles.fingerprint.minhash64) of the main content of the last 2xx (cycles.fetch.parse._main_blocks)"),
    _field("etag", pa.string(), "ETag of the last 2xx, sent back as If-None-Match"),
    _field("last_modified", pa.string(), "Last-Modified of the last 2xx, sent back as If-Modified-Since"),
    _field("score", pa.float32(), "Priority; higher is fetched first", False),
    _field("depth", pa.int16(), "Link hops from a seed (seeds are 0)", False),
    _field("redirect_to", pa.string(), "Target of the last redirect (normalised)"),
    _field("duplicate_of", pa.string(), "Canonical URL whose content this page duplicates"),
    _field("error", pa.string(), "Reason of the last failure, for operators"),
    _field("unchanged_s", pa.int64(), "Seconds the page is known to have stayed unchanged, summed over its "
           "refetches: the interval of one that found no change, the age of its Last-Modified for one that "
           "found a change; with change_count it gives the page's change rate (cycles/update/schedule.py). "
           "Null once a change came without a usable Last-Modified: the rate then comes from the counts"),
])

FETCHLIST = _schema("fetchlist", [
    _field("url", pa.string(), "URL to fetch", False),
    _field("host", pa.string(), "Host of url", False),
    _field("host_hash", pa.uint64(), "cycles.urls.host_hash(host); the partition is the host's in the "
           "segment's assignment (cycles/tables/assign.py)", False),
    _field("score", pa.float32(), "Priority at generate time", False),
    _field("depth", pa.int16(), "Link hops from a seed", False),
    _field("etag", pa.string(), "Validator for If-None-Match"),
    _field("last_modified", pa.string(), "Validator for If-Modified-Since"),
])

ASSIGNMENT = _schema("assignment", [
    _field("key", pa.string(), "A slot key placed by name: one of the segment's heaviest hosts (or, with "
           "generate.partition_by, domains / addresses) by expected fetch time; null on a group's row"),
    _field("key_group", pa.int32(), "host_hash(key) % generate.assign_groups; on a group's row, the group "
           "it places (every group has one row)", False),
    _field("partition", pa.int32(), "The one partition that fetches the key's hosts (a named row), else the "
           "hosts of the group's keys (cycles/tables/assign.py Assignment)", False),
])

BUCKET_HOSTS = _schema("bucket-hosts", [
    _field("host", pa.string(), "A host of the crawl DB bucket (generate's known-hosts filter is filled "
           "from them)", False),
])

CHOSEN_HOSTS = _schema("chosen-hosts", [
    _field("host", pa.string(), "A host of the bucket with URLs in the fetch list", False),
    _field("key", pa.string(), "Its slot key (cycles/slotkey.py; the host itself with partition_by = host)", False),
    _field("key_group", pa.int32(), "host_hash(key) % generate.assign_groups", False),
])

SEEN_COUNTS = _schema("seen-counts", [
    _field("host", pa.string(), "A host of the partition's fetch list", False),
    _field("pattern_hash", pa.uint64(), "A URL pattern of the host (crawl DB pattern_hash)", False),
    _field("urls", pa.int64(), "URLs the crawl DB holds for that host and pattern when generated", False),
])

LEFTOVER = _schema("leftover", [
    _field("url", pa.string(), "A URL discovery inside the fetch queued for its host (normalised, past the "
           "filters, budgets and trap caps) that the partition ended before fetching", False),
    _field("host", pa.string(), "Host of url", False),
    _field("host_hash", pa.uint64(), "cycles.urls.host_hash(host)", False),
    _field("score", pa.float32(), "Score discovery gave it (1 / (depth + 1))", False),
    _field("depth", pa.int16(), "Link hops from a seed", False),
])

FETCHED = _schema("fetched", [
    _field("url", pa.string(), "URL from the fetch list", False),
    _field("host", pa.string(), "Host of url", False),
    _field("outcome", pa.string(), "FetchOutcome of the attempt", False),
    _field("fetched_at", TS, "Start of the request (null if never requested)"),
    _field("http_status", pa.int16(), "HTTP status; null if no response"),
    _field("content_type", pa.string(), "Content-Type header"),
    _field("body_bytes", pa.int64(), "Bytes of body downloaded"),
    _field("etag", pa.string(), "ETag response header"),
    _field("last_modified", pa.string(), "Last-Modified response header"),
    _field("redirect_to", pa.string(), "Absolute Location of a 3xx"),
    _field("error", pa.string(), "Why the attempt failed or was deferred"),
    _field("title", pa.string(), "<title> text"),
    _field("text", pa.string(), "Visible text of the page"),
    _field("content_hash", pa.string(), "Hex digest of the normalised text"),
    _field("minhash", pa.uint64(), "64-bit near-duplicate fingerprint (1-bit MinHash, cycles.fingerprint.minhash64) of the main content (cycles.fetch.parse._main_blocks)"),
    _field("canonical", pa.string(), "Absolute <link rel=canonical> target"),
    _field("noindex", pa.bool_(), "Meta robots noindex"),
    _field("warc_file", pa.string(), "WARC file (relative to the segment) holding the response"),
    _field("warc_offset", pa.int64(), "Byte offset of the response record in warc_file"),
    _field("warc_length", pa.int64(), "Compressed length of the response record"),
    _field("duration_ms", pa.int32(), "Transfer time"),
])

OUTLINKS = _schema("outlinks", [
    _field("from_url", pa.string(), "Page the link was found on", False),
    _field("url", pa.string(), "Absolute link target as found (normalised by update)", False),
    _field("anchor", pa.string(), "Anchor text, truncated"),
    _field("nofollow", pa.bool_(), "rel=nofollow or meta robots nofollow", False),
    _field("depth", pa.int16(), "Depth of the target (source depth + 1)", False),
])

SITEMAP_URLS = _schema("sitemap_urls", [
    _field("sitemap_url", pa.string(), "Sitemap file that listed the URL (cycles/tables/sitemaps.py)", False),
    _field("url", pa.string(), "<loc> as listed, on the sitemap's own scheme, host and port (normalised by "
           "update and merged like an outlink)", False),
    _field("lastmod", TS, "<lastmod>, UTC; null if absent or unreadable. Newer than the URL's last fetch: "
           "the URL is due now"),
    _field("changefreq", pa.string(), "<changefreq> (always, hourly, daily, weekly, monthly, yearly, never); "
           "a new URL's first refetch interval"),
    _field("priority", pa.float32(), "<priority> in [0, 1]; a new URL's score is multiplied by 0.5 + priority"),
])

HOSTS = _schema("hosts", [
    _field("host", pa.string(), "Host name", False),
    _field("last_request_end", TS, "Wall-clock end of the last response from the host; the next "
           "request waits the host's delay after it, across cycles"),
    _field("not_before", TS, "Wall clock: no request to the host before this (Retry-After, back-off after "
           "5xx or timeouts, the delay after the last response: Crawl-delay, slow host); kept across "
           "cycles and processes like last_request_end. Null: no such time known"),
    _field("robots_status", pa.int16(), "HTTP status of robots.txt (null: network error)"),
    _field("robots_fetched_at", TS, "When robots.txt was fetched or last revalidated (a 304 to a "
           "conditional GET); crawl clock (cycles.clock), like every robots time here"),
    _field("robots_body", pa.binary(), "robots.txt body (first fetch.max_robots_bytes, inflated); null "
           "with a 2xx status: the body could not be read (did not inflate), which disallows all"),
    _field("robots_etag", pa.string(), "ETag of the 2xx robots.txt in robots_body, sent back as "
           "If-None-Match once the copy is older than fetch.robots_cache_s"),
    _field("robots_last_modified", pa.string(), "Last-Modified of that robots.txt, sent back as "
           "If-Modified-Since"),
    _field("crawl_delay_s", pa.float32(), "Delay used for the host (max of floor and Crawl-delay)"),
    _field("robots_good_status", pa.int16(), "HTTP status of the last robots.txt answer that was not an "
           "error (2xx or 4xx); obeyed once robots.txt has been unreachable for "
           "fetch.robots_unreachable_fallback_s (RFC 9309 §2.3.1.4)"),
    _field("robots_good_fetched_at", TS, "When that last good robots.txt was fetched"),
    _field("robots_good_body", pa.binary(), "Body of that last good robots.txt (2xx only)"),
    _field("robots_errors_since", TS, "Start of the current unbroken run of robots.txt errors (5xx, 429, "
           "network error, redirect loop); null when the last answer was not an error"),
    _field("dns_checked_at", TS, "Wall clock: when the host name was last looked up in DNS by the fetcher "
           "(cycles/fetch/dns.py); null: never (an IP literal, a fetch.resolve name, or a host written before)"),
    _field("dns_expires_at", TS, "Wall clock: the lookup's answer is used until then, by every partition and "
           "segment: its TTL (within fetch.dns_min_ttl_s and fetch.dns_cache_s) or, after a failure, the "
           "back-off before the name is looked up again"),
    _field("dns_addresses", pa.string(), "Addresses of the last good answer, comma-separated (A, then AAAA)"),
    _field("dns_error", pa.string(), "Why the last lookup failed: nxdomain, servfail, timeout or no_address; "
           "null when it answered addresses"),
    _field("dns_failures", pa.int16(), "Lookups failed in a row (the back-off doubles with each); 0 after an answer"),
    _field("tls_failures", pa.int16(), "Consecutive failed TLS handshakes of the host, across cycles (0 once "
           "one succeeds); each doubles its back-off (fetch.tls_failure_backoff_s, cycles/fetch/tls.py)"),
    _field("tls_error", pa.string(), "Why the host's last TLS handshake failed, for operators: '<reason>: "
           "<libcurl message>', reason one of expired, name_mismatch, untrusted_issuer, protocol_too_old, "
           "handshake_timeout, other; null once a verified handshake succeeded"),
    _field("tls_checked_at", TS, "Wall clock: when tls_failures and tls_error were set (null: no TLS "
           "failure known)"),
])

PAGES = _schema("pages", [
    _field("url", pa.string(), "Page URL (normalised)", False),
    _field("host", pa.string(), "Host of url", False),
    _field("fetched_at", TS, "When the page was fetched", False),
    _field("status", pa.string(), "'new' (first time in the feed) or 'changed' (text changed since last fetch)", False),
    _field("http_status", pa.int16(), "HTTP status (2xx)"),
    _field("content_hash", pa.string(), "Hex digest of the normalised text", False),
    _field("minhash", pa.uint64(), "64-bit near-duplicate fingerprint of the main content (cycles.fingerprint.minhash64)"),
    _field("title", pa.string(), "<title> text"),
    _field("text", pa.string(), "Visible text"),
    _field("warc_file", pa.string(), "WARC file holding the raw response, relative to the store root"),
    _field("warc_offset", pa.int64(), "Offset of the response record in warc_file"),
    _field("warc_length", pa.int64(), "Compressed length of the record (one ranged read returns it)"),
    _field("segment", pa.string(), "Segment that fetched the page", False),
])


# --- Link DB (cycles/update/linkgraph.py) ---------------------------------------------------
# A table of its own beside the crawl DB and the host DB (``linkdb/<version>/``, versioned and
# swapped like them), not crawl DB columns: update rewrites it from the old version plus the
# segment's links, and generate joins it to the crawl DB rows it ranks. Links are counted once
# per (target URL, linking host): a site linking a page from every one of its pages counts once.
LINK_INLINKS = _schema("link-inlinks", [
    _field("url", pa.string(), "Link target (normalised), a URL of the crawl DB or about to be", False),
    _field("host_hash", pa.uint64(), "host_hash of url's host; bucket = host_hash % the link DB's buckets", False),
    _field("from_host", pa.string(), "A host with a followed link to url (never url's own host); "
           "one row per (url, from_host), accumulated over every updated segment", False),
])

LINK_URLS = _schema("link-urls", [
    _field("url", pa.string(), "Link target (normalised)", False),
    _field("host_hash", pa.uint64(), "host_hash of url's host; bucket = host_hash % the link DB's buckets", False),
    _field("inlink_hosts", pa.int32(), "Distinct other hosts linking to url (rows of LINK_INLINKS)", False),
])

LINK_HOST_EDGES = _schema("link-host-edges", [
    _field("from_host", pa.string(), "Host with at least one followed link to to_host", False),
    _field("to_host", pa.string(), "Linked host; never from_host (self-links are not edges)", False),
])

LINK_HOSTS = _schema("link-hosts", [
    _field("host", pa.string(), "A host of the link graph: it links, or is linked to", False),
    _field("rank", pa.float64(), "PageRank of the host graph (update.link_damping): sums to 1 over the hosts", False),
    _field("importance", pa.float64(), "rank × number of hosts: 1 is an average host; what generate "
           "ranks and budgets by (generate.ranking = 'links')", False),
    _field("inlink_hosts", pa.int32(), "Distinct other hosts linking to this host", False),
])

# --- Views for analysts (cycles/commands/views.py) --------------------------------------------------
# What `crawl sql`, `crawl sql --views`, `crawl schema` and `cycles.open()` show: one view
# per table over the current crawl, each column documented here (the docs become DuckDB's
# COMMENT ON VIEW / COMMENT ON COLUMN). A view adds or redefines a few columns of its table.

SEGMENT_DOC = "Segment (cycle) id whose files hold the row: the folder segments/<id>/"
WARC_FILE_FROM_ROOT_DOC = ("WARC file holding the raw response, relative to the store root "
                           "(segments/<id>/warc/...; the segment's own files store it relative to the segment)")


def _view(table: pa.Schema, doc: str, add: tuple[pa.Field, ...] = (), docs: dict[str, str] | None = None) -> pa.Schema:
    """``table``'s columns (docs replaced by ``docs``), then ``add``; the view's doc in the metadata."""
    fields = [f.with_metadata({"doc": (docs or {}).get(f.name, f.metadata[b"doc"].decode())}) for f in table]
    fields += [f for f in add if f.name not in table.names]
    return pa.schema(fields, metadata={"crawl.view": doc})


_SEGMENT = _field("segment", pa.string(), SEGMENT_DOC, False)

VIEWS: dict[str, pa.Schema] = {
    "crawldb": _view(CRAWLDB, "The current crawl DB version: one row per known URL"),
    "hosts": _view(HOSTS, "The current host DB: one row per host (politeness and robots.txt state)"),
    "fetchlist": _view(FETCHLIST, "What generate chose, every segment: one row per URL handed to fetch", (_SEGMENT,)),
    "fetched": _view(FETCHED, "Fetch results, every segment: one row per fetch attempt", (_SEGMENT,),
                     {"warc_file": WARC_FILE_FROM_ROOT_DOC}),
    "outlinks": _view(OUTLINKS, "Links found by fetch, every segment: one row per link on a page", (_SEGMENT,)),
    "pages": _view(PAGES, "The indexer feed, every batch: the new or changed pages each update published"),
    "segments": pa.schema([
        _field("segment", pa.string(), "Segment (cycle) id; ids sort by the time generate made them", False),
        _field("state", pa.string(), "Its state when the views were made (cycles/tables/segment.py): incomplete, "
               "generated, fetching, fetched, updated (merged into the crawl DB) or abandoned", False),
    ], metadata={"crawl.view": "Every segment and its state: join on segment to keep, say, only updated ones"}),
}
"""The analysts' views by name, in the order they are listed."""


def doc_of(field: pa.Field) -> str:
    """A column's doc (every field here has one)."""
    return (field.metadata or {}).get(b"doc", b"").decode()


# --- URL index (crawl export; cycles/archive/ccindex.py) -----------------------------------
# Common Crawl's columnar URL index ("cc-index-table", schema cc-index-schema-flat.json):
# same column names, meanings and types (Spark string/short/integer/timestamp/binary ->
# Arrow string/int16/int32/timestamp[us, UTC]/binary), so the DuckDB and Athena queries
# people run against Common Crawl's index run against ours. One row per response or revisit
# record of the segment's WARC files.
CC_INDEX = _schema("cc-index", [
    _field("url_surtkey", pa.string(), "SURT URL key (the `surt` library, as pywb and cdxj-indexer)", False),
    _field("url", pa.string(), "URL (WARC-Target-URI)", False),
    _field("url_host_name", pa.string(), "Host name, including IP addresses", False),
    _field("url_host_tld", pa.string(), "Last part of the host name"),
    _field("url_host_2nd_last_part", pa.string(), "Second last part of the host name"),
    _field("url_host_3rd_last_part", pa.string(), "Third last part of the host name"),
    _field("url_host_4th_last_part", pa.string(), "4th last part of the host name"),
    _field("url_host_5th_last_part", pa.string(), "5th last part of the host name"),
    _field("url_host_registry_suffix", pa.string(), "Registry suffix (ICANN section of the Public Suffix List)"),
    _field("url_host_registered_domain", pa.string(), "Domain one level below the registry suffix"),
    _field("url_host_private_suffix", pa.string(), "Suffix including private registries (whole Public Suffix List)"),
    _field("url_host_private_domain", pa.string(), "Domain one level below the private suffix"),
    _field("url_host_name_reversed", pa.string(), "Host name in reverse domain notation (null for IP addresses)"),
    _field("url_protocol", pa.string(), "Scheme of the URL", False),
    _field("url_port", pa.int32(), "Port, null unless the URL names one"),
    _field("url_path", pa.string(), "Path of the URL", False),
    _field("url_query", pa.string(), "Query of the URL"),
    _field("fetch_time", TS, "Capture time (WARC-Date)", False),
    _field("fetch_status", pa.int16(), "HTTP status code", False),
    _field("fetch_redirect", pa.string(), "Absolute target of a redirect (Location)"),
    _field("content_digest", pa.string(), "SHA-1 payload digest, base32 (WARC-Payload-Digest without 'sha1:')"),
    _field("content_mime_type", pa.string(), "Content-Type of the HTTP response, without parameters"),
    _field("content_mime_detected", pa.string(), "Type detected from the content: text/html when our HTML "
           "sniffing accepted and parsed the body, else null (we do not sniff other types)"),
    _field("content_charset", pa.string(), "Charset declared in the Content-Type header"),
    _field("content_languages", pa.string(), "ISO-639-3 code of the page text's language (py3langid)"),
    _field("content_truncated", pa.string(), "WARC-Truncated of the record: length, time, disconnect, unspecified"),
    _field("warc_record_id", pa.binary(), "UUID of the record (WARC-Record-ID), 16 bytes", False),
    _field("warc_filename", pa.string(), "WARC file, relative to the store root", False),
    _field("warc_record_offset", pa.int32(), "Offset of the record's gzip member", False),
    _field("warc_record_length", pa.int32(), "Compressed length of the record", False),
    _field("warc_segment", pa.string(), "Segment the WARC file belongs to", False),
    _field("crawl", pa.string(), "Crawl the capture belongs to (the store's name, or `crawl export --crawl`)", False),
    _field("subset", pa.string(), "warc (2xx and their revisits), robotstxt, crawldiagnostics (3xx, 4xx, "
           "5xx, 304)", False),
])
