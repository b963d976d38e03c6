"""What dedup keeps between updates (``dedup/state.json`` beside the crawl DB): known mirrors
and variant parameters. Written by update (cycles/update/dedup.py), read by discovery inside
the fetch (:func:`learned_by_host`): a table two stages share, so it lives in the tables layer.
"""

from __future__ import annotations

from cycles.storage.store import Store

STATE_FILE = ("dedup", "state.json")
"""Beside the crawl DB: ``{"segment": the last segment counted, "mirrors": {mirror: origin},
"params": [[host, param, same, differs, learned], ...]}``. Small: one entry per mirror host
and per (host, query parameter) seen on a copy, never per page. Written by update under the
crawl DB lock; ``segment`` makes a retried update count its evidence once."""


def read_state(store: Store) -> dict:
    path = store.path(*STATE_FILE)
    state = store.read_json(path) if store.exists(path) else {}
    return {"segment": state.get("segment"), "mirrors": dict(state.get("mirrors", {})),
            "params": [list(p) for p in state.get("params", [])]}


def write_state(store: Store, state: dict) -> None:
    store.write_json(store.path(*STATE_FILE), state)


def learned_by_host(store: Store) -> dict[str, frozenset[str]]:
    """host → the variant parameters learned on it (for discovery inside the fetch, which
    must not fetch a new URL that update would set aside)."""
    by_host: dict[str, set[str]] = {}
    for host, param, _, _, learned in read_state(store)["params"]:
        if learned:
            by_host.setdefault(host, set()).add(param)
    return {host: frozenset(params) for host, params in by_host.items()}
