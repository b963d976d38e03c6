"""Host name lookups of the fetch loop: once per name per TTL, failures backed off, never blocking.

libcurl resolves by itself (a threaded getaddrinfo per transfer, a DNS cache per handle),
but it forgets every answer with the process and knows no TTL, and a name that fails is
asked again on every URL of its host. So the fetcher resolves names itself:

- **Once per TTL, across the run.** A lookup's answer is kept with its expiry (the records'
  TTL, within ``fetch.dns_min_ttl_s`` .. ``fetch.dns_cache_s``) in the slot's host row
  (schema.HOSTS ``dns_*``). The host DB carries it to every later partition, segment and
  ``crawl run`` process; until it expires, the name is not looked up again. The addresses are
  handed to libcurl with ``CURLOPT_RESOLVE`` for the transfer, so libcurl never asks itself.
- **Failures backed off.** NXDOMAIN, SERVFAIL, a timeout or an answer with no address sets
  the host aside for the cycle (its URLs are deferred with the error ``dns <kind>: ...``)
  and the name is not asked again for ``fetch.dns_retry_s``, doubled with each failure in a
  row (``dns_failures``), up to ``fetch.dns_retry_max_s``: one lookup per back-off period.
- **Never in the loop.** Lookups run in a bounded pool of ``fetch.dns_threads`` threads; a
  host waits for its own lookup only, the transfers of the others go on.

The resolver is dnspython's, configured from ``/etc/resolv.conf`` — the system resolver's
own configuration (name servers, ``options timeout:``), so a deployment's split-horizon DNS
and the test web's namespace (testweb/namespace.py) apply unchanged — asked for A and AAAA
records, which give the TTLs getaddrinfo hides. ``/etc/hosts`` names, IP literals and
``fetch.resolve`` entries are not looked up here (libcurl handles them as before).

Counted in the partition's stats: ``dns/lookups``, ``dns/failures/<kind>``, ``dns/seconds``
(time the name servers took, the slower of a lookup's two queries, summed over lookups),
``dns/wait_seconds`` (time lookups waited for a free resolver thread), ``dns/cached`` (a host whose answer or
back-off came from the host DB or an earlier slot, so no lookup was made).
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import ipaddress
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from cycles.config import FetchConfig
from cycles.tables.schema import DNS_FAILURE_KINDS as KINDS  # noqa: F401  (why a lookup failed; a table's column)

_DESCRIBE = {
    "nxdomain": "the name does not exist (NXDOMAIN)",
    "servfail": "the name servers failed to answer (SERVFAIL)",
    "timeout": "no answer from the name servers",
    "no_address": "the name has no A or AAAA record",
}

HOSTS_FILE = Path("/etc/hosts")


@dataclass
class Answer:
    """What the fetcher knows of one name: addresses until ``expires``, or a failure."""

    addresses: tuple[str, ...] = ()
    error: str | None = None
    """One of :data:`KINDS`, or None for an answer with addresses."""
    checked: float = 0.0
    """Wall clock of the lookup."""
    expires: float = 0.0
    """Wall clock until which it stands (TTL, or the back-off of a failure)."""
    failures: int = 0
    """Failed lookups in a row."""
    detail: str = ""
    seconds: float = 0.0
    """How long the name server took to answer (0 for an answer read from the host DB)."""
    waited: float = 0.0
    """How long the lookup waited for a free resolver thread."""

    def fresh(self, now_wall: float) -> bool:
        return now_wall < self.expires

    def reason(self) -> str:
        """The one-line error of the host's deferred rows, for an operator."""
        until = dt.datetime.fromtimestamp(self.expires, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return (f"dns {self.error}: {_DESCRIBE.get(self.error, self.error)}{': ' + self.detail if self.detail else ''}; "
                f"{self.failures} failed lookup{'s' if self.failures != 1 else ''} in a row, next lookup after {until}")

    def host_columns(self) -> dict:
        wall = lambda t: dt.datetime.fromtimestamp(t, dt.timezone.utc)  # noqa: E731
        return {"dns_checked_at": wall(self.checked), "dns_expires_at": wall(self.expires),
                "dns_addresses": ",".join(self.addresses) or None, "dns_error": self.error,
                "dns_failures": self.failures}

    @classmethod
    def from_host_row(cls, state: dict | None) -> Answer | None:
        if not state or state.get("dns_checked_at") is None or state.get("dns_expires_at") is None:
            return None
        addresses = tuple(a for a in (state.get("dns_addresses") or "").split(",") if a)
        return cls(addresses, state.get("dns_error"), state["dns_checked_at"].timestamp(),
                   state["dns_expires_at"].timestamp(), int(state.get("dns_failures") or 0))


def needs_lookup(host: str, resolve: dict[str, str], hosts_file_names: frozenset[str]) -> bool:
    """False for an IP literal, a ``fetch.resolve`` name or an /etc/hosts name (libcurl's)."""
    if host in resolve or host.lower() in hosts_file_names:
        return False
    try:
        ipaddress.ip_address(host.strip("[]"))
        return False
    except ValueError:
        return True


def hosts_file_names(path: Path = HOSTS_FILE) -> frozenset[str]:
    """Names /etc/hosts answers (getaddrinfo reads it first: ``localhost``, a deployment's own)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return frozenset()
    return frozenset(name.lower() for line in text.splitlines() for name in line.split("#", 1)[0].split()[1:])


def resolv_attempts(path: Path = Path("/etc/resolv.conf")) -> int:
    """``options attempts:N`` of resolv.conf (glibc's default 2 when absent)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return 2
    for line in text.splitlines():
        if line.split("#", 1)[0].split()[:1] == ["options"]:
            for option in line.split()[1:]:
                if option.startswith("attempts:") and option[9:].isdigit():
                    return max(1, min(5, int(option[9:])))
    return 2


def backoff_s(failures: int, fc: FetchConfig) -> float:
    return min(fc.dns_retry_max_s, fc.dns_retry_s * 2 ** max(0, failures - 1))


def _query(resolver, name: str, rdtype: str, lifetime: float) -> tuple[tuple[str, ...], float | None, str | None, str]:
    """(addresses, ttl, failure kind, detail) of one record type of a name."""
    import dns.exception
    import dns.resolver

    try:
        answer = resolver.resolve(name, rdtype, search=False, raise_on_no_answer=False, lifetime=lifetime)
    except dns.resolver.NXDOMAIN:
        return (), None, "nxdomain", ""
    except dns.resolver.NoNameservers as exc:
        return (), None, "servfail", str(exc).split(";")[0][:200]
    except dns.exception.Timeout:
        return (), None, "timeout", f"none within {lifetime:g}s"
    except (dns.exception.DNSException, OSError) as exc:  # malformed answer, no route...
        return (), None, "servfail", f"{type(exc).__name__}: {exc}"[:200]
    if answer.rrset is None:
        return (), None, None, ""
    return tuple(r.address for r in answer.rrset), float(answer.rrset.ttl), None, ""


def combine(a: tuple, aaaa: tuple) -> tuple[tuple[str, ...], float | None, str | None, str]:
    """One lookup's result from its A and AAAA queries: the addresses of either (A first)
    with the smaller TTL; else NXDOMAIN if either said so (the name does not exist), else
    the A query's failure, the AAAA query's, or ``no_address``."""
    addresses = a[0] + aaaa[0]
    if addresses:
        ttls = [q[1] for q in (a, aaaa) if q[0] and q[1] is not None]
        return addresses, min(ttls) if ttls else None, None, ""
    for query in (a, aaaa):
        if query[2] == "nxdomain":
            return query
    for query in (a, aaaa):
        if query[2] is not None:
            return query
    return (), None, "no_address", ""


class Resolver:
    """The fetch worker's lookups (module doc): a cache of answers, a bounded thread pool."""

    def __init__(self, fc: FetchConfig, stats: Counter):
        self.fc = fc
        self.stats = stats
        self.answers: dict[str, Answer] = {}
        self.pending: dict[str, dict] = {}
        """Names being looked up -> their queries' results so far."""
        self.waiting: dict[str, set[str]] = {}
        """Names being looked up -> the hosts whose next request waits for them (the name
        itself, or a host whose robots.txt redirected to it); kept by the fetch loop."""
        self._done: list[tuple[str, Answer]] = []
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._resolver = None
        self._lifetime = fc.dns_timeout_s
        self._hosts_file = hosts_file_names()
        self._unused: set[str] = set()
        """Names whose lookup just ended: their answer serves the request waiting for it even
        when it expires at once (``fetch.dns_cache_s`` = 0)."""
        self.unavailable: str | None = None
        """Why the resolver could not be set up (no /etc/resolv.conf): libcurl resolves then."""

    # --- what the loop asks -----------------------------------------------------------
    def applies(self, host: str) -> bool:
        return self.unavailable is None and needs_lookup(host, self.fc.resolve, self._hosts_file)

    def known(self, host: str, state: dict | None) -> None:
        """Seed the cache from the host DB's row (an answer or back-off of an earlier run)."""
        answer = Answer.from_host_row(state)
        if answer is not None and host not in self.answers:
            self.answers[host] = answer

    def answer(self, host: str, now_wall: float) -> Answer | None:
        """The name's answer while it stands, else None (then :meth:`submit` it)."""
        answer = self.answers.get(host)
        if answer is not None and (answer.fresh(now_wall) or host in self._unused):
            self._unused.discard(host)
            return answer
        return None

    def submit(self, host: str) -> None:
        """Look ``host`` up in the pool (once: a lookup under way is not asked again). Its A
        and AAAA queries go out together, as getaddrinfo sends them: a lookup takes one
        round trip to the name server, not two."""
        if host in self.pending:
            return
        if self._pool is None and not self._start_pool():
            return
        self.stats["dns/lookups"] += 1
        before = self.answers.get(host)
        started = time.monotonic()
        parts: dict[str, tuple] = {}
        self.pending[host] = parts
        for rdtype in ("A", "AAAA"):
            self._pool.submit(self._run, host, rdtype, parts, before, started)

    def completed(self) -> list[tuple[str, Answer]]:
        """Lookups finished since the last call (their answers are now in the cache)."""
        with self._lock:
            done, self._done = self._done, []
        for host, answer in done:
            self.pending.pop(host, None)
            self.answers[host] = answer
            self._unused.add(host)
            self.stats["dns/seconds"] = round(self.stats["dns/seconds"] + answer.seconds, 6)
            self.stats["dns/wait_seconds"] = round(self.stats["dns/wait_seconds"] + answer.waited, 6)
            if answer.error is not None:
                self.stats[f"dns/failures/{answer.error}"] += 1
        return done

    def curl_entries(self, url: str, host: str) -> list[str]:
        """``CURLOPT_RESOLVE`` entry pinning the URL's host and port to its answer, if any."""
        answer = self.answers.get(host)
        if answer is None or not answer.addresses:
            return []
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = ",".join(f"[{a}]" if ":" in a else a for a in answer.addresses)
        return [f"{host}:{port}:{addresses}"]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    # --- the pool -------------------------------------------------------------------------
    def _start_pool(self) -> bool:
        try:
            import dns.resolver

            resolver = dns.resolver.Resolver()  # reads /etc/resolv.conf
        except Exception as exc:  # no /etc/resolv.conf, no name server in it
            self.unavailable = f"{type(exc).__name__}: {exc}"
            self.stats["dns/no_resolver"] = 1
            return False
        resolver.cache = None  # the cache is ours, with the host DB behind it
        self._resolver = resolver
        # glibc sends a query ``attempts`` times (resolv.conf, default 2), each waiting
        # ``timeout``; dnspython retries until its lifetime ends. Keep to the attempts,
        # within fetch.dns_timeout_s: a dead name server sees as many queries from us as
        # from any program here, and a lost UDP packet is asked again rather than failing
        # the name (with glibc's 5 s and a 5 s lifetime, 20 of 3,000 good names failed
        # after one lost query: bench_fetch --real-web at load 9-11).
        attempts = resolv_attempts()
        resolver.timeout = min(resolver.timeout, self.fc.dns_timeout_s / attempts)
        self._lifetime = resolver.timeout * attempts
        self._pool = concurrent.futures.ThreadPoolExecutor(self.fc.dns_threads, thread_name_prefix="dns")
        return True

    def _run(self, host: str, rdtype: str, parts: dict, before: Answer | None, started: float) -> None:
        asked = time.monotonic()
        try:
            result = _query(self._resolver, host, rdtype, self._lifetime)
        except Exception as exc:  # a resolver bug costs the host a back-off, never the worker
            result = (), None, "servfail", f"{type(exc).__name__}: {exc}"[:200]
        with self._lock:
            parts[rdtype] = result
            parts[rdtype + "_s"] = time.monotonic() - asked
            if len(parts) < 4:
                return  # the other query's thread finishes the lookup
        addresses, ttl, error, detail = combine(parts["A"], parts["AAAA"])
        now = time.time()  # a TTL, and a back-off, count from the answer (or the give-up)
        if error is None:
            keep = min(max(ttl or 0.0, self.fc.dns_min_ttl_s), self.fc.dns_cache_s)
            answer = Answer(addresses, None, now, now + keep, 0)
        else:
            failures = (before.failures if before is not None and before.error else 0) + 1
            answer = Answer((), error, now, now + backoff_s(failures, self.fc), failures, detail)
        # The name server's time (the slower query), not the wait for a free thread before it.
        answer.seconds = max(parts["A_s"], parts["AAAA_s"])
        answer.waited = max(0.0, time.monotonic() - started - answer.seconds)
        with self._lock:
            self._done.append((host, answer))
