"""generate's final top-N on synthetic bucket tops: CPU seconds and peak memory of each way.

- ``sort``: the old way, one DuckDB ``ORDER BY priority DESC, next_fetch, url LIMIT top_n``
  over every bucket's candidates into one Arrow table (the coordinator holds the segment);
- ``merge``: a k-way merge of the buckets' sorted keys from their first rows (one batch per
  bucket in memory; cycles.generate.generate.top_n_cutoff with one bin);
- ``hist``: what generate does: the buckets' priority histograms (``hist_buckets``: bucket
  tasks, counted while writing in generate, read back here) summed to find the bin the
  cutoff falls in, then the same merge over that bin's rows only; ``hosts``: the bucket
  tasks' second round, the chosen URLs' count per host (distributed in generate, here all
  buckets in one process).

The sort, merge and hist lines are the coordinator's cost; hist_buckets and hosts are
spread over the bucket tasks. Each way runs in a fresh process (its peak RSS is its own,
imports included: subtract ``baseline``). Example::

    python scripts/bench/scale.py topn --buckets 8 --rows 1000000 --top-n 1000000

The candidates are sorted as select_bucket_due writes them; priorities come from 400
distinct values (scores × overdue boosts tie a lot in a real crawl DB), next_fetch from
5,000, urls ~60 bytes, 50,000 hosts a bucket.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import REPO, own_peak_rss  # noqa: E402  (and the repository on sys.path)

def make_buckets(folder: Path, buckets: int, rows: int, seed: int = 7) -> list[Path]:
    import duckdb

    con = duckdb.connect()
    files = []
    for b in range(buckets):
        path = folder / f"bucket-{b:05d}.parquet"
        con.execute(f"""COPY (
            SELECT 'http://h' || (i % 50000 * {buckets} + {b}) || '.example/page/' || md5((i * 31 + {b})::VARCHAR) AS url,
                   'h' || (i % 50000 * {buckets} + {b}) || '.example' AS host,
                   hash(i % 50000 * {buckets} + {b})::UBIGINT AS host_hash,
                   (1 + (hash(i * 7 + {b} + {seed}) % 400)) / 100.0 AS score,
                   (hash(i) % 8)::SMALLINT AS depth, NULL::VARCHAR AS etag, NULL::VARCHAR AS last_modified,
                   ((1 + (hash(i * 7 + {b} + {seed}) % 400)) / 100.0)::DOUBLE AS priority,
                   TIMESTAMPTZ '2026-01-01 00:00:00+00' + to_seconds((hash(i * 13 + {b}) % 5000)::BIGINT) AS next_fetch
            FROM range({rows}) t(i)
            ORDER BY priority DESC, next_fetch, url) TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE 65536)""")
        files.append(path)
    return files


def way_sort(files: list[Path], top_n: int) -> dict:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 1")
    quoted = ", ".join(f"'{f}'" for f in files)
    table = con.sql(f"""SELECT url, host, host_hash, score, depth, etag, last_modified, priority, next_fetch
        FROM read_parquet([{quoted}]) ORDER BY priority DESC, next_fetch, url LIMIT {top_n}""").to_arrow_table()
    return {"rows": table.num_rows, "last": table["url"][-1].as_py()}


def way_merge(files: list[Path], top_n: int) -> dict:
    """The k-way merge from every bucket's first row (one bin holding everything)."""
    import pyarrow.parquet as pq

    from cycles.generate.generate import top_n_cutoff
    from cycles.storage.store import Store

    store = Store(files[0].parent)
    cutoff = top_n_cutoff(store, files, [{0: pq.read_metadata(f).num_rows} for f in files], top_n)
    return {"last": cutoff.url}


def way_hist_buckets(files: list[Path], top_n: int) -> dict:
    """What the bucket tasks add: their histograms (select_bucket_due counts them while
    writing; here read back from the files, so an upper bound)."""
    import pyarrow.parquet as pq

    from cycles.generate.generate import priority_bins

    hists = [priority_bins(pq.read_table(f, columns=["priority"])["priority"].combine_chunks()) for f in files]
    (files[0].parent / "hist.json").write_text(json.dumps([{str(b): n for b, n in h.items()} for h in hists]))
    return {"bins": sum(len(h) for h in hists)}


def load_hists(files: list[Path]) -> list[dict[int, int]]:
    return [{int(b): n for b, n in h.items()} for h in json.loads((files[0].parent / "hist.json").read_text())]


def way_hist(files: list[Path], top_n: int) -> dict:
    """The coordinator's part: the cutoff from the histograms and one bin's merge."""
    from cycles.generate.generate import top_n_cutoff
    from cycles.storage.store import Store

    cutoff = top_n_cutoff(Store(files[0].parent), files, load_hists(files), top_n)
    (files[0].parent / "cutoff.json").write_text(json.dumps(cutoff.__dict__))
    return {"last": cutoff.url}


def way_hosts(files: list[Path], top_n: int) -> dict:
    """The bucket tasks' second round: chosen URLs per host (all buckets, one process)."""
    from cycles.config import Config
    from cycles.generate.generate import ChosenHostsTask, Cutoff, count_chosen_hosts
    from cycles.storage.store import Store

    cutoff = Cutoff(**json.loads((files[0].parent / "cutoff.json").read_text()))
    store, loads = Store(files[0].parent), []
    for f in files:
        loads.append(count_chosen_hosts(ChosenHostsTask(store.uri, Config(), f, cutoff,
                                                        f.with_name(f"chosen-hosts-{f.stem}.parquet"), len(files))))
    return {"rows": sum(load.urls for load in loads), "hosts": sum(load.hosts for load in loads)}


def way_baseline(files: list[Path], top_n: int) -> dict:
    """The imports alone (subtract from the others' time and peak memory)."""
    import cycles.generate.generate  # noqa: F401  (pyarrow, duckdb, the package)
    return {}


WAYS = {"baseline": way_baseline, "sort": way_sort, "merge": way_merge, "hist_buckets": way_hist_buckets,
        "hist": way_hist, "hosts": way_hosts}


def run_one(way: str, folder: str, top_n: int) -> None:
    files = sorted(Path(folder).glob("bucket-*.parquet"))
    started, cpu = time.perf_counter(), time.process_time()
    out = WAYS[way](files, top_n)
    out.update(way=way, seconds=round(time.perf_counter() - started, 2), cpu_s=round(time.process_time() - cpu, 2),
               peak_rss_mb=round(own_peak_rss() / 2**20))
    print(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--buckets", type=int, default=8)
    parser.add_argument("--rows", type=int, default=250_000, help="candidates per bucket")
    parser.add_argument("--top-n", type=int, default=250_000)
    parser.add_argument("--ways", default="baseline,sort,merge,hist_buckets,hist,hosts")
    parser.add_argument("--one", nargs=3, metavar=("WAY", "FOLDER", "TOP_N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        run_one(args.one[0], args.one[1], int(args.one[2]))
        return
    with tempfile.TemporaryDirectory(prefix="bench-topn-") as folder:
        make_buckets(Path(folder), args.buckets, args.rows)
        results = []
        for way in args.ways.split(","):
            line = subprocess.run([sys.executable, __file__, "--one", way, folder, str(args.top_n)], check=True,
                                  capture_output=True, text=True, cwd=REPO).stdout.strip().splitlines()[-1]
            results.append(json.loads(line))
            print(line, flush=True)
        lasts = {r["last"] for r in results if "last" in r}
        print(json.dumps({"buckets": args.buckets, "rows_per_bucket": args.rows, "top_n": args.top_n,
                          "same_cutoff": len(lasts) == 1}))


if __name__ == "__main__":
    main()
