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
- **Never blocking the loop.** A lookup's A and AAAA queries are sent over UDP without
  blocking, and the fetch loop reads the answers when they come (:class:`UdpQueries`), at
  most ``fetch.dns_max_in_flight`` lookups at a time; a host waits for its own lookup only,
  the transfers of the others go on. No thread per query: 128 resolver threads asking with
  dnspython's blocking ``resolve`` took 0.3-0.5 s a lookup from a 10-200 ms name server on a
  loaded machine (the threads and the fetch loop fighting for the GIL) and 3-5 s waiting for
  a thread when 3,000 new names came at once (scripts/bench_fetch.py --real-web). Only an
  answer too long for UDP (the TC bit) is asked again over TCP, in one of
  ``fetch.dns_threads`` threads.

The name servers and their ``timeout``/``attempts`` are dnspython's reading of ``/etc/resolv.conf`` — the system resolver's
own configuration (name servers, ``options timeout:``), so a deployment's split-horizon DNS
and the test web's namespace (testweb/namespace.py) apply unchanged — asked for A and AAAA
records, which give the TTLs getaddrinfo hides. ``/etc/hosts`` names, IP literals and
``fetch.resolve`` entries are not looked up here (libcurl handles them as before).

Counted in the partition's stats: ``dns/lookups``, ``dns/failures/<kind>``, ``dns/seconds``
(time the name servers took, the slower of a lookup's two queries, summed over lookups),
``dns/wait_seconds`` (time lookups waited for a place among ``dns_max_in_flight``), ``dns/cached`` (a host whose answer or
back-off came from the host DB or an earlier slot, so no lookup was made).
"""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import functools
import heapq
import ipaddress
import itertools
import random
import socket
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
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
    return not _is_ip_literal(host)


@functools.lru_cache(maxsize=1 << 16)
def _is_ip_literal(host: str) -> bool:
    """Whether the host is an address, not a name. Asked before every request of a host (a
    name costs ip_address's ValueError, ~3 µs), so kept per process."""
    try:
        ipaddress.ip_address(host.strip("[]"))
        return True
    except ValueError:
        return False


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


def reply_result(reply) -> tuple[tuple[str, ...], float | None, str | None, str]:
    """(addresses, ttl, failure kind, detail) of a name server's reply to one query: its
    answer with the CNAME chain followed (the smallest TTL along it), NODATA as no address."""
    import dns.exception
    import dns.rcode

    rcode = reply.rcode()
    if rcode == dns.rcode.NXDOMAIN:
        return (), None, "nxdomain", ""
    if rcode != dns.rcode.NOERROR:
        return (), None, "servfail", f"the name server answered {dns.rcode.to_text(rcode)}"
    try:
        chain = reply.resolve_chaining()
    except dns.exception.DNSException as exc:  # a broken CNAME chain
        return (), None, "servfail", f"{type(exc).__name__}: {exc}"[:200]
    if chain.answer is None:
        return (), None, None, ""
    return tuple(r.address for r in chain.answer), float(chain.minimum_ttl), None, ""


def _tcp_query(message, server: tuple[str, int], timeout_s: float) -> tuple:
    """One query over TCP (an answer that did not fit UDP), blocking: run in a thread."""
    import dns.exception
    import dns.query

    try:
        return reply_result(dns.query.tcp(message, server[0], timeout=timeout_s, port=server[1]))
    except dns.exception.Timeout:
        return (), None, "timeout", f"none over TCP within {timeout_s:g}s"
    except (dns.exception.DNSException, OSError) as exc:
        return (), None, "servfail", f"{type(exc).__name__}: {exc}"[:200]


def _plain_address(address: str) -> str:
    """An IP address in its one textual form, without an IPv6 ``%scope``."""
    try:
        return str(ipaddress.ip_address(address.split("%", 1)[0]))
    except ValueError:
        return address


@dataclass
class _Query:
    """One A or AAAA query of a lookup, over its attempts."""

    host: str
    rdtype: str
    message: object = None
    tries: int = 0
    sent: float = 0.0
    """Monotonic time of the first attempt (the name servers' time counts from it)."""
    servfails: list = field(default_factory=list)


class UdpQueries:
    """A and AAAA queries sent over UDP and read without blocking (module doc).

    As glibc does: the name servers of resolv.conf in turn, ``timeout`` for each try, ``attempts``
    rounds over them; a server answering SERVFAIL or REFUSED passes the query to the next one.
    Each query goes out from one of :data:`SOCKETS` sockets (each its own random port) with a
    random id, and a reply counts only from the server asked, with that id and question
    (``is_response``): a spoofed answer must guess both the port and the id."""

    SOCKETS = 8

    def __init__(self, servers: list[tuple[str, int]], timeout_s: float, attempts: int):
        self.servers = servers
        self._expected = {server: (_plain_address(server[0]), server[1]) for server in servers}
        """Each server as a reply's source shows it (``::1`` for ``0::1``, no ``%scope``)."""
        self.timeout_s = timeout_s
        self.attempts = attempts
        self._socks: dict[int, list[socket.socket]] = {}
        self._inflight: dict[tuple[int, int], tuple[_Query, tuple[str, int]]] = {}
        self._deadlines: list[tuple[float, int, tuple[int, int], int]] = []
        self._seq = itertools.count()
        self._random = random.SystemRandom()
        self.truncated: list[tuple[_Query, tuple[str, int]]] = []
        """Queries whose answer did not fit UDP: the caller asks them over TCP."""

    def send(self, query: _Query, now: float) -> None:
        import dns.message

        server = self.servers[query.tries % len(self.servers)]
        query.tries += 1
        family = socket.AF_INET6 if ":" in server[0] else socket.AF_INET
        sock = self._random.choice(self._sockets(family))
        while True:
            qid = self._random.randrange(65536)
            if (sock.fileno(), qid) not in self._inflight:
                break
        query.message = dns.message.make_query(query.host, query.rdtype)
        query.message.id = qid
        try:
            sock.sendto(query.message.to_wire(), server)
        except OSError:
            pass  # no route, buffer full: the try times out and the next one is sent
        key = (sock.fileno(), qid)
        self._inflight[key] = (query, server)
        heapq.heappush(self._deadlines, (now + self.timeout_s, next(self._seq), key, query.tries))

    def poll(self, now: float) -> list[tuple[_Query, tuple]]:
        """Queries ended since the last call, with their results (:func:`reply_result`)."""
        ended = self._read(now)
        while self._deadlines and self._deadlines[0][0] <= now:
            _, _, key, tries = heapq.heappop(self._deadlines)
            entry = self._inflight.get(key)
            if entry is None or entry[0].tries != tries:
                continue  # answered, or already sent again
            del self._inflight[key]
            ended += self._next_try(entry[0], now, (), None, "timeout",
                                    f"none within {self.timeout_s * self.attempts:g}s")
        return ended

    def _next_try(self, query: _Query, now: float, *result) -> list[tuple[_Query, tuple]]:
        """Send the query to the next server while tries are left; else it ends with ``result``."""
        limit = len(self.servers) if result[2] == "servfail" else self.attempts * len(self.servers)
        if query.tries < limit:
            self.send(query, now)
            return []
        return [(query, result)]

    def _read(self, now: float) -> list[tuple[_Query, tuple]]:
        import dns.exception
        import dns.flags
        import dns.message

        ended = []
        for sock in (s for socks in self._socks.values() for s in socks):
            while True:
                try:
                    data, source = sock.recvfrom(65535)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    break  # an ICMP error queued on the socket: the try times out
                try:
                    reply = dns.message.from_wire(data)
                except dns.exception.DNSException:
                    continue  # not a DNS message: as if lost
                key = (sock.fileno(), reply.id)
                entry = self._inflight.get(key)
                if entry is None or (_plain_address(source[0]), source[1]) != self._expected[entry[1]] \
                        or not entry[0].message.is_response(reply):
                    continue  # late, spoofed or for another question
                del self._inflight[key]
                query, server = entry
                if reply.flags & dns.flags.TC:
                    self.truncated.append((query, server))
                    continue
                result = reply_result(reply)
                ended += self._next_try(query, now, *result) if result[2] == "servfail" else [(query, result)]
        return ended

    def _sockets(self, family: int) -> list[socket.socket]:
        socks = self._socks.get(family)
        if socks is None:
            socks = self._socks[family] = []
            for _ in range(self.SOCKETS):
                sock = socket.socket(family, socket.SOCK_DGRAM)
                sock.setblocking(False)
                # Replies of thousands of names may queue while the loop parses a batch of pages.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
                sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", 0))
                socks.append(sock)
        return socks

    def close(self) -> None:
        for socks in self._socks.values():
            for sock in socks:
                sock.close()
        self._socks.clear()


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
    """The fetch worker's lookups (module doc): a cache of answers, queries that never block."""

    def __init__(self, fc: FetchConfig, stats: Counter):
        self.fc = fc
        self.stats = stats
        self.answers: dict[str, Answer] = {}
        self.pending: dict[str, dict] = {}
        """Names being looked up (or waiting for a place) -> their queries' results so far."""
        self.waiting: dict[str, set[str]] = {}
        """Names being looked up -> the hosts whose next request waits for them (the name
        itself, or a host whose robots.txt redirected to it); kept by the fetch loop."""
        self._queue: deque[tuple[str, float]] = deque()
        """Lookups waiting for a place among ``fetch.dns_max_in_flight``: (name, since)."""
        self._running = 0
        self._udp: UdpQueries | None = None
        self._tcp_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._tcp_done: list[tuple[_Query, tuple]] = []
        self._lock = threading.Lock()
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
        """Look ``host`` up (once: a lookup under way is not asked again). Its A and AAAA
        queries go out together, as getaddrinfo sends them: a lookup takes one round trip to
        the name server, not two."""
        if host in self.pending:
            return
        if self._udp is None and not self._start():
            return
        self.stats["dns/lookups"] += 1
        self.pending[host] = {"before": self.answers.get(host)}
        self._queue.append((host, time.monotonic()))
        self._send_queued(time.monotonic())

    def completed(self) -> list[tuple[str, Answer]]:
        """Lookups finished since the last call (their answers are now in the cache): reads
        the replies that came, times out the queries past their try, sends queued lookups."""
        if self._udp is None or not self.pending:
            return []  # nothing asked: no socket to read (the loop calls this every turn)
        now = time.monotonic()
        ended = self._udp.poll(now)
        for query, server in self._udp.truncated:
            self._ask_over_tcp(query, server)
        self._udp.truncated.clear()
        with self._lock:
            ended += self._tcp_done
            self._tcp_done = []
        done = [d for d in (self._query_ended(q, result, now) for q, result in ended) if d is not None]
        self._send_queued(now)
        for host, answer in done:
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
        if self._udp is not None:
            self._udp.close()
        if self._tcp_pool is not None:
            self._tcp_pool.shutdown(wait=False, cancel_futures=True)

    # --- the queries ----------------------------------------------------------------------
    def _start(self) -> bool:
        try:
            import dns.resolver

            resolver = dns.resolver.Resolver()  # reads /etc/resolv.conf
        except Exception as exc:  # no /etc/resolv.conf, no name server in it
            self.unavailable = f"{type(exc).__name__}: {exc}"
            self.stats["dns/no_resolver"] = 1
            return False
        # glibc sends a query ``attempts`` times (resolv.conf, default 2), each waiting
        # ``timeout``. Keep to the attempts, within fetch.dns_timeout_s: a dead name server
        # sees as many queries from us as from any program here, and a lost UDP packet is
        # asked again rather than failing the name (with glibc's 5 s and one 5 s try, 20 of
        # 3,000 good names failed after one lost query: bench_fetch --real-web at load 9-11).
        attempts = resolv_attempts()
        timeout = min(resolver.timeout, self.fc.dns_timeout_s / attempts)
        self._lifetime = timeout * attempts
        servers = [(str(ns), int(resolver.nameserver_ports.get(str(ns), resolver.port)))
                   for ns in resolver.nameservers]
        self._udp = UdpQueries(servers, timeout, attempts)
        return True

    def _send_queued(self, now: float) -> None:
        while self._queue and self._running < self.fc.dns_max_in_flight:
            host, since = self._queue.popleft()
            parts = self.pending[host]
            parts["waited"] = now - since
            parts["asked"] = now
            self._running += 1
            for rdtype in ("A", "AAAA"):
                self._udp.send(_Query(host, rdtype, sent=now), now)

    def _ask_over_tcp(self, query: _Query, server: tuple[str, int]) -> None:
        if self._tcp_pool is None:
            self._tcp_pool = concurrent.futures.ThreadPoolExecutor(self.fc.dns_threads, thread_name_prefix="dns-tcp")
        self.stats["dns/tcp"] += 1

        def run() -> None:
            result = _tcp_query(query.message, server, self._lifetime)
            with self._lock:
                self._tcp_done.append((query, result))

        self._tcp_pool.submit(run)

    def _query_ended(self, query: _Query, result: tuple, now: float) -> tuple[str, Answer] | None:
        """Record one query's result; the lookup's answer once both of its queries ended."""
        parts = self.pending.get(query.host)
        if parts is None:
            return None
        parts[query.rdtype] = result
        parts[query.rdtype + "_s"] = now - query.sent
        if "A" not in parts or "AAAA" not in parts:
            return None  # the other query finishes the lookup
        del self.pending[query.host]
        self._running -= 1
        return query.host, self._answer(parts)

    def _answer(self, parts: dict) -> Answer:
        addresses, ttl, error, detail = combine(parts["A"], parts["AAAA"])
        now = time.time()  # a TTL, and a back-off, count from the answer (or the give-up)
        if error is None:
            keep = min(max(ttl or 0.0, self.fc.dns_min_ttl_s), self.fc.dns_cache_s)
            answer = Answer(addresses, None, now, now + keep, 0)
        else:
            before = parts["before"]
            failures = (before.failures if before is not None and before.error else 0) + 1
            answer = Answer((), error, now, now + backoff_s(failures, self.fc), failures, detail)
        # The name server's time (the slower query), not the wait for a place before it.
        answer.seconds = max(parts["A_s"], parts["AAAA_s"])
        answer.waited = parts["waited"]
        return answer
