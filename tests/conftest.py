"""Shared fixtures: a store in a temporary folder, and configs that point at a test web.

Every test web is started by the test that uses it, on its own loopback addresses, is
bounded in time (``max_seconds``) and is stopped when the test ends.
"""

from __future__ import annotations

import pytest

from cycles.config import Config
from cycles.store import Store


def config_for(web, **fetch) -> Config:
    """A polite default config that resolves the test web's host names to loopback."""
    config = Config()
    config.fetch.resolve = dict(web.resolve_map())
    config.fetch.processes = 2
    config.fetch.flush_s = 5.0
    # The test web's slow paths must not hold a test for the production timeouts.
    config.fetch.timeout_s = 10.0
    config.fetch.low_speed_time_s = 3
    config.generate.max_urls_per_host = 1000
    config.db.buckets = 4
    config.db.duckdb_memory_limit = "1GB"
    for key, value in fetch.items():
        setattr(config.fetch, key, value)
    return config


@pytest.fixture
def store(tmp_path) -> Store:
    return Store(tmp_path / "data")


def write_seeds(path, urls) -> str:
    path.write_text("\n".join(urls) + "\n")
    return str(path)
