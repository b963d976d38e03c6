"""The TLS policy with the crawler's normal CA store: ``crawl fetch`` run inside the test
web's namespace (testweb/realweb.py), where the system bundle also holds the test CA and the
names resolve through the test DNS server. No ``fetch.ca_bundle``, no ``fetch.resolve``: the
same code path as on the real web. The good host verifies; every bad one fails with its reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from cycles.store import Store
from testweb import tls as tls_web
from testweb.harness import REPO_ROOT
from testweb.namespace import namespace_available
from testweb.realweb import RealWeb
from tests.fetch.test_fetch_support import make_segment

pytestmark = [pytest.mark.web,
              pytest.mark.skipif(namespace_available() is not None, reason=str(namespace_available()))]

def crawl_fetch(prefix: list[str], store: Store, segment: str) -> dict:
    """``crawl fetch SEGMENT`` in the namespace, loopback allowed and short timeouts, nothing
    else set (no CA bundle, no resolve map); returns the segment's stats/fetch.json."""
    sets = {"fetch.processes": 1, "fetch.allowed_networks": ["127.0.0.0/8"], "fetch.connect_timeout_s": 2.0,
            "fetch.timeout_s": 10.0, "fetch.follow_outlinks_depth": 0, "fetch.progress_s": 0.0}
    args = [arg for key, value in sets.items() for arg in ("--set", f"{key}={json.dumps(value)}")]
    result = subprocess.run(prefix + [sys.executable, "-m", "cycles", "--data", str(store.root), "-q", *args,
                                      "fetch", segment], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 0, result.stderr
    return json.loads((Path(store.root) / "segments" / segment / "stats" / "fetch.json").read_text())


def table(store: Store, segment: str, folder: str, key: str) -> dict[str, dict]:
    return {r[key]: r for r in pq.read_table(Path(store.root) / "segments" / segment / folder).to_pylist()}


REASON = {"expired": "expired", "wrong_name": "name_mismatch", "self_signed": "untrusted_issuer",
          "stall": "handshake_timeout", "tls10": "protocol_too_old"}


def test_the_system_ca_store_verifies_the_good_host_and_refuses_the_bad_ones(tmp_path):
    with RealWeb(hosts=1, pages=2, page_bytes=2000, special=False, https=1.0, rtt_ms=(0, 0),
                 dns_latency_ms=(0, 0), max_seconds=300) as real:
        web = real.web
        store = Store(tmp_path / "data")
        bad = {mode: tls_web.host_name(mode) for mode in REASON}
        urls = [web.url(name.split(".")[0]) for name in bad.values()] + [web.url("tls-good"), web.url("h0")]
        segment = make_segment(store, urls)
        stats = crawl_fetch(real.prefix, store, segment)
        requests = web.requests()
    fetched, hosts = table(store, segment, "fetched", "url"), table(store, segment, "hosts", "host")
    assert fetched[web.url("tls-good")]["outcome"] == fetched[web.url("h0")]["outcome"] == "ok"
    for mode, name in bad.items():
        row = fetched[web.url(name.split(".")[0])]
        assert row["outcome"] == "tls_failed" and row["error"].startswith(f"TLS {REASON[mode]}: "), row
        assert hosts[name]["tls_error"].startswith(f"{REASON[mode]}: ")
        assert stats[f"tls/failures/{REASON[mode]}"] == 1
    assert real.completed_to_bad_tls(requests) == 0
    assert {r["host"] for r in requests if r["scheme"] == "https"} == {"tls-good.web.test", "h0.web.test"}
