"""Run the test web in a subprocess for tests, demos and benchmarks.

Example::

    from testweb.harness import TestWeb

    with TestWeb(hosts=20, pages=10, page_bytes=3000, special=True, max_seconds=300) as web:
        config.fetch.resolve = web.resolve_map()
        crawl(web.seeds(), config)
        fetched = web.requested_urls()
        assert web.expected_reachable() <= fetched
        assert not fetched & web.must_not_request()

With the optional kinds of hosts (the :mod:`testweb.web` doc describes them)::

    with TestWeb(hosts=5, traps=True, neardups=True, changing=True) as web:
        crawl(web.seeds(), config)
        assert set(web.good_pages("trap-calendar")) <= web.requested_urls()
        assert sum(web.is_trap(u) for u in web.requested_urls()) <= budget
        web.set_clock(advance=86400)          # a virtual day later
        ...

The server runs as ``python -m testweb serve ...`` (its own process, so it neither
shares the GIL with the crawler under test nor survives it: ``max_seconds`` bounds it even if
the test process is killed). The model (:class:`~testweb.web.Web`) is rebuilt here
from the same parameters, so the oracle answers without asking the server.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable

from cycles.errors import CrawlError
from testweb.model import CONTROL_IP, ROBOTS_AGENT
from testweb.web import Web


REPO_ROOT = Path(__file__).resolve().parents[1]
"""The folder holding the ``testweb`` and ``cycles`` packages."""


def _server_env() -> dict[str, str]:
    """The environment of the server process, with the repository root first on its
    ``PYTHONPATH``: ``testweb`` is not installed with the product (it is not in the wheel),
    so ``python -m testweb`` finds it only there, whatever the caller's working directory."""
    env = dict(os.environ)
    extra = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + extra if extra else "")
    return env


class TestWebError(CrawlError):
    """The test web server did not start, or died."""

    __test__ = False  # an error, not a test class, though pytest collects names starting "Test"


# --- a test server's process: the web's and the DNS server's (testweb/dns.py) -------------
def launch(cmd: list[str], stderr_path: Path, ready_path: Path, timeout_s: float, name: str) -> subprocess.Popen:
    """Start a server process and wait for its ready file (written atomically once it listens).
    If it exits first or is not ready within ``timeout_s``, it is stopped and TestWebError
    says why, with its stderr and the command."""
    with open(stderr_path, "wb") as err:
        process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=_server_env())
    deadline = time.monotonic() + timeout_s
    while not ready_path.exists():
        exited = process.poll() is not None
        if exited or time.monotonic() > deadline:
            why = (f"exited with {process.returncode} before it was ready" if exited
                   else f"not ready after {timeout_s:g} s")
            stop_process(process)
            raise TestWebError(f"{name} {why}; its stderr:\n{stderr_path.read_text(errors='replace')}\n"
                               f"command: {' '.join(cmd)}")
        time.sleep(0.02)
    return process


def stop_process(process: subprocess.Popen, timeout_s: float = 5.0) -> int:
    """SIGTERM, then SIGKILL after ``timeout_s``; returns the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def read_log(path: Path | None) -> list[dict]:
    """A server's JSON-lines log so far: complete lines only (the server may be midway
    through one); [] before the server made it."""
    try:
        data = path.read_bytes()
    except (AttributeError, FileNotFoundError):
        return []
    end = data.rfind(b"\n")
    return [json.loads(line) for line in data[:end + 1].splitlines() if line.strip()]

    __test__ = False


class TestWeb:
    """A running test web: start it with ``with`` (or :meth:`start`), stop it on exit.

    Parameters are those of :class:`~testweb.web.Web` plus:

    - ``port``: 0 picks a free port (the same on every host address);
    - ``max_seconds``: the server exits by itself after this long, whatever happens here;
    - ``workdir``: where the log, ready file and server stderr go; default a temporary
      folder removed on stop (the log is read into memory first, so :meth:`requests`
      still answers after the ``with`` block);
    - ``ready_timeout_s``: how long to wait for every socket to listen (an HTTPS web makes
      its hosts' TLS contexts first: ~10 s for 3,000 hosts on a loaded 2-core machine);
    - ``loop``: ``"asyncio"`` (default), ``"uvloop"`` (must be installed) or ``"auto"``
      (uvloop when installed). uvloop measured within noise of asyncio here: the time goes
      to Python code per request, not to the loop;
    - ``traps``, ``neardups``, ``changing``, ``hostile``, ``sitemaps``: add those kinds of hosts (all off by
      default); ``internal_port``: the port of the hostile hosts' internal service
      (:class:`~testweb.hostile.InternalService`);
    - ``https``, ``tls``, ``h2``, ``rtt_ms``, ``tls_port``, ``tls_dir``: HTTPS hosts, the bad-TLS
      hosts, per-host round trips, the TLS port (0: a free one) and the test CA's folder
      (default: the workdir's ``tls/``) — :mod:`testweb.tls`; :meth:`ca_file` is the CA to
      trust, :meth:`handshakes` the server's handshake log;
    - ``processes``: server processes, each serving a share of the hosts (testweb/server.py
      ``serve``); :meth:`cpu_seconds` is their CPU time together;
    - ``clock_start``, ``clock_rate``: the virtual clock at start (Unix seconds, default
      2024-01-01) and its speed in virtual seconds per real second (default 0: it moves only
      through :meth:`set_clock`).
    """

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, hosts: int = 20, pages: int = 10, page_bytes: int = 30_000,
                 special: bool = True, seed: int = 0, port: int = 0, max_seconds: float = 300.0,
                 workdir: str | Path | None = None, ready_timeout_s: float = 60.0,
                 loop: str = "asyncio", traps: bool = False, neardups: bool = False,
                 changing: bool = False, clock_start: float | None = None,
                 clock_rate: float = 0.0, hostile: bool = False, internal_port: int = 0,
                 sitemaps: bool = False, tail: bool = False, https: float = 0.0, tls: bool = False,
                 rtt_ms: tuple[float, float] = (0.0, 0.0), tls_port: int = 0,
                 tls_dir: str | Path | None = None, h2: float = 0.0, processes: int = 1):
        self.processes = processes
        self.params = dict(hosts=hosts, pages=pages, page_bytes=page_bytes, special=special,
                           seed=seed, traps=traps, neardups=neardups, changing=changing,
                           hostile=hostile, internal_port=internal_port, sitemaps=sitemaps, tail=tail,
                           https=https, tls=tls, rtt_ms=tuple(rtt_ms), h2=h2)
        self.requested_tls_port = tls_port
        self.tls_dir = tls_dir
        self.clock_start = clock_start
        self.clock_rate = clock_rate
        # Validate here too, so a bad parameter fails in the caller, not in a subprocess.
        Web(**self.params)
        self.requested_port = port
        self.max_seconds = max_seconds
        self.ready_timeout_s = ready_timeout_s
        self.loop = loop
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else None
        self.process: subprocess.Popen | None = None
        self.port = 0
        self.tls_port = 0
        self.web: Web | None = None
        self.ready: dict = {}
        self._final: list[dict] | None = None
        self._final_tls: list[dict] | None = None
        self._stderr_final = ""

    # Life cycle -------------------------------------------------------------------------
    def start(self) -> TestWeb:
        if self.process is not None:
            raise TestWebError("this TestWeb was already started; make a new one")
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="testweb-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.workdir / "requests.jsonl"
        self.ready_path = self.workdir / "ready.json"
        self.stderr_path = self.workdir / "server.stderr"
        for path in (self.log_path, self.ready_path):
            path.unlink(missing_ok=True)
        p = self.params
        cmd = [sys.executable, "-m", "testweb", "serve",
               "--hosts", str(p["hosts"]), "--pages", str(p["pages"]),
               "--page-bytes", str(p["page_bytes"]), "--seed", str(p["seed"]),
               "--port", str(self.requested_port), "--log", str(self.log_path),
               "--ready-file", str(self.ready_path), "--max-seconds", str(self.max_seconds),
               "--loop", self.loop]
        if self.processes != 1:
            cmd += ["--processes", str(self.processes)]
        if not p["special"]:
            cmd.append("--no-special")
        cmd += [f"--{kind}" for kind in ("traps", "neardups", "changing", "hostile", "sitemaps") if p[kind]]
        if p["tail"]:
            cmd.append("--tail")
        if p["internal_port"]:
            cmd += ["--internal-port", str(p["internal_port"])]
        if p["https"]:
            cmd += ["--https", repr(float(p["https"]))]
        if p["tls"]:
            cmd.append("--tls")
        if p["h2"]:
            cmd += ["--h2", repr(float(p["h2"]))]
        if any(p["rtt_ms"]):
            cmd += ["--rtt-ms", "{:g}-{:g}".format(*p["rtt_ms"])]
        if p["https"] or p["tls"]:
            cmd += ["--tls-port", str(self.requested_tls_port)]
            if self.tls_dir is not None:
                cmd += ["--tls-dir", str(self.tls_dir)]
        if self.clock_start is not None:
            cmd += ["--clock-start", repr(float(self.clock_start))]
        if self.clock_rate:
            cmd += ["--clock-rate", repr(float(self.clock_rate))]
        try:
            self.process = launch(cmd, self.stderr_path, self.ready_path, self.ready_timeout_s, "test web server")
        except TestWebError:
            self.stop()  # reads what the log holds, removes a temporary workdir
            raise
        self.ready = json.loads(self.ready_path.read_text())
        self.port = self.ready["port"]
        self.tls_port = self.ready.get("tls_port", 443)
        self.web = Web(**self.params, port=self.port, tls_port=self.tls_port)
        self.web.clock.set(t=self.ready["clock"]["t"], rate=self.ready["clock"]["rate"])
        return self

    def stop(self, timeout_s: float = 5.0) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout_s``; returns the server's exit code.
        Reads the log into memory and removes a temporary workdir."""
        code = stop_process(self.process, timeout_s) if self.process is not None else None
        if self._final is None and self.workdir is not None:
            self._stderr_final = self.stderr()
            self._final = self._read_log()
            from testweb.tls import read_handshakes

            self._final_tls = read_handshakes(self.log_path)
            if self._own_workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
        return code

    def __enter__(self) -> TestWeb:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the server's processes so far (all of them, with
        ``processes`` > 1; a benchmark subtracts two readings)."""
        pids = self.ready.get("pids") or [self.process.pid]
        total = 0.0
        for pid in pids:
            try:
                total += _cpu_seconds(pid)
            except (FileNotFoundError, ProcessLookupError):
                pass
        return total

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait(self, timeout_s: float) -> int:
        """Wait for the server to exit by itself (``max_seconds``); returns its exit code."""
        return self.process.wait(timeout_s)

    def stderr(self) -> str:
        if self._final is not None:
            return self._stderr_final
        try:
            return self.stderr_path.read_text(errors="replace")
        except (AttributeError, FileNotFoundError):
            return ""

    # What the crawler needs -----------------------------------------------------------
    def _model(self) -> Web:
        if self.web is None:
            raise TestWebError("the test web is not started; use `with TestWeb(...) as web:`")
        return self.web

    def seeds(self) -> list[str]:
        """The ``/`` of every host (regular first, then special)."""
        return self._model().seeds()

    def resolve_map(self) -> dict[str, str]:
        """Host name -> loopback address (``config.fetch.resolve``)."""
        return self._model().resolve_map()

    def crawl_config(self):
        """A polite default crawler config pointed at this web: its host names resolve to
        their loopback addresses, and the timeouts are short enough that the web's slow
        paths (``/drip``) do not hold a test or benchmark for the production values."""
        from cycles.config import Config

        config = Config()
        config.fetch.resolve = dict(self.resolve_map())
        # The test web is on loopback, which the fetcher refuses by default (SSRF guard).
        config.fetch.allowed_networks = ["127.0.0.0/8"]
        config.fetch.timeout_s = 10.0
        config.fetch.low_speed_time_s = 3
        config.generate.max_urls_per_host = 1000
        config.db.buckets = 4
        if self.ca_file() is not None and hasattr(config.fetch, "ca_bundle"):
            config.fetch.ca_bundle = self.ca_file()
        return config

    def ca_file(self) -> str | None:
        """The test CA's certificate (PEM) when the web has HTTPS hosts, else None."""
        return self.ready.get("ca_file")

    def handshakes(self) -> list[dict]:
        """The server's TLS handshake log so far (fields: the :mod:`testweb.tls` doc)."""
        from testweb.tls import read_handshakes

        if self._final_tls is not None:
            return list(self._final_tls)
        return read_handshakes(self.log_path) if self.workdir is not None else []

    def curl_resolve(self) -> list[str]:
        """The resolve map as ``CURLOPT_RESOLVE`` entries (``name:port:address``), the TLS
        port's too when the web has HTTPS hosts."""
        ports = [self.port] + ([self.tls_port] if self.ca_file() else [])
        return [f"{name}:{port}:{ip}" for name, ip in self.resolve_map().items() for port in ports]

    def url(self, host: str, target: str = "/") -> str:
        """Absolute URL of ``target`` on ``host`` (a full name or a short one: ``h3``, ``odd``)."""
        if "." not in host:
            host = f"{host}.web.test"
        return self._model().url(host, target)

    # What the server saw --------------------------------------------------------------
    def _read_log(self) -> list[dict]:
        return read_log(getattr(self, "log_path", None))

    def requests(self) -> list[dict]:
        """Every request the server logged so far, in order (see ``server.py`` for fields)."""
        if self._final is not None:
            return list(self._final)
        return self._read_log()

    def requested_urls(self, requests: Iterable[dict] | None = None, robots: bool = False) -> set[str]:
        """Absolute URLs requested (as the oracle spells them), robots.txt files left out
        unless ``robots``. Comparable with :meth:`expected_reachable` and
        :meth:`must_not_request`."""
        from testweb.model import canonical_target

        web = self._model()
        out = set()
        for r in self.requests() if requests is None else requests:
            if r["host"] is None or r["method"] not in ("GET", "HEAD"):
                continue
            target = canonical_target(r["path"])
            if not robots and target.partition("?")[0] in ("/robots.txt", "/robots-real.txt"):
                continue
            out.add(web.origin(r["host"], r.get("scheme", "http")) + target)
        return out

    # The oracle -------------------------------------------------------------------------
    def expected_reachable(self, seeds: Iterable[str] | None = None, agent: str = ROBOTS_AGENT,
                           max_depth: int | None = None) -> set[str]:
        """URLs a polite crawler must request from ``seeds`` (default: all seeds)."""
        return self._model().expected_reachable(seeds, agent, max_depth)

    def must_not_request(self, agent: str = ROBOTS_AGENT) -> set[str]:
        """URLs a polite crawler must never request."""
        return self._model().must_not_request(agent)

    # The oracle of the optional kinds (see Web for each) --------------------------------
    def is_trap(self, url: str) -> bool:
        return self._model().is_trap(url)

    def good_pages(self, host: str) -> list[str]:
        return self._model().good_pages(host)

    def trap_hosts(self) -> list[str]:
        return self._model().trap_hosts()

    def neardup_pairs(self) -> list[tuple[str, str, bool, str]]:
        return self._model().neardup_pairs()

    def exact_duplicate_groups(self) -> list[set[str]]:
        return self._model().exact_duplicate_groups()

    def mirror_hosts(self) -> dict[str, str]:
        return self._model().mirror_hosts()

    def change_period(self, url: str) -> float | None:
        return self._model().change_period(url)

    def version_at(self, url: str, t: float) -> int:
        return self._model().version_at(url, t)

    def change_kind(self, url: str) -> str:
        return self._model().change_kind(url)

    def changing_pages(self) -> list[str]:
        return self._model().changing_pages()

    # The virtual clock ----------------------------------------------------------------
    def _control(self, query: str = "") -> dict:
        self._model()
        conn = http.client.HTTPConnection(CONTROL_IP, self.port, timeout=10)
        try:
            conn.request("GET", "/__clock" + (f"?{query}" if query else ""))
            response = conn.getresponse()
            body = response.read().decode()
        finally:
            conn.close()
        if response.status != 200:
            raise TestWebError(f"test web clock control answered {response.status}: {body.strip()}")
        return json.loads(body)

    def clock(self) -> float:
        """The server's virtual time now (Unix seconds)."""
        return self._control()["t"]

    def set_clock(self, t: float | None = None, *, advance: float | None = None,
                  rate: float | None = None, offset: float | None = None) -> float:
        """Set the server's virtual clock to ``t``, move it on by ``advance`` seconds and/or
        make it run at ``rate``; returns the new virtual time. ``offset=S`` makes it the
        real time plus ``S`` at rate 1, in step with the crawler's ``cycles.clock.now()``
        under ``CRAWL_CLOCK_OFFSET_S=S``. The server has applied it when this returns
        (requests sent afterwards see it), and the test side's model follows, so
        :meth:`Web.page` answers as the server does."""
        query = "&".join(f"{name}={float(value)!r}" for name, value in
                         (("t", t), ("advance", advance), ("rate", rate), ("offset", offset))
                         if value is not None)
        state = self._control(query)
        self.web.clock.set(t=state["t"], rate=state["rate"])
        return state["t"]


def bench(page_bytes: int = 30_000, seconds: float = 5.0, connections: int = 32, hosts: int = 64,
          pages: int = 200, loop: str = "asyncio", https: float = 0.0, h2: float = 0.0,
          reuse: bool = True) -> dict:
    """Measure how many pages per second the server answers over keep-alive connections.

    A pycurl multi loop keeps ``connections`` transfers in flight, each handle walking the
    pages of one host so its connection is reused. Returns requests/s (wall clock), the
    server's CPU seconds over the run (from /proc) and pages per server CPU second, the
    figure that says what one core of server gives. ``https``/``h2``: that share of the hosts
    over TLS (each connection one handshake, then keep-alive) / HTTP/2 (testweb/tls.py);
    ``reuse=False``: a new connection (and a full TLS handshake, no session resumption) for
    every request, which measures what a connection costs the server.
    """
    import pycurl

    with TestWeb(hosts=hosts, pages=pages, page_bytes=page_bytes, special=False,
                 max_seconds=seconds + 120, loop=loop, https=https, h2=h2) as web:
        resolve = web.curl_resolve()
        received = [0]

        def sink(data: bytes) -> None:
            received[0] += len(data)

        multi = pycurl.CurlMulti()
        handles = []
        for c in range(connections):
            h = pycurl.Curl()
            h.setopt(pycurl.RESOLVE, resolve)
            h.setopt(pycurl.WRITEFUNCTION, sink)
            h.setopt(pycurl.USERAGENT, "testweb-bench")
            if web.ca_file():
                h.setopt(pycurl.CAINFO, web.ca_file())
            if not reuse:
                h.setopt(pycurl.FORBID_REUSE, 1)
                h.setopt(pycurl.SSL_SESSIONID_CACHE, 0)
            h.host = f"h{c % hosts}.web.test"
            h.k = 0
            handles.append(h)

        in_flight = [0]

        def arm(h) -> None:
            h.setopt(pycurl.URL, web.url(h.host, f"/p/{h.k % pages}.html"))
            h.k += 1
            multi.add_handle(h)
            in_flight[0] += 1

        cpu0 = _cpu_seconds(web.process.pid)
        t0 = time.monotonic()
        end = t0 + seconds
        done = errors = 0
        for h in handles:
            arm(h)
        while in_flight[0]:
            multi.select(0.5)
            while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
                pass
            while True:
                queued, ok, failed = multi.info_read()
                stop = time.monotonic() >= end
                for h in ok + [f[0] for f in failed]:
                    multi.remove_handle(h)
                    in_flight[0] -= 1
                    if not stop:
                        arm(h)
                done += len(ok)
                errors += len(failed)
                if not queued:
                    break
        elapsed = time.monotonic() - t0
        cpu = _cpu_seconds(web.process.pid) - cpu0
        for h in handles:
            h.close()
        multi.close()
        return {
            "page_bytes": page_bytes, "connections": connections, "seconds": round(elapsed, 2),
            "requests": done, "errors": errors, "body_bytes": received[0],
            "pages_per_s": round(done / elapsed), "server_cpu_s": round(cpu, 2),
            "pages_per_server_cpu_s": round(done / cpu) if cpu else None,
            "loop": web.ready.get("loop"), "https": https, "h2": h2, "reuse": reuse,
            "server_cpu_ms_per_request": round(1000 * cpu / done, 3) if done else None,
        }


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
