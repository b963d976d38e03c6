"""The named-host HTTPS test web: the physics of the real internet, on loopback.

One context manager starts the three parts and hands out the command prefix that runs a
crawler inside them with its normal resolver and CA store:

- the test web (:class:`~testweb.harness.TestWeb`) with HTTPS on a fraction of the hosts,
  HTTP/2 on half of those (:data:`H2_SHARE`), the bad-TLS hosts and per-host round trips
  (:mod:`testweb.tls`, :mod:`testweb.http2`);
- its DNS server (:class:`~testweb.dns.TestDNS`): every host name, IDN names, names that
  answer NXDOMAIN or SERVFAIL or never, per-name latency and TTL (:mod:`testweb.dns`);
- the mount namespace (:func:`~testweb.namespace.crawl_namespace`): ``/etc/resolv.conf``
  names the DNS server, the system CA bundle also holds the test CA.

Example (the crawler is a subprocess; the prefix wraps any command)::

    with RealWeb(hosts=300, https=0.9, rtt_ms=(20, 300)) as real:
        config = real.crawl_config()           # the defaults, loopback allowed
        subprocess.run(real.prefix + [sys.executable, "-m", "cycles", "fetch", ...])
        real.dns.queries("h1.web.test")        # what the DNS server was asked
        real.web.requests()                    # what the HTTP(S) server saw

The crawler must not be given ``fetch.resolve`` or a CA option: the point is that it finds
the test web the way it finds the real one. Needs root (``unshare -m``, port 53).
"""

from __future__ import annotations

import tempfile
from contextlib import ExitStack
from pathlib import Path

from testweb.dns import FAILING_NAMES, TestDNS, zone_for
from testweb.harness import TestWeb
from testweb.namespace import SYSTEM_RESOLVER_OPTIONS, crawl_namespace

H2_SHARE = 0.5
"""Share of the good HTTPS regular hosts that offer HTTP/2 (ALPN ``h2``) by default. On the
real web most requests of popular sites go over HTTP/2 or later (the HTTP Archive's Web
Almanac, HTTP chapters 2021-2022), while many long-tail servers (shared hosting, old Apache
and IIS set-ups) still answer HTTP/1.1 only, and a crawler reaches far more of the second
kind than a browser does. Half of them puts both paths, and the switch between them, in every
test, benchmark and demo run on this web; ``h2=0`` gives the HTTP/1.1-only web."""


class RealWeb:
    """The test web, its DNS server and the namespace prefix (module doc).

    ``https``, ``tls``, ``rtt_ms``, ``h2``: as :class:`TestWeb`'s (``h2`` by default
    :data:`H2_SHARE`, where TestWeb offers no HTTP/2); ``dns_latency_ms``: each name's
    answer delay is drawn in this range (per name, fixed); ``ttl_s``: the records' TTL.
    Other keyword arguments go to :class:`TestWeb`."""

    __test__ = False

    def __init__(self, hosts: int = 300, *, https: float = 0.9, tls: bool = True, h2: float = H2_SHARE,
                 rtt_ms: tuple[float, float] = (20.0, 300.0), dns_latency_ms: tuple[float, float] = (10.0, 200.0),
                 ttl_s: int = 300, workdir: str | Path | None = None, max_seconds: float = 900.0,
                 resolver_options: str = SYSTEM_RESOLVER_OPTIONS, **web_kw):
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="realweb-"))
        self.web = TestWeb(hosts=hosts, https=https, tls=tls, h2=h2, rtt_ms=rtt_ms, max_seconds=max_seconds,
                           workdir=self.workdir / "web", **web_kw)
        self.dns_latency_ms = dns_latency_ms
        self.ttl_s = ttl_s
        self.resolver_options = resolver_options
        """resolv.conf ``options`` in the namespace: glibc's defaults (testweb/namespace.py)."""
        self.max_seconds = max_seconds
        self.dns: TestDNS | None = None
        self.prefix: list[str] = []
        self._stack = ExitStack()

    def __enter__(self) -> RealWeb:
        try:
            self._stack.enter_context(self.web)
            zone = zone_for(self.web.resolve_map(), seed=self.web.params["seed"], latency_ms=self.dns_latency_ms,
                            ttl_s=self.ttl_s)
            self.dns = self._stack.enter_context(TestDNS(zone, workdir=self.workdir / "dns",
                                                         max_seconds=self.max_seconds))
            ca = self.web.ca_file()
            self.prefix = self._stack.enter_context(crawl_namespace(
                self.dns.address, ca_pem=Path(ca).read_bytes() if ca else None, names=zone["names"],
                workdir=self.workdir / "namespace", resolver_options=self.resolver_options))
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()
        if self._own_workdir:
            import shutil

            shutil.rmtree(self.workdir, ignore_errors=True)

    def crawl_config(self):
        """The default crawler config with only loopback allowed (the SSRF guard refuses it
        otherwise): no ``fetch.resolve``, no CA option, every other setting its default."""
        from cycles.config import Config

        config = Config()
        config.fetch.allowed_networks = ["127.0.0.0/8"]
        return config

    def failing_urls(self, per_name: int = 5) -> list[str]:
        """``per_name`` page URLs on each name that does not resolve (NXDOMAIN, SERVFAIL, none)."""
        return [f"http://{name}/p/{k}.html" for name in FAILING_NAMES for k in range(per_name)]

    def bad_tls_hosts(self) -> list[str]:
        """Names of the hosts whose TLS must stop a verifying client (expired, wrong name,
        self-signed, stalled handshake, TLS 1.0 only)."""
        from testweb.tls import BAD_MODES, host_name

        return sorted(host_name(mode) for mode in BAD_MODES) if self.web.params.get("tls") else []

    def completed_to_bad_tls(self, requests: list[dict]) -> int:
        """Requests of ``requests`` (the server's log) answered over HTTPS by a bad-TLS host."""
        bad = set(self.bad_tls_hosts())
        return sum(1 for r in requests if r["host"] in bad and r.get("scheme") == "https")
