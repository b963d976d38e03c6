"""Measure sitemap reading (cycles/tables/sitemaps.py): URLs per second and what is held.

    python scripts/bench/scale.py sitemaps            # a 50,000-URL urlset (plain, gzip), a gzip bomb, 10 M entries

For each file: wall time, URLs kept, the rate, Python's peak allocation while reading
(tracemalloc: the entries and the inflate chunks; libxml2's own buffers are not in it, and
are bounded by its 10 MB text limit: the blank-filled bomb ends there as ``malformed``,
before the 50 MB cap) and which cap or error stopped it. The reading runs inside the
fetch worker's loop, so its time is time the loop spends not starting requests.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
import tracemalloc
import zlib

from cycles.tables.sitemaps import read_sitemap

URL = "http://a.test/sitemap.xml"


def urlset(n: int, hints: bool) -> bytes:
    extra = b"<lastmod>2024-05-01T10:00:00Z</lastmod><changefreq>daily</changefreq><priority>0.5</priority>"
    return (b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
            + b"".join(b"<url><loc>http://a.test/p/%d.html</loc>%s</url>" % (i, extra if hints else b"")
                       for i in range(n)) + b"</urlset>")


def bomb(mib: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    blanks = b" " * (1 << 20)
    return packer.compress(b"<urlset>") + b"".join(packer.compress(blanks) for _ in range(mib)) + packer.flush()


def measure(name: str, raw: bytes, **kw) -> dict:
    """Timed without tracemalloc (it slows allocation-heavy code ~10x), then traced once for the peak."""
    started = time.perf_counter()
    found = read_sitemap(raw, URL, **kw)
    seconds = time.perf_counter() - started
    tracemalloc.start()
    read_sitemap(raw, URL, **kw)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    caps = sorted(k for k in found.counters if k != "sitemap/urls")
    return {"file": name, "bytes": len(raw), "inflated": found.inflated_bytes, "urls": len(found.entries),
            "seconds": round(seconds, 3), "urls_per_s": round(len(found.entries) / seconds) if seconds else None,
            "peak_python_mib": round(peak / (1 << 20), 2), "stopped_by": caps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON line per file")
    args = parser.parse_args()
    plain = urlset(50_000, hints=False)
    rich = urlset(50_000, hints=True)
    huge = urlset(200_000, hints=False)  # stands for 10 M: reading stops at the 50,000th either way
    rows = [measure("urlset 50k", plain), measure("urlset 50k + hints", rich),
            measure("urlset 50k gzip", gzip.compress(rich)),
            measure("200k entries (cap 50k)", huge),
            measure("gzip bomb 1 GiB (cap 50 MB)", bomb(1024))]
    for row in rows:
        if args.json:
            print(json.dumps(row))
        else:
            print(f"{row['file']:<30} {row['urls']:>7} URLs {row['seconds']:>7.3f} s "
                  f"{row['urls_per_s'] or 0:>9} URLs/s  inflated {row['inflated'] / 1e6:>6.1f} MB  "
                  f"peak {row['peak_python_mib']:>6.2f} MiB  {','.join(row['stopped_by'])}")


if __name__ == "__main__":
    main()
