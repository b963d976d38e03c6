"""Separate "hosts" on one machine: network namespaces on a private bridge (iproute2).

A cluster test must show that the machines share only S3. On one machine, a process of
each machine runs in a network namespace of its own (``ip netns``), with its own address on
a bridge the test makes, and a worker also in a private mount namespace whose ``/tmp`` (and
any other folder named) is an empty tmpfs, and a UTS namespace with its own host name: it
cannot read or write the coordinator's files, and its S3 lock records name its own host.

The network, and why it keeps the network rule (traffic only to loopback or to namespaces
the test made):

- the bridge has the first address of a /24 in 10.0.0.0/8 that no route or address of this
  machine uses (:func:`free_subnet`; one ``0.0.0.0/0`` default route is not counted); the root namespace (the coordinator, the test web)
  reaches the namespaces over it, and no namespace has a default route: a packet to any
  other address has no route and is never sent;
- the test web listens on loopback addresses of the root namespace (``127.1.0.x``,
  testweb/model.py). A namespace that must reach it gets a route for ``127.1.0.0/16`` via
  the bridge, and loopback addresses stop being martian on its link and on the bridge
  (``route_localnet``, both interfaces the test made); its own ``local 127.0.0.0/8`` route
  gives way to ``local 127.0.0.1`` so that those addresses leave by the link. The web's
  request log then shows each request's client address: the worker that sent it.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), ``ip`` (Debian's iproute2) and ``unshare``
(util-linux). Everything is removed on exit, the processes started in the namespaces first
(the caller stops them): ``ip netns del`` and ``ip link del`` of the bridge and the veths.
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import subprocess
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

SUBNETS = [ipaddress.ip_network(f"10.{a}.{b}.0/24") for a in (231, 232, 233) for b in range(0, 256, 7)]
"""Candidate subnets of the test bridge: private (RFC 1918) and, on most machines, unused."""

WEB_ROUTE = "127.1.0.0/16"
"""The test web's regular hosts (testweb/model.py regular_ip)."""

TMPFS_SIZE = "2g"
"""Upper bound of each private tmpfs (RAM is used only as files are written)."""

_PRIVATE_HOST_SCRIPT = """set -e
hostname "$1"
shift
while [ "$1" != "--" ]; do
    mount -t tmpfs -o size=%s,mode=0755 crawl-private "$1"
    shift
done
shift
mkdir -p "$1"
cd "$1"
shift
exec "$@"
""" % TMPFS_SIZE


class NetnsError(RuntimeError):
    """A namespace or link could not be made."""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run ``ip ARGS``; raise :class:`NetnsError` with its stderr when it fails."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def netns_available() -> str | None:
    """None when :class:`TestNet` can work here, else why not (for a test's skip)."""
    if os.geteuid() != 0:
        return "needs root for ip netns and unshare"
    for tool in ("ip", "unshare", "mount", "hostname"):
        if shutil.which(tool) is None:
            return f"needs {tool} (apt-get install iproute2 util-linux hostname)"
    return None


def used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine's root namespace has an address or a route in."""
    nets = []
    for args in (("-4", "-o", "addr", "show"), ("-4", "route", "show", "table", "all")):
        for line in ip(*args).stdout.splitlines():
            for word in line.split():
                if word[:1].isdigit() and ("." in word):
                    try:
                        nets.append(ipaddress.ip_network(word, strict=False))
                    except ValueError:
                        pass
    return nets


def free_subnet() -> ipaddress.IPv4Network:
    """One of :data:`SUBNETS` that overlaps nothing this machine uses, chosen at random: two
    test runs starting at once on one machine (parallel CI jobs) would otherwise both take the
    first free one."""
    used = used_networks()
    free = [net for net in SUBNETS if not any(net.overlaps(u) for u in used if u.prefixlen > 0)]
    if not free:
        raise NetnsError(f"no free subnet among {len(SUBNETS)} candidates in 10.231-233.0.0/16")
    return random.choice(free)


@dataclass
class Host:
    """One namespace: its name (``ip netns``), its address on the bridge, its veth's root end."""

    name: str
    address: str
    veth: str

    def prefix(self) -> list[str]:
        """Command prefix that runs a command in this namespace."""
        return ["ip", "netns", "exec", self.name]


@dataclass
class TestNet:
    """A bridge with a namespace per host name; see the module doc. Use :func:`host_network`."""

    __test__ = False  # not a pytest test class

    subnet: ipaddress.IPv4Network
    tag: str
    bridge: str
    hosts: dict[str, Host] = field(default_factory=dict)

    @property
    def root_address(self) -> str:
        """The root namespace's address on the bridge (the coordinator's, the web's gateway)."""
        return str(self.subnet.network_address + 1)

    def add(self, name: str) -> Host:
        """A namespace with its own address (no default route), its loopback up."""
        host = Host(f"crawl-{self.tag}-{name}", str(self.subnet.network_address + 2 + len(self.hosts)),
                    f"cv{self.tag}{len(self.hosts)}")
        self.hosts[name] = host
        ip("netns", "add", host.name)
        ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.name)
        ip("link", "set", host.veth, "master", self.bridge, "up")
        ip("-n", host.name, "addr", "add", f"{host.address}/{self.subnet.prefixlen}", "dev", "eth0")
        ip("-n", host.name, "link", "set", "eth0", "up")
        ip("-n", host.name, "link", "set", "lo", "up")
        return host

    def route_web(self, name: str) -> None:
        """Let host ``name`` reach the test web on the root namespace's loopback (module doc)."""
        host = self.hosts[name]
        subprocess.run(host.prefix() + ["sh", "-c", "echo 1 > /proc/sys/net/ipv4/conf/eth0/route_localnet"],
                       check=True)
        ip("-n", host.name, "route", "del", "127.0.0.0/8", "dev", "lo", "table", "local")
        ip("-n", host.name, "route", "add", WEB_ROUTE, "via", self.root_address, "dev", "eth0")

    def private_host(self, name: str, hide: Sequence[str | Path], workdir: str | Path) -> list[str]:
        """Command prefix: in host ``name``'s network namespace, in a private mount and UTS
        namespace with host name ``name``, an empty tmpfs over each folder of ``hide`` (give
        ``/tmp`` to hide every temporary file), then ``cd workdir`` (made inside)."""
        folders = [str(Path(f)) for f in hide]
        return (self.hosts[name].prefix()
                + ["unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", _PRIVATE_HOST_SCRIPT,
                   "crawl-host", name, *folders, "--", str(workdir)])

    def close(self) -> None:
        for host in self.hosts.values():
            ip("link", "del", host.veth, check=False)
            ip("netns", "del", host.name, check=False)
        ip("link", "del", self.bridge, check=False)


@contextmanager
def host_network(names: Iterable[str]) -> Iterator[TestNet]:
    """A :class:`TestNet` with a namespace for each of ``names``, removed on exit."""
    why = netns_available()
    if why is not None:
        raise NetnsError(f"cannot make the test network: {why}")
    tag = uuid.uuid4().hex[:6]
    net = TestNet(free_subnet(), tag, f"cb{tag}")
    try:
        ip("link", "add", net.bridge, "type", "bridge")
        ip("addr", "add", f"{net.root_address}/{net.subnet.prefixlen}", "dev", net.bridge)
        ip("link", "set", net.bridge, "up")
        # The web's replies leave the root namespace from 127.1.0.x over the bridge (module doc).
        Path(f"/proc/sys/net/ipv4/conf/{net.bridge}/route_localnet").write_text("1\n")
        for name in names:
            net.add(name)
        yield net
    finally:
        net.close()
