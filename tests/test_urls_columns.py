"""Tests of the column-wise helpers of cycles/urls.py against their one-URL counterparts:
``canonical_mask`` only vouches for URLs the normaliser leaves alone, and
``UrlFilter.reasons`` gives ``UrlFilter.reason`` of every URL, on every URL of the
conformance suites (inputs, expected outputs and their normal forms) plus edge cases."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from cycles.config import UrlConfig
from cycles.urls import Normalizer, UrlFilter, canonical_mask

DATA = Path(__file__).parent / "data" / "urlnorm"

EDGES = [
    "http://a.com/", "http://a.com", "https://a.com/x", "http://A.com/x", "HTTP://a.com/x", "http://a.com:80/x",
    "http://a.com/./x", "http://a.com/.well-known/x", "http://a.com/x/..", "http://a.com/x%41", "http://a.com/x;sid=1",
    "http://a.com/x?b=1&a=2", "http://a.com/x#f", "http://1.2.3.4/", "http://a.0x10/", "http://a.09/", "http://a.b1/",
    "http://-a.b-/", "http://_a._b/", "http://xn--nxasmq6b.com/", "http://xn--a.com/", "http://a..b/", "http://a.b./",
    "http://" + "a" * 63 + ".com/", "http://" + "a" * 64 + ".com/", "http://" + ".".join(["abcdefghi"] * 25) + ".com/",
    "http://" + ".".join(["abcdefghi"] * 26) + ".com/", "http://a.com/x y", "http://a.com/x\ty", "http://a.com/é",
    "http://a.com/a.ZIP;x=1.2", "http://a.com/a.zip;x=1", "http://a.com/a.", "http://a.com/.jpg", "http://a.com/x.jpg/",
    "http://a.com/x.jpg?y=1.png", "http://a.com/x#a.jpg", "http://a.com/a/b/a/b/a/b/a/b/", "http://a.com//////",
    "http://a.com/" + "y" * 3000, "http://user@a.com/", "http://[::1]/x", "mailto:x@a.com", "", "http://",
] + ["http://a.com/" + "/".join(["x"] * k) for k in range(30)]


def suite_urls() -> list[str]:
    urls = list(EDGES)
    for path in sorted(DATA.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            for key in ("input", "expected", "base"):
                value = row.get(key) if isinstance(row, dict) else None
                if isinstance(value, str):
                    try:
                        value.encode("utf-8")
                    except UnicodeEncodeError:
                        continue  # a lone surrogate cannot be an Arrow string
                    urls.append(value)
    normal = Normalizer()
    return urls + [n for n in map(normal.normalize, urls) if n is not None]


def test_canonical_mask_only_vouches_for_fixed_points():
    urls = suite_urls()
    assert len(urls) > 2000
    mask = canonical_mask(pa.array(urls + [None], pa.string())).to_pylist()
    assert mask[-1] is False
    normal = Normalizer()
    vouched = [u for u, plain in zip(urls, mask) if plain]
    assert len(vouched) > 300  # it does recognise the plain ones
    assert [u for u in vouched if normal.normalize(u) != u] == []
    assert canonical_mask(pa.chunked_array([["http://a.com/x"], ["http://A.com/"]])).to_pylist() == [True, False]


CONFIGS = [
    UrlConfig(),
    UrlConfig(max_path_depth=3, max_segment_repeats=1, max_length=40, blocked_extensions=[".jpg", "ZIP", "."]),
    UrlConfig(max_segment_repeats=0),
    UrlConfig(exclude={"a.com": ["/x/x"]}, include={"*": ["^https?://"]}),
]


@pytest.mark.parametrize("config", CONFIGS, ids=["default", "tight", "no-repeats", "host-rules"])
def test_reasons_is_reason_of_each(config):
    urls = suite_urls() + [None]
    url_filter = UrlFilter(config)
    got = url_filter.reasons(pa.array(urls, pa.string())).to_pylist()
    want = [url_filter.reason(u) for u in urls]
    assert [(u, w, g) for u, w, g in zip(urls, want, got) if w != g] == []
    assert len(set(want)) >= 3
    assert url_filter.reasons(pa.chunked_array([], pa.string())).to_pylist() == []
