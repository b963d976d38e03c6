"""The test web's DNS server: its host names, answered with the physics of real DNS.

Every host of the test web is a name (``h3.web.test``); on the real web a crawler learns its
address from DNS, where lookups take 10-200 ms, some names answer NXDOMAIN or SERVFAIL and
some never answer. This server answers the test web's names that way, on UDP and TCP port 53
of a loopback address of its own (``127.53.x.y``, :data:`LISTEN_PREFIX`), so that a crawler
run in a mount namespace whose ``/etc/resolv.conf`` names it (:mod:`testweb.namespace`)
resolves with its normal resolver and no test-only code path. Parallel test workers each
get their own address, so they never clash on port 53.

The zone (:func:`zone_for`) is plain JSON, a pure function of the web's resolve map and a
few parameters; the server process reads it from a file. Each name has:

- ``a`` / ``aaaa``: its addresses (IDN names are stored in their punycode A-label form,
  ``xn--bcher-kva.web.test``, which is what resolvers put on the wire);
- ``ttl``: seconds, in the answer's records (and the SOA minimum of a negative answer);
- ``latency_ms``: how long the server waits before answering (per name, fixed);
- ``fail``: ``"nxdomain"``, ``"servfail"`` or ``"timeout"`` (no answer at all), or absent.

A name not in the zone answers NXDOMAIN. A name with addresses of one family only answers
the other family's query NOERROR with no records (NODATA), with the SOA, as real servers do.

Query log
---------
One JSON object per line and query, written (and flushed) when the query arrives:
``t`` (``time.time()``), ``name`` (lower case, no trailing dot), ``type`` (``A``,
``AAAA``...), ``rcode`` (``NOERROR``, ``NXDOMAIN``, ``SERVFAIL``, or ``TIMEOUT`` for a query
never answered), ``proto`` (``udp``/``tcp``) and ``client`` (address:port).

dnslib (PyPI) packs and parses the messages: a maintained, pure-Python DNS message library
that lets us answer anything we like, unlike a real server's configuration language.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import socket
import struct
import time
from pathlib import Path

from cycles.storage.durable import write_file_atomically
from testweb.model import DOMAIN, mix, str_key

LISTEN_PREFIX = "127.53."
"""The DNS server listens on ``127.53.x.y`` port 53, ``x.y`` chosen from its pid (module doc)."""

DNS_PORT = 53
"""Resolvers configured by ``resolv.conf`` ask port 53 only (glibc has no port option)."""

DEFAULT_TTL_S = 300
"""TTL of a name's records unless the zone says otherwise."""

FAIL_KINDS = ("nxdomain", "servfail", "timeout")
"""The failures a zone name can be given (``fail``)."""

FAILING_NAMES = {f"dns-{kind}.{DOMAIN}": kind for kind in FAIL_KINDS}
"""Names that fail the same way on every query: ``dns-nxdomain.web.test`` answers NXDOMAIN
(a name that does not exist), ``dns-servfail.web.test`` SERVFAIL (a broken zone),
``dns-timeout.web.test`` never answers (a dead name server)."""

IDN_ALIASES = ("bücher", "日本語", "münchen-café")
"""Internationalised names (``bücher.web.test`` is ``xn--bcher-kva.web.test`` on the wire)
that resolve to regular hosts ``h0``, ``h1``, ``h2``: second names of those hosts, as a
``www.`` name is on the real web. The HTTP server picks a host by address, so a request by
the IDN name is answered by the regular host (the request log keeps the Host header)."""

SSRF_NAMES = {f"static-cdn.{DOMAIN}": ("127.0.0.1", "::1")}
"""A public-looking name whose answers are loopback addresses (A and AAAA): the SSRF guard
(cycles/fetch/addresses.py) must refuse to connect unless fetch.allowed_networks holds them."""


def idn_name(label: str) -> str:
    """``bücher`` -> ``xn--bcher-kva.web.test`` (IDNA 2008, as the crawler encodes hosts)."""
    import idna

    return idna.encode(f"{label}.{DOMAIN}", uts46=True).decode("ascii")


def name_latency_ms(name: str, seed: int, low_ms: float, high_ms: float) -> float:
    """A name's fixed answer delay, spread over ``[low_ms, high_ms]`` by a hash of the name."""
    if high_ms <= low_ms:
        return float(low_ms)
    return low_ms + (high_ms - low_ms) * (mix(seed, str_key(name)) % 10_000) / 9_999


def zone_for(resolve: dict[str, str], *, seed: int = 0, latency_ms: tuple[float, float] = (0.0, 0.0),
             ttl_s: int = DEFAULT_TTL_S, failing: bool = True, aliases: bool = True,
             overrides: dict[str, dict] | None = None) -> dict:
    """The zone of a test web: every name of ``resolve`` (``Web.resolve_map()``) with its address,
    a latency from ``latency_ms`` (per name, :func:`name_latency_ms`) and ``ttl_s``; plus the
    :data:`FAILING_NAMES`, :data:`IDN_ALIASES` (of ``h0``..``h2`` when present) and
    :data:`SSRF_NAMES`. ``overrides`` (name -> fields) changes single names last."""
    names: dict[str, dict] = {}

    def add(name: str, addresses: tuple[str, ...] | list[str], **extra) -> None:
        entry = {"a": [a for a in addresses if ":" not in a], "aaaa": [a for a in addresses if ":" in a],
                 "ttl": ttl_s, "latency_ms": round(name_latency_ms(name, seed, *latency_ms), 1)}
        entry.update(extra)
        names[name.lower()] = entry

    for name, ip in resolve.items():
        add(name, [ip])
    if failing:
        for name, kind in FAILING_NAMES.items():
            add(name, [], fail=kind)
    if aliases:
        for j, label in enumerate(IDN_ALIASES):
            target = resolve.get(f"h{j}.{DOMAIN}")
            if target is not None:
                add(idn_name(label), [target])
        for name, addresses in SSRF_NAMES.items():
            add(name, addresses)
    for name, fields in (overrides or {}).items():
        names.setdefault(name.lower(), {"a": [], "aaaa": [], "ttl": ttl_s, "latency_ms": 0.0}).update(fields)
    return {"names": names, "soa": f"ns.{DOMAIN}"}


# --- the server ----------------------------------------------------------------------------


class QueryLog:
    """Appends one JSON line per query, flushed at once (tests read it while we run)."""

    def __init__(self, path: str | Path):
        self._file = open(path, "a", encoding="utf-8", buffering=1)

    def write(self, record: dict) -> None:
        if not self._file.closed:
            self._file.write(json.dumps(record, ensure_ascii=False) + "\n")

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


class Answerer:
    """Turns a query's bytes into (delay in seconds, reply bytes or None for no answer)."""

    def __init__(self, zone: dict, log: QueryLog):
        self.names: dict[str, dict] = zone["names"]
        self.soa_name = zone.get("soa", f"ns.{DOMAIN}")
        self.log = log

    def answer(self, data: bytes, proto: str, client: str) -> tuple[float, bytes | None]:
        from dnslib import QTYPE, RCODE, DNSRecord, DNSError

        try:
            request = DNSRecord.parse(data)
        except (DNSError, struct.error, IndexError, ValueError):
            return 0.0, None  # not a DNS message: drop it, as a server does
        reply = request.reply()
        if not request.questions:
            reply.header.rcode = RCODE.FORMERR
            return 0.0, reply.pack()
        question = request.q
        name = str(question.qname).rstrip(".").lower()
        qtype = QTYPE.get(question.qtype, str(question.qtype))
        entry = self.names.get(name)
        delay = (entry or {}).get("latency_ms", 0.0) / 1000
        fail = (entry or {}).get("fail") if entry is not None else "nxdomain"
        rcode = {"nxdomain": "NXDOMAIN", "servfail": "SERVFAIL", "timeout": "TIMEOUT"}.get(fail, "NOERROR")
        self.log.write({"t": time.time(), "name": name, "type": qtype, "rcode": rcode, "proto": proto,
                        "client": client})
        if fail == "timeout":
            return delay, None
        if fail == "servfail":
            reply.header.rcode = RCODE.SERVFAIL
            return delay, reply.pack()
        reply.header.aa = 1
        if fail == "nxdomain":
            reply.header.rcode = RCODE.NXDOMAIN
            reply.add_auth(self._soa(question.qname, entry))
            return delay, reply.pack()
        self._add_records(reply, question, qtype, entry)
        return delay, reply.pack()

    def _add_records(self, reply, question, qtype: str, entry: dict) -> None:
        from dnslib import AAAA, QTYPE, RR, A

        ttl = int(entry.get("ttl", DEFAULT_TTL_S))
        records = []
        if qtype in ("A", "ANY"):
            records += [RR(question.qname, QTYPE.A, rdata=A(ip), ttl=ttl) for ip in entry.get("a", [])]
        if qtype in ("AAAA", "ANY"):
            records += [RR(question.qname, QTYPE.AAAA, rdata=AAAA(ip), ttl=ttl) for ip in entry.get("aaaa", [])]
        for record in records:
            reply.add_answer(record)
        if not records:
            reply.add_auth(self._soa(question.qname, entry))  # NODATA (RFC 2308 §2.2)

    def _soa(self, qname, entry: dict | None):
        from dnslib import QTYPE, RR, SOA

        ttl = int((entry or {}).get("ttl", DEFAULT_TTL_S))
        zone = DOMAIN if str(qname).rstrip(".").lower().endswith(DOMAIN) else str(qname)
        # RFC 2308 §5: the negative TTL is the SOA record's minimum (and its own TTL).
        return RR(zone, QTYPE.SOA, ttl=ttl,
                  rdata=SOA(self.soa_name, f"hostmaster.{DOMAIN}", (1, 3600, 600, 86400, ttl)))


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, answerer: Answerer):
        self.answerer = answerer
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        delay, reply = self.answerer.answer(data, "udp", f"{addr[0]}:{addr[1]}")
        if reply is None:
            return
        if len(reply) > 512:
            reply = reply[:2] + bytes([reply[2] | 0x02]) + reply[3:12]  # TC: ask again over TCP
        loop = asyncio.get_running_loop()
        if delay > 0:
            loop.call_later(delay, self._send, reply, addr)
        else:
            self._send(reply, addr)

    def _send(self, reply: bytes, addr) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.sendto(reply, addr)


async def _tcp_client(answerer: Answerer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """DNS over TCP: each message has a two-byte length prefix (RFC 1035 §4.2.2)."""
    peer = writer.get_extra_info("peername")
    client = f"{peer[0]}:{peer[1]}" if peer else "?"
    try:
        while True:
            head = await reader.readexactly(2)
            data = await reader.readexactly(struct.unpack("!H", head)[0])
            delay, reply = answerer.answer(data, "tcp", client)
            if delay > 0:
                await asyncio.sleep(delay)
            if reply is None:
                continue  # a timeout name: the client gives up by itself
            writer.write(struct.pack("!H", len(reply)) + reply)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


def candidate_addresses(pid: int) -> list[str]:
    """Addresses to try, starting from one chosen by the pid (x.y of ``127.53.x.y``)."""
    start = pid % (254 * 254)
    return [f"{LISTEN_PREFIX}{(i // 254) % 254 + 1}.{i % 254 + 1}"
            for i in (start + k for k in range(254 * 254))]


def bind_dns(address: str | None = None, port: int = DNS_PORT) -> tuple[str, socket.socket, socket.socket]:
    """UDP and TCP sockets on ``port`` of ``address``, or of the first free ``127.53.x.y``."""
    for candidate in [address] if address else candidate_addresses(os.getpid())[:512]:
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            # A burst of queries while this process waits for a CPU must not overflow the
            # default ~200 KB receive buffer: a real name server is not starved by its clients.
            udp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            udp.bind((candidate, port))
            tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            tcp.bind((candidate, port))
            tcp.listen(128)
        except OSError as exc:
            udp.close()
            tcp.close()
            if address or exc.errno != errno.EADDRINUSE:
                raise OSError(exc.errno, f"cannot listen on {candidate}:{port} ({exc.strerror}); "
                              "port 53 needs root (or CAP_NET_BIND_SERVICE)") from exc
            continue
        udp.setblocking(False)
        tcp.setblocking(False)
        return candidate, udp, tcp
    raise OSError(errno.EADDRINUSE, f"no free address in {LISTEN_PREFIX}0.0/16 port {port}")


def serve_dns(zone_path: str | Path, log_path: str | Path, ready_file: str | Path | None = None,
              address: str | None = None, port: int = DNS_PORT, max_seconds: float = 600.0) -> str:
    """Answer the zone until SIGTERM/SIGINT or ``max_seconds``; returns why it stopped. The
    ready file (JSON ``address``, ``port``, ``pid``) is written once both sockets listen."""
    zone = json.loads(Path(zone_path).read_text())
    chosen, udp, tcp = bind_dns(address, port)
    log = QueryLog(log_path)
    answerer = Answerer(zone, log)
    reason = ["stopped"]

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()

        def stop(why: str) -> None:
            reason[0] = why
            stopped.set()

        transport, _ = await loop.create_datagram_endpoint(lambda: _Udp(answerer), sock=udp)
        server = await asyncio.start_server(lambda r, w: _tcp_client(answerer, r, w), sock=tcp)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop, f"signal {sig.name}")
        loop.call_later(max_seconds, stop, f"max-seconds {max_seconds:g} reached")
        if ready_file is not None:
            write_file_atomically(Path(ready_file), json.dumps({"address": chosen, "port": port, "pid": os.getpid(),
                                                                "names": len(zone["names"])}))
        await stopped.wait()
        transport.close()
        server.close()

    try:
        asyncio.run(main())
    finally:
        log.close()
    return reason[0]


# --- running it from a test, benchmark or demo ---------------------------------------------


class TestDNS:
    """The DNS server in a subprocess (``python -m testweb dns``), stopped on exit.

    Example::

        with TestWeb(hosts=5) as web, TestDNS(zone_for(web.resolve_map())) as dns:
            with crawl_namespace(dns.address) as prefix:   # testweb/namespace.py
                subprocess.run(prefix + ["curl", web.url("h1")])
            assert dns.queries("h1.web.test")

    ``max_seconds`` bounds the server even if this process dies.
    """

    __test__ = False

    def __init__(self, zone: dict, workdir: str | Path | None = None, max_seconds: float = 600.0,
                 address: str | None = None, ready_timeout_s: float = 20.0):
        self.zone = zone
        self.max_seconds = max_seconds
        self.requested_address = address
        self.ready_timeout_s = ready_timeout_s
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else None
        self.process = None
        self.address = ""
        self._final: list[dict] | None = None

    def start(self) -> "TestDNS":
        import sys
        import tempfile

        from testweb.harness import TestWebError, launch

        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="testdns-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.zone_path = self.workdir / "zone.json"
        self.log_path = self.workdir / "dns-queries.jsonl"
        self.ready_path = self.workdir / "dns-ready.json"
        self.stderr_path = self.workdir / "dns.stderr"
        self.ready_path.unlink(missing_ok=True)
        self.zone_path.write_text(json.dumps(self.zone))
        cmd = [sys.executable, "-m", "testweb", "dns", "--zone", str(self.zone_path), "--log", str(self.log_path),
               "--ready-file", str(self.ready_path), "--max-seconds", str(self.max_seconds)]
        if self.requested_address:
            cmd += ["--address", self.requested_address]
        try:
            self.process = launch(cmd, self.stderr_path, self.ready_path, self.ready_timeout_s, "test DNS server")
        except TestWebError:
            self.stop()  # reads what the log holds, removes a temporary workdir
            raise
        self.address = json.loads(self.ready_path.read_text())["address"]
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        import shutil

        from testweb.harness import stop_process

        if self.process is not None:
            stop_process(self.process, timeout_s)
        if self._final is None and self.workdir is not None:
            self._final = self._read_log()
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "TestDNS":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _read_log(self) -> list[dict]:
        from testweb.harness import read_log

        return read_log(getattr(self, "log_path", None))

    def queries(self, name: str | None = None, qtype: str | None = None) -> list[dict]:
        """The query log so far (module doc), of one name (any spelling case) and type if given."""
        records = list(self._final) if self._final is not None else self._read_log()
        if name is not None:
            name = name.rstrip(".").lower()
            records = [r for r in records if r["name"] == name]
        if qtype is not None:
            records = [r for r in records if r["type"] == qtype]
        return records
