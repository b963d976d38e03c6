"""Who the crawler says it is: a warning when it would crawl the public web under the
placeholder User-Agent that ships as the default.

The default ``fetch.user_agent`` names a contact URL under ``example.invalid`` (RFC 6761:
it cannot exist), so that a site owner who sees it cannot reach whoever runs the crawl.
That is fine against a test web on loopback, and worth one warning a run anywhere else.
The decision (:func:`placeholder_agent_hosts`) looks only at names and the config: no DNS
lookup, no packet.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Iterable

from cycles.tables import segment as seg
from cycles.config import Config, FetchConfig
from cycles.errors import StoreError
from cycles.storage.store import Store

log = logging.getLogger(__name__)

PLACEHOLDER_USER_AGENT = FetchConfig().user_agent
"""The default User-Agent; its contact URL is a placeholder."""

_warned = False
"""Warned already in this process: once a run, even when ``crawl cycle`` fetches many segments."""


def is_loopback_host(host: str, resolve: dict[str, str]) -> bool:
    """Whether ``host`` is this machine: ``localhost`` and its subdomains (RFC 6761 §6.3), a
    loopback address, or a name ``fetch.resolve`` maps to one (how test webs are reached)."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    address = resolve.get(host, resolve.get(name, name))
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def placeholder_agent_hosts(config: Config, hosts: Iterable[str], limit: int = 3) -> list[str]:
    """Up to ``limit`` hosts off this machine that would see the placeholder User-Agent
    (none when ``fetch.user_agent`` was changed)."""
    if config.fetch.user_agent != PLACEHOLDER_USER_AGENT:
        return []
    found: list[str] = []
    for host in hosts:
        if not is_loopback_host(host, config.fetch.resolve):
            found.append(host)
            if len(found) >= limit:
                break
    return found


def placeholder_agent_warning(config: Config, hosts: Iterable[str]) -> str | None:
    """The one-line warning for crawling ``hosts`` under the placeholder User-Agent, or None."""
    found = placeholder_agent_hosts(config, hosts)
    if not found:
        return None
    return (f"fetch.user_agent is the placeholder {PLACEHOLDER_USER_AGENT!r}, sent to hosts off this machine "
            f"({', '.join(found)}, ...); site owners cannot reach you: set fetch.user_agent to your crawler's "
            f"name and contact URL (in crawl.toml, or -s 'fetch.user_agent=mybot/1.0 (+https://example.org/bot)')")


def fetch_list_hosts(store: Store, segment: str) -> Iterable[str]:
    """The hosts of a segment's fetch list, file by file (read only when a warning may be due)."""
    for path in seg.files(store, segment, seg.FETCHLIST):
        yield from store.read_table(path, columns=["host"]).column("host").unique().to_pylist()


def warn_if_placeholder_agent(store: Store, config: Config, segment: str) -> None:
    """Log the placeholder User-Agent warning once a process, if this segment is due one."""
    global _warned
    if _warned or config.fetch.user_agent != PLACEHOLDER_USER_AGENT:
        return
    try:
        message = placeholder_agent_warning(config, fetch_list_hosts(store, segment))
    except StoreError:
        return  # a damaged fetch list: the partition that reads it stops with the fix (crawl abandon)
    if message is not None:
        _warned = True
        log.warning(message)
