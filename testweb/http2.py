"""HTTP/2 for the test web's HTTPS hosts that offer it (ALPN "h2", RFC 9113), with the
``h2`` package (the Python HTTP/2 state machine; it does no I/O, the event loop does).

A host offers h2 when ``profile.h2`` is set (``Web(..., h2=0.5)``: that fraction of the good
HTTPS hosts, by a hash of the name; testweb/tls.py). The client picks: ALPN ``h2`` gets
:class:`H2Protocol`, anything else the HTTP/1.1 protocol of server.py. Requests are answered as
on HTTP/1.1 (same pages, same round-trip delay before the first byte) and logged with the same
fields, ``http_version`` ``"2"`` (``"1.1"`` on HTTP/1.1). Streamed bodies (drip, huge) are
only on plain-HTTP hosts, so every h2 body is sent whole, under HTTP/2 flow control.
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
from typing import TYPE_CHECKING

import h2.config
import h2.connection
import h2.events
import h2.exceptions

from testweb.respond import Response

if TYPE_CHECKING:
    from testweb.server import TestWebServer


class H2Protocol(asyncio.Protocol):
    """One HTTP/2 connection: each stream's request answered (after the host's round trip)."""

    scheme = "https"

    def __init__(self, server: TestWebServer):
        self.server = server
        # Our own response headers are lower-case and free of connection-specific fields
        # (_answer), so h2's checks of them are skipped (~10 % of the HTTP/2 layer's CPU);
        # what the client sends is still validated, as a real server does.
        config = h2.config.H2Configuration(client_side=False, header_encoding="latin-1",
                                           validate_outbound_headers=False, normalize_outbound_headers=False)
        self.conn = h2.connection.H2Connection(config)
        self.transport: asyncio.Transport | None = None
        self.sending: dict[int, tuple[bytes, dict]] = {}
        """Stream id -> (body still to send, log record) while flow control holds it back."""
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport
        self.ip = transport.get_extra_info("sockname")[0]
        self.client = (transport.get_extra_info("peername") or ("",))[0]
        self.profile = self.server.web.by_ip.get(self.ip)
        self.conn_id = self.server.new_connection(self)
        self.conn.initiate_connection()
        self._flush()

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.server.connections.discard(self)
        now = time.time()
        for body, record in self.sending.values():
            self._log(record, now, client_closed=True)
        self.sending.clear()

    def data_received(self, data: bytes) -> None:
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self._flush()
            self.transport.close()
            return
        for event in events:
            if isinstance(event, h2.events.RequestReceived):
                self._received(event)
            elif isinstance(event, h2.events.WindowUpdated):
                for stream_id in [event.stream_id] if event.stream_id else list(self.sending):
                    self._send_body(stream_id)
            elif isinstance(event, h2.events.StreamReset):
                pending = self.sending.pop(event.stream_id, None)
                if pending is not None:
                    self._log(pending[1], time.time(), client_closed=True)
            elif isinstance(event, h2.events.ConnectionTerminated):
                self.transport.close()
        self._flush()

    def _received(self, event: h2.events.RequestReceived) -> None:
        headers = {name.lower(): value for name, value in event.headers}
        request = {"t_start": time.time(), "clock_t": self.server.web.clock.now(),
                   "method": headers.get(":method", "-"), "path": headers.get(":path", "-"),
                   "headers": {k: v for k, v in headers.items() if not k.startswith(":")},
                   "authority": headers.get(":authority")}
        rtt = self.profile.rtt_s if self.profile is not None else 0.0
        if rtt:
            asyncio.get_running_loop().call_later(rtt, self._answer, event.stream_id, request)
        else:
            self._answer(event.stream_id, request)

    def _answer(self, stream_id: int, request: dict) -> None:
        if self.closed:
            return
        method, path = request["method"], request["path"]
        try:
            if self.profile is None:
                response = Response(421, [("Content-Type", "text/plain")], b"No host here\n")
            elif method not in ("GET", "HEAD"):
                response = Response(405, [("Allow", "GET, HEAD"), ("Content-Type", "text/plain")], b"GET and HEAD only\n")
            else:
                response = self.profile.handle(method, path, request["headers"])
        except Exception:  # a bug in a profile must show, not kill the server
            traceback.print_exc(file=sys.stderr)
            response = Response(500, [("Content-Type", "text/plain")], b"testweb error\n")
        if response.stream is not None:
            body = b"".join(response.stream.chunks())
        else:
            body = response.body
        if method != "GET" or response.status in (204, 304):
            body = b""
        out = [(":status", str(response.status)), ("date", response.date or self.server.date()),
               ("server", "crawl-testweb")]
        # RFC 9113 §8.2.2: no connection-specific header fields in HTTP/2.
        out += [(name.lower(), value) for name, value in response.headers
                if name.lower() not in ("connection", "keep-alive", "transfer-encoding")]
        if response.status not in (204, 304):
            out.append(("content-length", str(len(response.body if response.stream is None else body))))
        record = {**request, "status": response.status, "bytes": len(body)}
        try:
            self.conn.send_headers(stream_id, out, end_stream=not body)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            return  # the client reset the stream meanwhile
        if body:
            self.sending[stream_id] = (body, record)
            self._send_body(stream_id)
        else:
            self._sent(stream_id, record)
        self._flush()

    def _send_body(self, stream_id: int) -> None:
        pending = self.sending.get(stream_id)
        if pending is None:
            return
        body, record = pending
        try:
            while body:
                window = min(self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size)
                if window <= 0:
                    break
                chunk, body = body[:window], body[window:]
                self.conn.send_data(stream_id, chunk, end_stream=not body)
        except (h2.exceptions.StreamClosedError, h2.exceptions.ProtocolError):
            self.sending.pop(stream_id, None)
            self._log(record, time.time(), client_closed=True)
            return
        if body:
            self.sending[stream_id] = (body, record)
        else:
            self.sending.pop(stream_id, None)
            self._sent(stream_id, record)
        self._flush()

    def _sent(self, stream_id: int, record: dict) -> None:
        """A response sent whole: logged; on a host that does not keep connections alive
        (``tls-close``), GOAWAY (RFC 9113 §6.8) and the end of the connection, as a server
        does at its limit of requests per connection: the client's next request needs a new
        connection, and may resume the TLS session."""
        self._log(record, time.time(), client_closed=False)
        if self.profile is not None and not self.profile.keep_alive:
            self.conn.close_connection(last_stream_id=stream_id)
            self._flush()
            self.transport.close()

    def _flush(self) -> None:
        data = self.conn.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _log(self, record: dict, t_end: float, client_closed: bool) -> None:
        headers = record["headers"]
        self.server.log.write({
            "t_start": record["t_start"], "t_end": t_end,
            "host": self.profile.name if self.profile else None, "ip": self.ip, "client": self.client,
            "host_header": record["authority"], "method": record["method"], "path": record["path"],
            "status": record["status"], "bytes_sent": 0 if client_closed else record["bytes"],
            "user_agent": headers.get("user-agent"), "if_none_match": headers.get("if-none-match"),
            "if_modified_since": headers.get("if-modified-since"), "conn_id": self.conn_id,
            "client_closed": client_closed, "clock_t": record["clock_t"], "scheme": "https",
            "http_version": "2",
        })
