"""The test web's HTTP/1.1 server: one process, one event loop, one listening socket per host.

Every host of the :class:`~testweb.web.Web` listens on its own loopback address at
the shared port, so the host a connection is for is known from the local address it arrived
on, as on the real web where names resolve to addresses. The ``Host`` header is logged beside
it (and never used to pick the host): a crawler that sends the wrong one shows up in the log.

The protocol is a plain :class:`asyncio.Protocol` (keep-alive, pipelining, GET and HEAD):
``http.server`` is an order of magnitude too slow for benchmarks.

Request log
-----------
One JSON object per line, per request, flushed at the end of the event-loop iteration that
produced it (a test may read it while the server runs):

- ``t_start``: ``time.time()`` when the request's bytes arrived;
- ``t_end``: when the last byte of the response was handed to the socket or, for a streamed
  body, when sending finished or the client went away;
- ``host``: host name from the local address; ``ip``: that address; ``client``: the
  client's address (a worker's own one in the cluster test across namespaces, testweb/netns.py);
- ``host_header``: the ``Host`` header as sent (``null`` if none);
- ``method``, ``path`` (the request target as sent, query included), ``status``;
- ``bytes_sent``: body bytes handed to the kernel (for a streamed body cut short by the
  client: what was written minus what was still queued, so roughly what the client got);
- ``user_agent``, ``if_none_match``, ``if_modified_since`` (``null`` when absent);
- ``conn_id``: connection number (same id = the connection was reused);
- ``client_closed``: the client went away before the response was complete;
- ``clock_t``: the virtual time (``web.VirtualClock``) when the request arrived: the changing
  host served ``Web.version_at(url, clock_t)``;
- ``scheme``: ``"https"`` on a host's TLS address, else ``"http"`` (``testweb.tls`` doc:
  HTTPS hosts, their handshake log, round-trip delays); ``http_version``: ``"1.1"``,
  ``"1.0"``, or ``"2"`` (testweb/http2.py).

Control address
---------------
``model.CONTROL_IP`` (``127.0.0.2``) listens on the same port and answers only
``GET /__clock`` (JSON ``{"t": ..., "rate": ...}``), with ``?t=``, ``?advance=``, ``?rate=``
and ``?offset=`` to set the virtual clock first (see the :mod:`testweb.web` doc). Its requests are logged with
``host`` null, like any request for no host.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import socket
import sys
import time
import traceback
from collections import deque
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from urllib.parse import parse_qsl

from cycles.storage.durable import write_file_atomically as _write_atomic
from testweb.host import HostProfile
from testweb.model import CONTROL_IP, canonical_target
from testweb.respond import Response, http_date
from testweb.web import Web
from testweb import tls as tls_web

MAX_HEAD_BYTES = 64 * 1024
"""A request head longer than this gets 431 and the connection is closed."""

LISTEN_BACKLOG = 1024
"""Per listening socket; a benchmark may open hundreds of connections to one host at once."""

STREAM_SNDBUF_BYTES = 64 * 1024
"""Kernel send buffer while streaming a large body: kept small so ``bytes_sent`` stays close
to what the client really read when it gives up (Linux doubles the value given)."""

CONN_IDS_PER_PROCESS = 1_000_000_000
"""Connection ids of process k of a multi-process server start at k times this: unique in the log."""

_REASONS = {s.value: s.phrase for s in HTTPStatus}

_LOG_LINE = json.JSONEncoder(ensure_ascii=False).encode
"""json.dumps(record, ensure_ascii=False) without building an encoder per call (dumps does
with any non-default argument): the same line, for every request."""


def _reason(status: int) -> str:
    return _REASONS.get(status, "Unknown")


class RequestLog:
    """Appends one JSON line per request; writes them once per event-loop iteration.

    The lines of an iteration go to the file in one ``write(2)`` on an ``O_APPEND``
    descriptor, so the processes of a multi-process server (:func:`serve`'s ``processes``)
    share one log without a line of one cut into a line of another."""

    def __init__(self, path: str | Path, loop: asyncio.AbstractEventLoop):
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lines: list[str] = []
        self._loop = loop

    def write(self, record: dict) -> None:
        if not self._lines:
            self._loop.call_soon(self.flush)
        self._lines.append(_LOG_LINE(record) + "\n")

    def flush(self) -> None:
        if self._lines and self._fd is not None:
            data = "".join(self._lines).encode()
            self._lines.clear()
            while data:
                data = data[os.write(self._fd, data):]

    def close(self) -> None:
        if self._fd is not None:
            self.flush()
            os.close(self._fd)
            self._fd = None


@dataclass(slots=True)
class _Request:
    method: str
    target: str
    version: str
    headers: dict[str, str]
    t_start: float
    clock_t: float = 0.0

    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.1":
            return "close" not in conn
        return "keep-alive" in conn


class HttpProtocol(asyncio.Protocol):
    """One client connection: parse requests, answer them in order, log each."""

    scheme = "http"
    """``"https"`` once testweb/tls.py handed us a decrypted connection."""

    def __init__(self, server: TestWebServer):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.pending: deque[_Request] = deque()
        self.skip = 0               # request body bytes still to discard
        self.stream_task: asyncio.Task | asyncio.TimerHandle | None = None
        """The body being streamed, or the round-trip wait before an answer: later requests queue."""
        self.paused = False
        self.drain: asyncio.Future | None = None
        self.closed = False
        self.closed_at = 0.0
        self.closing = False         # we decided to close after the current response
        self.buffered = 0            # transport write buffer after our last write

    # asyncio callbacks --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.ip = transport.get_extra_info("sockname")[0]
        self.client = (transport.get_extra_info("peername") or ("",))[0]
        self.profile: HostProfile | None = self.server.web.by_ip.get(self.ip)
        self.conn_id = self.server.new_connection(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.closed_at = time.time()
        self.server.connections.discard(self)
        if self.drain is not None and not self.drain.done():
            self.drain.set_result(None)
        if self.stream_task is not None:
            self.stream_task.cancel()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.drain is not None and not self.drain.done():
            self.drain.set_result(None)

    def data_received(self, data: bytes) -> None:
        now = time.time()
        buf = self.buf
        buf += data
        while buf and not self.closing:
            if self.skip:
                n = min(self.skip, len(buf))
                del buf[:n]
                self.skip -= n
                continue
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD_BYTES:
                    self._fail(431, now)
                return
            head = bytes(buf[:end])
            del buf[:end + 4]
            if not head:
                continue  # stray CRLF between requests (RFC 9112 §2.2)
            request = self._parse(head, now)
            if request is not None:
                request.clock_t = self.server.web.clock.now()
            if request is None:
                self._fail(400, now)
                return
            length = request.headers.get("content-length")
            if length is not None:
                if not length.isdigit():
                    self._fail(400, now)
                    return
                self.skip = int(length)
            elif "transfer-encoding" in request.headers:
                self._fail(411, now)  # no chunked request bodies here; crawlers send none
                return
            if self.stream_task is not None or self.pending:
                self.pending.append(request)
            else:
                self._dispatch(request)

    # parsing and answering ----------------------------------------------------------
    @staticmethod
    def _parse(head: bytes, now: float) -> _Request | None:
        try:
            text = head.decode("latin-1")
            lines = text.split("\r\n")
            method, target, version = lines[0].split(" ")
            headers = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if not sep:
                    return None
                headers[name.strip().lower()] = value.strip()
        except ValueError:
            return None
        if not version.startswith("HTTP/1.") or not target.startswith("/"):
            return None
        return _Request(method, target, version, headers, now)

    def _fail(self, status: int, now: float) -> None:
        request = _Request("-", "-", "HTTP/1.1", {}, now)
        head = self._head(status, [("Content-Type", "text/plain")], 0, close=True)
        self._log(request, status, 0, time.time(), False)
        self.transport.write(head)
        self.closing = True
        self.transport.close()

    def _head(self, status: int, headers: list[tuple[str, str]], length: int | None,
              close: bool, date: str | None = None) -> bytes:
        parts = [f"HTTP/1.1 {status} {_reason(status)}\r\nDate: {date or self.server.date()}\r\n"
                 "Server: crawl-testweb\r\n"]
        for name, value in headers:
            parts.append(f"{name}: {value}\r\n")
        if length is not None:
            parts.append(f"Content-Length: {length}\r\n")
        if close:
            parts.append("Connection: close\r\n")
        parts.append("\r\n")
        return "".join(parts).encode("latin-1")

    def _dispatch(self, request: _Request) -> None:
        """Answer now, or after the host's round trip (``rtt_s``: no netem here, so the
        server holds the response's first byte; later requests queue behind it)."""
        if self.profile is not None and self.profile.rtt_s:
            # A timer, not a task sleeping: ~3 against ~14 µs of the server's CPU a request
            # (the same wait; connection_lost cancels either).
            self.stream_task = asyncio.get_running_loop().call_later(self.profile.rtt_s, self._after_rtt, request)
        else:
            self._answer(request)

    def _after_rtt(self, request: _Request) -> None:
        self.stream_task = None
        if self.closed:
            return
        self._answer(request)
        self._answer_pending()

    def _answer_pending(self) -> None:
        while self.pending and self.stream_task is None and not self.closing:
            self._dispatch(self.pending.popleft())

    def _answer(self, request: _Request) -> None:
        profile = self.profile
        keep = request.keep_alive() and (profile is None or profile.keep_alive)
        try:
            if profile is not None and profile.tls and self.scheme == "http":
                response = tls_web.redirect_response(profile, canonical_target(request.target))
            elif profile is None and self.ip == CONTROL_IP:
                response = self.server.control(request.target)
            elif profile is None:
                response = Response(421, [("Content-Type", "text/plain")], b"No host here\n")
            elif request.method not in ("GET", "HEAD"):
                response = Response(405, [("Allow", "GET, HEAD"), ("Content-Type", "text/plain")],
                                    b"GET and HEAD only\n")
            else:
                response = profile.handle(request.method, request.target, request.headers)
        except Exception:  # a bug in a profile must show, not kill the server
            traceback.print_exc(file=sys.stderr)
            response = Response(500, [("Content-Type", "text/plain")], b"testweb error\n")
        status = response.status
        if response.stream is not None and request.method == "GET":
            head = self._head(status, response.headers, response.stream.length, not keep,
                              response.date)
            self.transport.write(head)
            self.stream_task = asyncio.ensure_future(self._stream(request, response, keep))
            return
        body = response.body if request.method == "GET" else b""
        no_body = status == 304 or status < 200 or status == 204
        length = None if no_body else (response.stream.length if response.stream else len(response.body))
        # The response's end is stamped when it is handed to the kernel: on loopback the
        # client can receive it, finish, and start its next request before this process is
        # scheduled again, so a stamp taken after write() could be later than the client's
        # own end and make a polite client look impolite.
        sent_at = time.time()
        self.transport.write(self._head(status, response.headers, length, not keep, response.date)
                             + body)
        self._log(request, status, len(body), sent_at, False)
        if not keep:
            self.closing = True
            self.transport.close()

    async def _stream(self, request: _Request, response: Response, keep: bool) -> None:
        transport = self.transport
        stream = response.stream
        written = 0
        complete = False
        self.buffered = 0
        sock = transport.get_extra_info("socket")
        try:
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STREAM_SNDBUF_BYTES)
            for chunk in stream.chunks():
                if stream.interval_s:
                    await asyncio.sleep(stream.interval_s)
                if self.paused and not self.closed:
                    self.drain = asyncio.get_running_loop().create_future()
                    await self.drain
                else:
                    # Yield anyway: a send error closes the transport in a callback we must
                    # let run, or we would go on "writing" into a dead connection.
                    await asyncio.sleep(0)
                if self.closed or transport.is_closing():
                    break
                transport.write(chunk)
                written += len(chunk)
                self.buffered = transport.get_write_buffer_size()
            else:
                complete = True
        except asyncio.CancelledError:
            pass  # the connection was lost (or the server is stopping)
        finally:
            self.stream_task = None
            if complete and not self.closed and not transport.is_closing():
                self._log(request, response.status, written, time.time(), False)
            else:
                # What was still in our buffer never reached the client.
                self._log(request, response.status, max(0, written - self.buffered),
                          self.closed_at or time.time(), not self.server.stopping)
        if self.closed:
            return
        if not keep:
            self.closing = True
            transport.close()
            return
        self._answer_pending()

    def _log(self, request: _Request, status: int, nbytes: int, t_end: float,
             client_closed: bool) -> None:
        headers = request.headers
        self.server.log.write({
            "t_start": request.t_start,
            "t_end": t_end,
            "host": self.profile.name if self.profile else None,
            "ip": self.ip,
            "client": self.client,
            "host_header": headers.get("host"),
            "method": request.method,
            "path": request.target,
            "status": status,
            "bytes_sent": nbytes,
            "user_agent": headers.get("user-agent"),
            "if_none_match": headers.get("if-none-match"),
            "if_modified_since": headers.get("if-modified-since"),
            "conn_id": self.conn_id,
            "client_closed": client_closed,
            "clock_t": request.clock_t,
            "scheme": self.scheme,
            "http_version": request.version[5:],
        })


class TestWebServer:
    """Serves a :class:`Web` on every host address until stopped or ``max_seconds`` pass."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, web: Web, log_path: str | Path, max_seconds: float = 600.0, first_conn_id: int = 0):
        self.web = web
        self.log_path = Path(log_path)
        self.max_seconds = max_seconds
        self.connections: set[HttpProtocol] = set()
        self._conn_ids = first_conn_id
        """Process k of a multi-process server counts from k x :data:`CONN_IDS_PER_PROCESS`."""
        self._date_second = -1
        self._date = ""
        self._servers: list[asyncio.AbstractServer] = []
        self._stopped: asyncio.Event | None = None
        self.stop_reason = ""
        self.tls: tls_web.TlsFront | None = None
        """HTTPS (testweb/tls.py), when the web has HTTPS hosts."""

    def new_connection(self, protocol: HttpProtocol) -> int:
        self.connections.add(protocol)
        self._conn_ids += 1
        return self._conn_ids

    def control(self, target: str) -> Response:
        """``/__clock[?t=&advance=&rate=]`` on the control address: set the virtual clock
        (when asked), then answer its state as JSON."""
        path, _, query = target.partition("?")
        if path != "/__clock":
            return Response(404, [("Content-Type", "text/plain")], b"only /__clock here\n")
        try:
            args = {k: float(v) for k, v in parse_qsl(query, strict_parsing=bool(query))}
            unknown = set(args) - {"t", "advance", "rate", "offset"}
            if unknown:
                raise ValueError(f"unknown parameters {sorted(unknown)}; use t, advance, rate, offset")
            if args:
                self.web.clock.set(args.get("t"), args.get("advance"), args.get("rate"),
                                   args.get("offset"))
        except ValueError as exc:
            return Response(400, [("Content-Type", "text/plain")], f"{exc}\n".encode())
        return Response(200, [("Content-Type", "application/json"), ("Cache-Control", "no-store")],
                        json.dumps(self.web.clock.state()).encode())

    def date(self) -> str:
        now = int(time.time())
        if now != self._date_second:
            self._date_second = now
            self._date = http_date(now)
        return self._date

    async def start(self, sockets: list[socket.socket], tls_sockets: list[socket.socket] = ()) -> None:
        loop = asyncio.get_running_loop()
        self.log = RequestLog(self.log_path, loop)
        self._stopped = asyncio.Event()
        for sock in sockets:
            self._servers.append(await loop.create_server(
                lambda: HttpProtocol(self), sock=sock, backlog=LISTEN_BACKLOG))
        if tls_sockets:
            self.tls.log = RequestLog(tls_web.handshake_log_path(self.log_path), loop)
            accept = self.tls.acceptor(lambda: HttpProtocol(self))
            for sock in tls_sockets:
                self._servers.append(await loop.create_server(accept, sock=sock, backlog=LISTEN_BACKLOG))
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self.stop, f"signal {sig.name}")
            except (NotImplementedError, RuntimeError):
                pass  # not the main thread (an in-process test); stop() still works
        loop.call_later(self.max_seconds, self.stop, f"max-seconds {self.max_seconds:g} reached")

    @property
    def stopping(self) -> bool:
        return self._stopped is not None and self._stopped.is_set()

    def stop(self, reason: str = "stopped") -> None:
        if self._stopped is not None and not self._stopped.is_set():
            self.stop_reason = reason
            self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        # Let cancelled streams write their log lines before the log closes.
        await asyncio.sleep(0.05)
        self.log.close()
        if self.tls is not None:
            self.tls.close()


def bind_all(ips: list[str], port: int) -> tuple[int, list[socket.socket]]:
    """Listening sockets on ``port`` at every address. With port 0 the first socket picks a
    free port and the others use it; if that port is taken on another address, try again."""
    for _attempt in range(50):
        socks: list[socket.socket] = []
        try:
            chosen = port
            for ip in ips:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((ip, chosen))
                sock.listen(LISTEN_BACKLOG)
                sock.setblocking(False)
                chosen = sock.getsockname()[1]
            return chosen, socks
        except OSError as exc:
            for sock in socks:
                sock.close()
            if port != 0 or exc.errno != errno.EADDRINUSE:
                raise OSError(exc.errno, f"cannot listen on {ip}:{chosen}: {exc.strerror}; "
                              "choose another --port, or 0 for a free one") from exc
    raise OSError(errno.EADDRINUSE, f"no port free on all {len(ips)} test web addresses")


def use_fast_loop() -> str:
    """Install uvloop's event loop policy when uvloop is importable; name the loop used."""
    try:
        import uvloop  # type: ignore[import-not-found]
    except ImportError:
        return "asyncio"
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return "uvloop"


def serve(*, hosts: int = 20, pages: int = 10, page_bytes: int = 30_000, special: bool = True,
          seed: int = 0, port: int = 0, log_path: str | Path, ready_file: str | Path | None = None,
          max_seconds: float = 600.0, loop: str = "asyncio", traps: bool = False,
          neardups: bool = False, changing: bool = False, clock_start: float | None = None,
          clock_rate: float = 0.0, hostile: bool = False, internal_port: int = 0,
          sitemaps: bool = False, tail: bool = False, https: float = 0.0, tls: bool = False,
          rtt_ms: tuple[float, float] = (0.0, 0.0), tls_port: int = 0,
          tls_dir: str | Path | None = None, h2: float = 0.0, processes: int = 1) -> str:
    """Run the test web until SIGTERM/SIGINT or ``max_seconds``; returns why it stopped.

    The ready file (JSON: ``port``, ``resolve``, ``seeds``, ``control`` (the control
    address), the parameters and ``pid``) is written, atomically, only once every socket
    listens. ``clock_start`` and ``clock_rate`` set the virtual clock (:mod:`testweb.web` doc).
    With HTTPS hosts (``https``, ``tls``: :mod:`testweb.tls`) it also has ``tls_port`` and
    ``ca_file`` (the test CA, made in ``tls_dir``, default ``tls/`` beside the log).

    ``processes`` > 1 serves the hosts from that many processes (forked once every socket
    listens; the ready file's ``pids``): a host's addresses, plain and TLS, all belong to one
    process, so its state (counters of the special hosts, its connections) stays in one place,
    and every process appends to the one request log (:class:`RequestLog`). One process
    does TLS handshakes and Python per request for the whole web: a benchmark of thousands of
    HTTPS hosts then measures the server, not the crawler (docs/real-web-testing.md). The
    control address (the virtual clock) is the first process's, so a web whose pages follow
    that clock (``changing``) needs one process.
    """
    if max_seconds <= 0:
        raise ValueError(f"max_seconds must be positive, got {max_seconds}")
    if processes < 1 or (processes > 1 and changing):
        raise ValueError(f"processes must be 1 or more, and 1 with changing hosts; got {processes}")
    params = dict(hosts=hosts, pages=pages, page_bytes=page_bytes, special=special, seed=seed,
                  traps=traps, neardups=neardups, changing=changing, hostile=hostile,
                  internal_port=internal_port, sitemaps=sitemaps, tail=tail, https=https, tls=tls,
                  rtt_ms=tuple(rtt_ms), h2=h2)
    layout = Web(**params, port=80)
    actual_port, sockets = bind_all(layout.ips() + [CONTROL_IP], port)
    tls_sockets: list[socket.socket] = []
    actual_tls_port = tls_port or 443
    if layout.https_ips():
        actual_tls_port, tls_sockets = bind_all(layout.https_ips(), tls_port)
    web = Web(**params, port=actual_port, tls_port=actual_tls_port)
    web.clock.set(t=clock_start, rate=clock_rate)
    web.warm()
    loop_name = use_fast_loop() if loop in ("auto", "uvloop") else "asyncio"
    if loop == "uvloop" and loop_name != "uvloop":
        raise RuntimeError("--loop uvloop asked for, but uvloop is not installed (pip install uvloop)")
    tls_front, tls_info = None, {}
    if tls_sockets:
        ca = tls_web.TestCA.load_or_create(tls_dir or Path(log_path).parent / "tls")
        tls_front = tls_web.TlsFront(web, ca)
        tls_front.warm()
        tls_info = {"tls_port": actual_tls_port, "ca_file": str(ca.ca_file.resolve())}
    index, children = _fork_processes(processes)
    owned = _owner_of(layout.ips(), processes)
    server = TestWebServer(web, log_path, max_seconds, first_conn_id=index * CONN_IDS_PER_PROCESS)
    if tls_front is not None:
        server.tls, tls_front.server = tls_front, server
    mine = [sock for sock in sockets if owned.get(sock.getsockname()[0], 0) == index]
    mine_tls = [sock for sock in tls_sockets if owned.get(sock.getsockname()[0], 0) == index]
    for sock in set(sockets + tls_sockets) - set(mine + mine_tls):
        sock.close()

    async def main() -> None:
        await server.start(mine, mine_tls)
        if ready_file is not None and index == 0:
            _write_atomic(Path(ready_file), json.dumps({
                "port": actual_port, "resolve": web.resolve_map(), "seeds": web.seeds(),
                "control": f"{CONTROL_IP}:{actual_port}", **params,
                "clock": web.clock.state(), "pid": os.getpid(), "pids": [os.getpid(), *children],
                "loop": loop_name, "processes": processes, **tls_info,
            }))
        await server.wait_stopped()

    try:
        asyncio.run(main())
    finally:
        if index > 0:
            os._exit(0)  # a forked server process: never back into the caller's code
        _stop_children(children)
    return server.stop_reason


def _owner_of(ips: list[str], processes: int) -> dict[str, int]:
    """Which process serves each host address (its plain and TLS sockets alike)."""
    return {ip: k % processes for k, ip in enumerate(ips)}


def _fork_processes(processes: int) -> tuple[int, list[int]]:
    """Fork the server's other processes: (this process's index, the children's pids in the
    first). A child dies with the first process (``PR_SET_PDEATHSIG``), so a killed server
    leaves none behind."""
    children: list[int] = []
    for index in range(1, processes):
        pid = os.fork()
        if pid == 0:
            try:
                import ctypes

                ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
            except (OSError, AttributeError):
                pass
            return index, []
        children.append(pid)
    return 0, children


def _stop_children(children: list[int]) -> None:
    for pid in children:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for pid in children:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
