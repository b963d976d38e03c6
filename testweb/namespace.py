"""Run a crawler inside the test web's DNS and CA store, with no test-only code path.

A crawler under test must resolve names with its normal resolver and verify certificates
against its normal CA store, or the test proves nothing about the configuration users run.
So instead of pointing the crawler at the test web (``fetch.resolve``, a CA option), we
point the *system* at it, in a private mount namespace of the command alone:

- ``/etc/resolv.conf`` is bind-mounted over by one naming the test DNS server
  (:mod:`testweb.dns`): glibc's getaddrinfo, dnspython, c-ares and Twisted's threaded
  resolver all read it;
- ``/etc/ssl/certs/ca-certificates.crt``, the system CA bundle, is bind-mounted over by the
  system bundle plus the test CA: the libcurl in the pycurl wheel reads exactly that file
  (and ignores ``SSL_CERT_FILE`` / ``CURL_CA_BUNDLE``), as do OpenSSL-based clients on Debian.

``unshare -m`` (util-linux) makes the namespace; mounts made inside it are private to it
(``--propagation private``), so the host system and other tests never see them. It needs
root (CAP_SYS_ADMIN); CI runs as root. The command is wrapped, not forked from Python, so a
benchmark can run any crawler (ours, Scrapy) the same way::

    with crawl_namespace(dns.address, ca_pem=ca.pem) as prefix:
        subprocess.run(prefix + [sys.executable, "-m", "cycles", "fetch", ...])

Before it hands out the prefix it checks that name lookups really reach DNS
(:func:`check_name_service`): a ``hosts:`` line in ``/etc/nsswitch.conf`` that stops before
``dns``, a test name in ``/etc/hosts`` or a running nscd (whose cache lives outside the
namespace) would answer without asking the test server.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

RESOLV_CONF = Path("/etc/resolv.conf")
SYSTEM_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
"""Debian's system bundle: the pycurl wheel's libcurl is built to read this file."""

NSSWITCH = Path("/etc/nsswitch.conf")
HOSTS = Path("/etc/hosts")
NSCD_SOCKET = Path("/var/run/nscd/socket")

RESOLVER_OPTIONS = "options timeout:1 attempts:2"
"""resolv.conf options in the namespace: a query unanswered after 1 s is sent once more, so
a name that never answers (``dns-timeout.web.test``) costs a resolver 2 s, not glibc's
default 10 s, and tests stay short. dnspython and glibc both read these. Benchmarks use
:data:`SYSTEM_RESOLVER_OPTIONS` instead (testweb/realweb.py)."""

SYSTEM_RESOLVER_OPTIONS = "options timeout:5 attempts:2"
"""glibc's defaults, written out: what a crawler meets on a machine whose resolv.conf sets
none. On a loaded 2-core machine 1 s was too short for answers of the test web's own
server (13 of 3,000 good names timed out in scripts/bench_fetch.py --real-web, load 8.6)."""

_SCRIPT = """set -e
mount --bind "$1" /etc/resolv.conf
if [ -n "$2" ]; then mount --bind "$2" /etc/ssl/certs/ca-certificates.crt; fi
shift 2
exec "$@"
"""


class NamespaceError(RuntimeError):
    """The namespace cannot be made, or name lookups would not reach the test DNS server."""


def check_name_service(names: Iterable[str] = ()) -> None:
    """Raise :class:`NamespaceError` when a lookup of ``names`` would not reach DNS (module doc)."""
    if NSSWITCH.exists():
        for line in NSSWITCH.read_text(errors="replace").splitlines():
            line = line.split("#", 1)[0].strip()
            if not line.startswith("hosts:"):
                continue
            sources = line.split(":", 1)[1].split()
            if "dns" not in sources:
                raise NamespaceError(f"{NSSWITCH} has '{line}': no 'dns' source, so names never reach the test "
                                     "DNS server; use 'hosts: files dns'")
            before = sources[:sources.index("dns")]
            stops = [s for s in before if s.startswith("[") and "return" in s.lower()]
            if stops or any(s not in ("files", "myhostname") and not s.startswith("[") for s in before):
                raise NamespaceError(f"{NSSWITCH} has '{line}': a source before 'dns' may answer or stop a "
                                     "lookup; use 'hosts: files dns'")
    wanted = {n.lower().rstrip(".") for n in names}
    if wanted and HOSTS.exists():
        for line in HOSTS.read_text(errors="replace").splitlines():
            fields = line.split("#", 1)[0].split()
            clash = wanted.intersection(f.lower() for f in fields[1:])
            if clash:
                raise NamespaceError(f"{HOSTS} names {sorted(clash)[0]}: lookups of it never reach the test DNS "
                                     "server; remove that line")
    if NSCD_SOCKET.exists():
        raise NamespaceError(f"nscd is running ({NSCD_SOCKET}): its cache is outside the namespace and answers "
                             "for it; stop nscd to run the crawler against the test DNS server")


def namespace_available() -> str | None:
    """None when :func:`crawl_namespace` can work here, else why not (for a test's skip)."""
    if os.geteuid() != 0:
        return "needs root for unshare -m and port 53"
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return "needs unshare and mount (util-linux)"
    if not RESOLV_CONF.exists():
        return f"{RESOLV_CONF} is missing: nothing to bind-mount over"
    return None


def resolv_conf_text(dns_address: str, options: str = RESOLVER_OPTIONS) -> str:
    return f"# the test web's DNS server (testweb/dns.py)\nnameserver {dns_address}\n{options}\n"


def ca_bundle_text(ca_pem: str | bytes | None) -> bytes:
    """The system bundle with ``ca_pem`` (the test CA, PEM) appended."""
    system = SYSTEM_CA_BUNDLE.read_bytes() if SYSTEM_CA_BUNDLE.exists() else b""
    extra = ca_pem.encode() if isinstance(ca_pem, str) else (ca_pem or b"")
    if system and not system.endswith(b"\n"):
        system += b"\n"
    return system + extra


@contextmanager
def crawl_namespace(dns_address: str, ca_pem: str | bytes | None = None, names: Iterable[str] = (),
                    workdir: str | Path | None = None, resolver_options: str = RESOLVER_OPTIONS) -> Iterator[list[str]]:
    """A command prefix that runs its command in a private mount namespace whose resolver
    asks ``dns_address`` and whose system CA bundle also trusts ``ca_pem`` (module doc).
    ``names`` are checked against ``/etc/hosts``. The files live in ``workdir`` (default: a
    temporary folder removed on exit)."""
    why = namespace_available()
    if why is not None:
        raise NamespaceError(f"cannot make the crawl namespace: {why}")
    check_name_service(names)
    own = workdir is None
    folder = Path(tempfile.mkdtemp(prefix="crawlns-")) if own else Path(workdir)
    folder.mkdir(parents=True, exist_ok=True)
    resolv = folder / "resolv.conf"
    resolv.write_text(resolv_conf_text(dns_address, resolver_options))
    bundle = ""
    if ca_pem:
        if not SYSTEM_CA_BUNDLE.exists():
            raise NamespaceError(f"{SYSTEM_CA_BUNDLE} is missing: install ca-certificates")
        path = folder / "ca-certificates.crt"
        path.write_bytes(ca_bundle_text(ca_pem))
        bundle = str(path)
    try:
        yield ["unshare", "--mount", "--propagation", "private", "sh", "-c", _SCRIPT, "crawl-namespace",
               str(resolv), bundle]
    finally:
        if own:
            shutil.rmtree(folder, ignore_errors=True)
