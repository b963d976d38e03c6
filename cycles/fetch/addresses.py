"""Which addresses the fetcher may connect to: the SSRF guard's decision, and nothing else.

A crawler follows links and redirects written by strangers. Without a guard, a page on a
public host that links to ``http://169.254.169.254/`` (the cloud metadata service),
``http://localhost:8080/admin`` or ``http://10.0.0.5/`` makes the crawler fetch from inside
its own network and store the answer. So by default only *public* addresses are
connected to; ``fetch.allowed_networks`` (CIDRs) lets a private deployment or a test web
on loopback through.

The fetcher asks :func:`is_allowed` about the address libcurl is about to connect to
(``CURLOPT_OPENSOCKETFUNCTION``, cycles/fetch/transfer.py), not about the host name in the
URL: a DNS answer (or a ``fetch.resolve`` entry) cannot smuggle an internal address in,
and spellings such as ``0x7f.1``, ``2130706433`` or ``localhost`` are judged by the
address they reach. Redirects are requests of their own, so each hop is checked too.

Not public (blocked unless allowed): everything :attr:`ipaddress.IPv4Address.is_global`
says is not globally reachable — loopback, RFC 1918 private, link-local (169.254/16, the
metadata address), CGNAT shared space (100.64/10), ``0.0.0.0/8``, benchmarking,
documentation and reserved ranges, the IPv6 equivalents (``::1``, ``fe80::/10``,
``fc00::/7``, ...) — and multicast, which Python counts as global. An IPv6 address that
carries an IPv4 one (IPv4-mapped ``::ffff:a.b.c.d``, 6to4 ``2002::/16``, NAT64
``64:ff9b::/96``) is judged by the IPv4 address it carries too. This module does no I/O.
"""

from __future__ import annotations

import ipaddress
from typing import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: the last 32 bits are an IPv4 address


def parse_networks(cidrs: Iterable[str]) -> tuple[Network, ...]:
    """The networks of ``fetch.allowed_networks``; ValueError naming the bad entry.

    ``"127.0.0.0/8"``, ``"10.1.2.3"`` (one address), ``"fd00::/8"``. Host bits set
    (``10.0.0.1/8``) are an error: such an entry is usually a typo for another network."""
    out = []
    for cidr in cidrs:
        if not isinstance(cidr, str):
            raise ValueError(f"{cidr!r} is not a string; write a CIDR such as '10.0.0.0/8'")
        try:
            out.append(ipaddress.ip_network(cidr.strip(), strict=True))
        except ValueError as exc:
            raise ValueError(f"{cidr!r} is not a network in CIDR notation ({exc}); "
                             "write e.g. '10.0.0.0/8' or 'fd00::/8'") from None
    return tuple(out)


def is_public(ip: Address) -> bool:
    """Is ``ip`` a public unicast address (module doc)?"""
    if ip.is_multicast or not ip.is_global:
        return False
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None and not is_public(embedded):
            return False
    return True


def is_allowed(ip: str | Address, allowed_networks: Iterable[Network] = ()) -> bool:
    """May the fetcher connect to ``ip``? Public addresses always; others only inside one of
    ``allowed_networks`` (:func:`parse_networks`). An IPv4-mapped IPv6 address is matched
    against IPv4 networks as the IPv4 address it is. A string that is not an address: no."""
    try:
        address = ipaddress.ip_address(ip.split("%", 1)[0] if isinstance(ip, str) else ip)
    except ValueError:
        return False
    candidates = [address]
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        candidates.append(mapped)
    for network in allowed_networks:
        if any(c.version == network.version and c in network for c in candidates):
            return True
    return is_public(address) and (mapped is None or is_public(mapped))


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None
