"""Which hosts share a politeness slot, and so a fetch-list partition (``generate.partition_by``).

Politeness protects a *server*, and one server often answers for many host names: the
sub-domains of one site (``a.example.com``, ``b.example.com``), or unrelated names on one
shared-hosting address. With ``partition_by = 'host'`` (the default) every host name is its
own slot; with ``'domain'`` the names of one registered domain (Public Suffix List) share
one, with ``'ip'`` the names that resolve to one address do. Generate puts hosts sharing a
key in one partition (cycles/tables/assign.py) and the fetch worker gives them one
in-flight request and one spacing between them (cycles/fetch/frontier.py), so the server
sees the delay whatever name we ask it by.

Both compute the key here, from the host name and the config alone, so they agree:

- domain: tldextract's bundled snapshot of the Public Suffix List (ICANN section, never
  downloaded); a name with no registered domain (an IP literal, ``localhost``, a bare
  suffix) is its own key;
- ip: the address ``fetch.resolve`` pins the name to (test webs, split-horizon set-ups).
  The host DB does not record resolved addresses yet, so a name not pinned there is its
  own key — the ``'host'`` behaviour, never a shared slot by guess.
"""

from __future__ import annotations

import functools
import ipaddress

from cycles.config import Config


@functools.cache
def _registered_domain_extractor():
    import tldextract

    # suffix_list_urls=() and cache_dir=None: the snapshot inside the package, no network, no disk.
    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=False)


@functools.lru_cache(maxsize=1 << 16)
def registered_domain(host: str) -> str:
    """The host's registered domain (``a.b.example.co.uk`` → ``example.co.uk``), or the host
    itself when it has none (an IP literal, a single label, a public suffix)."""
    name = host.strip("[]")
    try:
        ipaddress.ip_address(name)
        return host
    except ValueError:
        pass
    found = _registered_domain_extractor()(name)
    if found.domain and found.suffix:
        return f"{found.domain}.{found.suffix}"
    return host


def slot_key(host: str, config: Config) -> str:
    """The key of the politeness slot ``host`` shares (``generate.partition_by``)."""
    by = config.generate.partition_by
    if by == "domain":
        return registered_domain(host)
    if by == "ip":
        address = config.fetch.resolve.get(host)
        return f"ip:{address}" if address else host
    return host


def slot_keys(hosts, config: Config) -> dict[str, str]:
    """host → slot key for each host."""
    return {host: slot_key(host, config) for host in hosts}
