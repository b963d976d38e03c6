"""HTTPS in the test web: a test CA, per-host certificates chosen by SNI, hosts with bad
TLS, http -> https redirects, and per-host round-trip delays.

Everything TLS lives here; ``server.py``, ``host.py`` and ``web.py`` carry small hooks only.

API (for tests, the demo, the benchmarks and the namespace runner)
------------------------------------------------------------------
- ``Web(..., https=0.9, tls=True, h2=0.5, rtt_ms=(20, 300), tls_port=443)``, ``serve(...)``
  and ``TestWeb(...)`` take the same parameters (``serve --https 0.9 --tls --h2 0.5
  --rtt-ms 20-300 --tls-port 0 --tls-dir DIR``):

  * ``https``: fraction of the **regular** hosts served over HTTPS (chosen by a hash of the
    name and the seed, so the server and the oracle agree). Special and other optional
    kinds stay on plain HTTP so the tests written for them see the same web.
  * ``tls``: adds the kind ``"tls"`` (address block ``127.0.62.x``), one host per
    :data:`MODES` entry, named ``tls-{mode}.web.test`` with ``_`` written ``-``
    (``tls-good``, ``tls-expired``, ``tls-wrong-name``, ``tls-self-signed``, ``tls-stall``,
    ``tls-tls10``), and ``tls-close`` (good, but ``Connection: close`` after every response:
    :data:`CLOSING`; with ``h2`` > 0 it offers HTTP/2 and sends GOAWAY after every response
    instead). Each has ``/`` and ``/p/0.html`` .. ``/p/2.html``.
  * ``h2``: fraction of the good HTTPS regular hosts that offer HTTP/2 (ALPN ``h2``;
    testweb/http2.py); the others answer ALPN with ``http/1.1``.
  * ``rtt_ms=(lo, hi)``: each host gets a round trip drawn log-uniformly in ``[lo, hi]``
    ms from its name (:func:`rtt_s`). The server sleeps that long before the first byte of
    every response and, on HTTPS, before answering the ClientHello (there is no netem).

- An HTTPS host listens on its address at ``tls_port`` (``Web.tls_port``; ``serve`` picks a
  free one with port 0, the ready file says which: ``tls_port``). Its plain-HTTP address
  (the shared ``port``) answers every request with ``301`` to the same target on
  ``https://`` (as the real web does). Its URLs (:meth:`Web.origin`, the seeds, the links
  pointing at it) are ``https://name[:tls_port]``.
- The test CA is made at run time with ``cryptography`` (:class:`TestCA`), in ``tls_dir``
  (``serve --tls-dir``; default ``tls/`` beside the request log): ``ca.pem`` is the one
  file a client must trust (``config.fetch.ca_bundle``; the ready file's ``ca_file``;
  :meth:`TestWeb.ca_file <testweb.harness.TestWeb>`). An existing CA in that folder is
  reused, so a namespace runner can make it first (:meth:`TestCA.load_or_create`) and
  bind-mount :meth:`TestCA.write_bundle`'s system-plus-test bundle over the system one.
- The handshake log (:func:`handshake_log_path`: ``{log}.tls.jsonl``), one JSON line per
  TLS connection: ``t``, ``ip``, ``host``, ``mode``, ``sni`` (server name the client sent,
  null if none), ``ok``, ``error`` (OpenSSL's reason when the handshake failed: the client
  speaking too old a protocol shows as ``UNSUPPORTED_PROTOCOL``; with TLS 1.3 the server's
  side ends before the client checks the certificate, so a refused certificate shows as
  ``ok`` with no request on that ``conn_id``), ``version``,
  ``session_reused``, ``alpn`` (``"h2"``, ``"http/1.1"`` or null), ``conn_id`` (the request log's, for a connection that got through;
  ``null`` otherwise). A stalled host logs ``{"ok": false, "error": "stalled"}`` at accept:
  the TCP connection was made and is never answered.
- The request log gains ``scheme`` (``"http"`` or ``"https"``): "no request reached a
  bad-certificate host" is "no line with ``scheme == "https"`` for it".

Modes (:data:`MODES`)
---------------------
``good``: a certificate for the name, from the test CA, chosen by SNI among every good
host's (a client that sends no SNI gets the default certificate, for
``no-sni.web.test``, and fails on the name). ``expired``: right name, right CA, ended a
year ago. ``wrong_name``: the test CA's certificate for ``other.web.test``.
``self_signed``: the name, signed by itself. ``stall``: TCP is accepted, no byte ever
comes back. ``tls10``: a good certificate, but the server speaks TLS 1.0 only (OpenSSL
needs ``@SECLEVEL=0`` for that).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import ssl
import tempfile
import time
from asyncio import sslproto
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from cycles.storage.durable import write_file_atomically as _write_atomic
from testweb.host import SmallHost
from testweb.model import DOMAIN, mix, str_key
from testweb.respond import Response

if TYPE_CHECKING:
    from testweb.host import HostProfile
    from testweb.web import Web

GOOD, EXPIRED, WRONG_NAME, SELF_SIGNED, STALL, TLS10 = (
    "good", "expired", "wrong_name", "self_signed", "stall", "tls10")
MODES = (GOOD, EXPIRED, WRONG_NAME, SELF_SIGNED, STALL, TLS10)
"""How an HTTPS host answers a handshake (module doc)."""

BAD_MODES = frozenset(MODES) - {GOOD}
"""Modes whose host a verifying client must never send an HTTP request to."""

KIND = "tls"
IP_PREFIX = "127.0.62."
"""Address block of the ``tls`` kind (``testweb.model.KIND_IP_PREFIX``)."""

WRONG_NAME_CN = f"other.{DOMAIN}"
NO_SNI_NAME = f"no-sni.{DOMAIN}"
SERVER_HANDSHAKE_TIMEOUT_S = 30.0
"""The server gives up on a client that stops mid-handshake after this long."""

SYSTEM_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
"""The system CA bundle (Debian) libcurl in the pycurl wheel reads."""


def host_name(mode: str) -> str:
    """``tls-{mode}.web.test`` (underscores as hyphens: they are not allowed in host names)."""
    return f"tls-{mode.replace('_', '-')}.{DOMAIN}"


# --- the test CA --------------------------------------------------------------------------

class TestCA:
    """A certificate authority for the test web, made with ``cryptography`` at run time.

    One EC P-256 key signs every host certificate and is every host's key too (key
    generation is the slow part; a shared key changes nothing a client checks)."""

    __test__ = False

    def __init__(self, folder: Path, cert, key):
        self.folder = folder
        self.cert = cert
        self.key = key
        self._leaf_key = None

    @property
    def ca_file(self) -> Path:
        return self.folder / "ca.pem"

    @classmethod
    def load_or_create(cls, folder: str | Path) -> TestCA:
        """The CA in ``folder`` (``ca.pem``, ``ca.key``), made there first if absent."""
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        cert_path, key_path = folder / "ca.pem", folder / "ca.key"
        if cert_path.exists() and key_path.exists():
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
            key = serialization.load_pem_private_key(key_path.read_bytes(), None)
            return cls(folder, cert, key)
        key = _new_key()
        name = _name("crawl test web CA")
        cert = _build(name, name, key.public_key(), key, ca=True, sans=None,
                      not_before=_now() - dt.timedelta(days=1), not_after=_now() + dt.timedelta(days=3650))
        _write_atomic(key_path, key.private_bytes(serialization.Encoding.PEM,
                                                  serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
        _write_atomic(cert_path, cert.public_bytes(serialization.Encoding.PEM))
        return cls(folder, cert, key)

    def write_bundle(self, path: str | Path, system: Path | None = SYSTEM_BUNDLE) -> Path:
        """The system bundle (when it exists) followed by this CA, at ``path``: what a
        namespace bind-mounts over the system's ``ca-certificates.crt``."""
        path = Path(path)
        head = system.read_bytes() if system is not None and system.exists() else b""
        if head and not head.endswith(b"\n"):
            head += b"\n"
        _write_atomic(path, head + self.ca_file.read_bytes())
        return path

    def leaf(self, name: str, mode: str = GOOD) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) a host of ``mode`` presents for ``name``."""
        from cryptography.hazmat.primitives import serialization

        if self._leaf_key is None:
            self._leaf_key = _new_key()
        key = self._leaf_key
        now = _now()
        start, end = now - dt.timedelta(days=1), now + dt.timedelta(days=90)
        subject, sans = name, [name]
        issuer_name, signer = self.cert.subject, self.key
        if mode == EXPIRED:
            start, end = now - dt.timedelta(days=400), now - dt.timedelta(days=365)
        elif mode == WRONG_NAME:
            subject, sans = WRONG_NAME_CN, [WRONG_NAME_CN]
        elif mode == SELF_SIGNED:
            issuer_name, signer = _name(name), key
        cert = _build(_name(subject), issuer_name, key.public_key(), signer, ca=False, sans=sans,
                      not_before=start, not_after=end)
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
        return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _new_key():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str):
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _build(subject, issuer, public_key, signer, *, ca: bool, sans: list[str] | None,
           not_before: dt.datetime, not_after: dt.datetime):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    builder = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
               .public_key(public_key).serial_number(x509.random_serial_number())
               .not_valid_before(not_before).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
        builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    else:
        # OpenSSL 3 and libcurl match names against subjectAltName only (RFC 6125 §6.4.4).
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(s) for s in sans or []]), critical=False)
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    return builder.sign(signer, hashes.SHA256())


# --- the model: which host is HTTPS, and its round trip ------------------------------------

CLOSING = f"tls-close.{DOMAIN}"
"""A good HTTPS host that closes the connection after every response (``Connection: close``,
as many old servers do): each request needs a new connection, which resumes the TLS
session of the last one if the client kept it (``session_reused`` in the handshake log)."""


class TlsHost(SmallHost):
    """A host of the ``tls`` kind: three small pages behind a handshake of its mode."""

    kind = KIND

    def __init__(self, web: Web, mode: str, ip: str, name: str | None = None, keep_alive: bool = True):
        super().__init__(web, name or host_name(mode), ip)
        self.mode = mode
        self.keep_alive = keep_alive

    def build(self):
        return self.tree(3, [])


def tls_hosts(web: Web, prefix: str = IP_PREFIX) -> list[TlsHost]:
    """One host per mode, ``{prefix}{1 + j}``, then :data:`CLOSING` (the kind's
    ``{kind}_hosts`` function)."""
    hosts = [TlsHost(web, mode, f"{prefix}{1 + j}") for j, mode in enumerate(MODES)]
    return hosts + [TlsHost(web, GOOD, f"{prefix}{1 + len(MODES)}", CLOSING, keep_alive=False)]


def assign(web: Web, https: float, rtt_ms: tuple[float, float], h2: float = 0.0) -> None:
    """Set each profile's ``tls`` mode (None: plain HTTP), ``h2`` and ``rtt_s``, before any
    page is built (links read them through :meth:`Web.origin`)."""
    for name, value in (("https", https), ("h2", h2)):
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name} must be a fraction between 0 and 1, got {value}")
    lo, hi = rtt_ms
    if lo < 0 or hi < lo:
        raise ValueError(f"rtt_ms must be 0 <= lo <= hi, got {rtt_ms}")
    for profile in web.profiles.values():
        if isinstance(profile, TlsHost):
            profile.tls = profile.mode
            # tls-close offers HTTP/2 on a web that has it: its GOAWAY after every response
            # makes each h2 request a new connection (testweb/http2.py), as Connection: close
            # does on HTTP/1.1, so session resumption is exercised on both protocols.
            profile.h2 = profile.name == CLOSING and h2 > 0
        elif profile.kind == "regular" and https > 0 and _unit(web.seed, profile.name, 443) < https:
            profile.tls = GOOD
            profile.h2 = h2 > 0 and _unit(web.seed, profile.name, 2) < h2
        profile.rtt_s = rtt_s(web.seed, profile.name, lo, hi)


def _unit(seed: int, name: str, salt: int) -> float:
    return mix(seed, str_key(name), salt) / float(1 << 64)


def rtt_s(seed: int, name: str, lo_ms: float, hi_ms: float) -> float:
    """The host's round trip in seconds: log-uniform in ``[lo_ms, hi_ms]`` (20-300 ms gives
    a median near 77 ms, as measured on the real web), or ``lo_ms`` when ``lo_ms`` is 0."""
    if hi_ms <= 0:
        return 0.0
    if lo_ms <= 0 or hi_ms == lo_ms:
        return hi_ms / 1000.0 if lo_ms == hi_ms else lo_ms / 1000.0 + (hi_ms - lo_ms) / 1000.0 * _unit(seed, name, 86)
    u = _unit(seed, name, 86)
    return math.exp(math.log(lo_ms) + u * (math.log(hi_ms) - math.log(lo_ms))) / 1000.0


def https_origin(name: str, tls_port: int) -> str:
    return f"https://{name}" if tls_port == 443 else f"https://{name}:{tls_port}"


def parse_rtt(text: str) -> tuple[float, float]:
    """``"20-300"`` -> (20.0, 300.0); ``"50"`` -> (50.0, 50.0) (the ``--rtt-ms`` option)."""
    lo, sep, hi = text.partition("-")
    try:
        pair = (float(lo), float(hi if sep else lo))
    except ValueError:
        raise ValueError(f"--rtt-ms takes LO-HI or MS in milliseconds, got {text!r}") from None
    return pair


def redirect_response(profile: HostProfile, target: str) -> Response:
    """What an HTTPS host's plain-HTTP address answers: 301 to the same target on https."""
    location = profile.origin + target
    return Response(301, [("Location", location), ("Content-Type", "text/plain")],
                    b"Moved to https\n")


# --- the server side -----------------------------------------------------------------------

def handshake_log_path(log_path: str | Path) -> Path:
    """``{log}.tls.jsonl`` beside the request log (module doc)."""
    return Path(str(log_path) + ".tls.jsonl")


class TlsFront:
    """The server's TLS: one SSL context per host certificate, the accept path, the log."""

    def __init__(self, web: Web, ca: TestCA):
        self.web = web
        self.ca = ca
        self._pem_dir = Path(tempfile.mkdtemp(prefix="testweb-tls-"))
        self._contexts: dict[tuple[str, str], ssl.SSLContext] = {}
        self.sni_context = self._context(NO_SNI_NAME, GOOD)
        self.sni_context.sni_callback = self._pick_by_sni
        self.log = None
        self.server = None
        """The TestWebServer (set by it): HTTP/2 connections log and count through it."""
        self.stalled: set = set()
        """Transports of stalled handshakes. A paused transport is referenced by nothing else:
        garbage-collected, it would close its socket and the client would see a reset (curl
        35 "Broken pipe") instead of a handshake that never ends."""

    def _context(self, name: str, mode: str) -> ssl.SSLContext:
        """A server context presenting the certificate ``mode`` gives ``name`` (cached)."""
        key = (name, mode)
        ctx = self._contexts.get(key)
        if ctx is not None:
            return ctx
        cert_pem, key_pem = self.ca.leaf(name, mode)
        path = self._pem_dir / f"{len(self._contexts)}.pem"
        path.write_bytes(cert_pem + key_pem)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        if mode == TLS10:
            # A server of 2010: TLS 1.0 only. OpenSSL 3 refuses TLS 1.0 at its default
            # security level 1 (SHA-1 signatures), hence SECLEVEL=0.
            ctx.minimum_version = ssl.TLSVersion.TLSv1
            ctx.maximum_version = ssl.TLSVersion.TLSv1
            ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
        ctx.load_cert_chain(path)
        profile = self.web.profiles.get(name)
        # ALPN (RFC 7301): a host that offers HTTP/2 lists it first; the others say http/1.1.
        ctx.set_alpn_protocols(["h2", "http/1.1"] if profile is not None and profile.h2 else ["http/1.1"])
        self._contexts[key] = ctx
        return ctx

    def warm(self) -> None:
        """Make every HTTPS host's context now, before the server says it is ready: one costs
        3-5 ms (OpenSSL's load_cert_chain), which made lazily on the first handshake of each of
        3,000 hosts would hold the event loop for seconds inside a benchmark's window."""
        for profile in self.web.profiles.values():
            if profile.tls == GOOD:
                self._context(profile.name, GOOD)
            elif profile.tls:
                self.context_for(profile)
        if any(p.h2 for p in self.web.profiles.values()):
            import testweb.http2  # noqa: F401  (its import took 40 ms of the first h2 request)

    def _pick_by_sni(self, sslobj, server_name: str | None, _ctx) -> None:
        """SNI (RFC 6066 §3): the certificate of the host named, if it is a good HTTPS host
        of this web; anything else keeps the default (``no-sni``) certificate."""
        sslobj.sni = server_name
        profile = self.web.profiles.get((server_name or "").lower())
        if profile is not None and profile.tls == GOOD:
            sslobj.context = self._context(profile.name, GOOD)
        return None

    def context_for(self, profile: HostProfile) -> ssl.SSLContext | None:
        """The context a host's listener hands the handshake to (None for ``stall``)."""
        mode = profile.tls
        if mode == STALL:
            return None
        if mode == GOOD:
            return self.sni_context
        ctx = self._context(profile.name, mode)
        if ctx.sni_callback is None:
            ctx.sni_callback = _record_sni
        return ctx

    def write(self, record: dict) -> None:
        if self.log is not None:
            self.log.write(record)

    def acceptor(self, make_http: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """Protocol factory of the TLS listening sockets: ``make_http()`` is the server's
        HTTP protocol, handed the decrypted stream once the handshake is done."""
        return lambda: _Acceptor(self, make_http)

    def close(self) -> None:
        for transport in list(self.stalled):
            transport.abort()
        if self.log is not None:
            self.log.close()


class _AlertingTLS(sslproto.SSLProtocol):
    """asyncio's TLS protocol, but a failed handshake sends OpenSSL's alert before the
    connection is dropped, as a real server does: a client offering only TLS >= 1.2 to the
    ``tls10`` host then reads "tlsv1 alert protocol version", not "unexpected eof".

    Its read buffer is 32 KiB, not asyncio's 256 KiB: the buffer is allocated and zeroed per
    connection (fresh pages from the kernel once thousands of connections hold one: 4 % of
    the server's CPU in bench_fetch --real-web, and ~750 MB for 3,000 hosts), while what a
    server reads is requests, far under one 16 KiB TLS record."""

    max_size = 32 * 1024

    def _on_handshake_complete(self, handshake_exc) -> None:
        if handshake_exc is not None:
            try:
                data = self._outgoing.read()
                if data:
                    self._transport.write(data)
            except Exception:  # the alert is a courtesy; the failure is reported anyway
                pass
        super()._on_handshake_complete(handshake_exc)


class _ByAlpn(asyncio.Protocol):
    """The application protocol the handshake chose (ALPN): HTTP/2 (testweb/http2.py) for
    ``h2``, else the server's HTTP/1.1. Decided in connection_made, which asyncio calls once
    the handshake is done and before any application data is delivered."""

    def __init__(self, server, make_http: Callable[[], asyncio.Protocol]):
        self.server = server
        self.make_http = make_http
        self.inner: asyncio.Protocol | None = None

    def connection_made(self, transport) -> None:
        sslobj = transport.get_extra_info("ssl_object")
        if sslobj is not None and sslobj.selected_alpn_protocol() == "h2":
            from testweb.http2 import H2Protocol

            self.inner = H2Protocol(self.server)
        else:
            self.inner = self.make_http()
            self.inner.scheme = "https"
        transport.set_protocol(self.inner)
        self.inner.connection_made(transport)

    def connection_lost(self, exc) -> None:  # only if the connection ends before connection_made
        pass


def _record_sni(sslobj, server_name, _ctx) -> None:
    sslobj.sni = server_name
    return None


class _Acceptor(asyncio.Protocol):
    """A TCP connection to a TLS address: wait the host's round trip, then hand the socket
    to asyncio's TLS protocol (which reads the ClientHello still queued in the kernel)."""

    def __init__(self, front: TlsFront, make_http: Callable[[], asyncio.Protocol]):
        self.front = front
        self.make_http = make_http
        self.task: asyncio.Task | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.pause_reading()  # the ClientHello waits in the kernel until we answer it
        ip = transport.get_extra_info("sockname")[0]
        profile = self.front.web.by_ip.get(ip)
        record = {"t": time.time(), "ip": ip, "host": profile.name if profile else None,
                  "mode": profile.tls if profile else None, "sni": None, "ok": False, "error": None,
                  "version": None, "session_reused": None, "alpn": None, "conn_id": None}
        ctx = self.front.context_for(profile) if profile is not None and profile.tls else None
        if ctx is None:
            record["error"] = "stalled"  # TCP accepted; no ServerHello, ever
            self.front.write(record)
            self.transport = transport
            self.front.stalled.add(transport)
            return
        self.task = asyncio.ensure_future(self._handshake(transport, profile, ctx, record))

    def connection_lost(self, exc) -> None:
        self.front.stalled.discard(getattr(self, "transport", None))
        if self.task is not None and not self.task.done():
            self.task.cancel()

    async def _handshake(self, transport, profile, ctx, record) -> None:
        if profile.rtt_s:
            await asyncio.sleep(profile.rtt_s)
        if transport.is_closing():
            return
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        app = _ByAlpn(self.front.server, self.make_http)
        tls = _AlertingTLS(loop, app, ctx, waiter, server_side=True,
                                   call_connection_made=True,
                                   ssl_handshake_timeout=SERVER_HANDSHAKE_TIMEOUT_S)
        transport.set_protocol(tls)
        tls.connection_made(transport)
        transport.resume_reading()
        try:
            await waiter
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the client refused us, or spoke too old a protocol
            record["error"] = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            self.front.write(record)
            return
        http = app.inner
        sslobj = http.transport.get_extra_info("ssl_object") if http is not None and http.transport else None
        record.update(ok=True, conn_id=getattr(http, "conn_id", None), alpn=sslobj.selected_alpn_protocol() if sslobj else None,
                      sni=getattr(sslobj, "sni", None),
                      version=sslobj.version() if sslobj else None,
                      session_reused=sslobj.session_reused if sslobj else None)
        self.front.write(record)


def read_handshakes(log_path: str | Path) -> list[dict]:
    """Complete lines of the handshake log of the request log at ``log_path``."""
    try:
        data = handshake_log_path(log_path).read_bytes()
    except FileNotFoundError:
        return []
    end = data.rfind(b"\n")
    return [json.loads(line) for line in data[:end + 1].splitlines() if line.strip()]
