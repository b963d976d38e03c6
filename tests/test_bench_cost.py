"""The cost benchmark's parts (issue #11): the store's operation observer, the measuring
executor's split of a stage into tasks and the coordinator, and the projection's arithmetic."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from types import SimpleNamespace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet  # noqa: F401  (pa.parquet)
import pytest

import cycles.storage.files as store_module  # the I/O observer lives with the file layer
from cycles.storage.store import Store, observe_io

BENCH = Path(__file__).resolve().parent.parent / "scripts" / "bench"


def load_script(name: str):
    """A benchmark module of scripts/bench/, imported as its entry points import it: with its
    folder on sys.path, where its siblings (benchlib, bench_scale) are."""
    if str(BENCH) not in sys.path:
        sys.path.append(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"script_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


TABLE_SCHEMA = pa.schema([("url", pa.string())])


def test_store_operations_are_reported_only_while_observed(tmp_path):
    store = Store(tmp_path / "store")
    seen = []
    assert store_module._io_observer is None  # off by default
    previous = observe_io(lambda kind, path, nbytes: seen.append((kind, Path(path).name, nbytes)))
    try:
        target = store.path("crawldb", "v1", "bucket-00000.parquet")
        store.write_table(target, pa.table({"url": ["http://a/"]}), TABLE_SCHEMA)
        store.read_table(target)
        store.write_json(store.path("stats.json"), {"a": 1})
        store.read_json(store.path("stats.json"))
        store.list(store.path("crawldb", "v1"))
        store.exists(target)
        store.delete(store.path("stats.json"))
    finally:
        observe_io(previous)
    kinds = [kind for kind, _, _ in seen]
    assert kinds == ["PUT", "GET", "PUT", "GET", "LIST", "HEAD", "DELETE"]
    assert seen[0][1] == "bucket-00000.parquet" and seen[0][2] is None  # the whole file: the observer sizes it
    assert seen[2][2] == len(json.dumps({"a": 1}, indent=1) + "\n")  # whole-file writes say their size
    count = len(seen)
    store.read_table(target)  # observer removed: nothing more is reported
    assert len(seen) == count and store_module._io_observer is None


def test_measuring_executor_books_tasks_by_name_and_the_rest_to_the_coordinator(tmp_path):
    bench_cost = load_script("bench_cost")
    store = Store(tmp_path / "store")

    def write_bucket(bucket: int) -> int:
        store.write_table(store.bucket_file(store.path("v1"), bucket), pa.table({"url": [f"http://h{bucket}/"]}),
                          TABLE_SCHEMA)
        time.sleep(0.02)
        return bucket

    def stage(executor):
        store.write_json(store.path("CURRENT"), {"version": "v1"})  # the coordinator's part
        time.sleep(0.05)
        return executor.map(write_bucket, range(3))

    result, measured = bench_cost.measure_stage(stage)
    assert result == [0, 1, 2]
    task = measured["tasks"]["write_bucket"]
    assert task["count"] == 3 and task["store_ops"] == {"PUT": 3}
    assert task["store_bytes"]["PUT"] == sum((store.path("v1") / f"bucket-0000{b}.parquet").stat().st_size
                                             for b in range(3))
    coordinator = measured["coordinator"]
    assert coordinator["store_ops"] == {"PUT": 1}
    assert task["wall_s"] >= 0.06 and coordinator["wall_s"] >= 0.05
    assert measured["wall_s"] == pytest.approx(task["wall_s"] + coordinator["wall_s"])
    assert 0 < measured["serial_fraction"] < 1
    assert store_module._io_observer is None  # the hook is off again


def test_fit_separates_crawl_db_and_segment_costs():
    project = load_script("project_cluster")
    # y = 3 per known URL + 20 per fetched URL, measured at two segment shares
    both = project.fit([(1e6, 1e5, 3e6 + 2e6), (1e6, 2e4, 3e6 + 4e5)])
    assert both.per_known == pytest.approx(3) and both.per_fetched == pytest.approx(20)
    one = project.fit([(1e6, 1e5, 5e6)])  # one share: all of it grows with the crawl DB
    assert one.per_known == pytest.approx(5) and one.per_fetched == 0
    negative = project.fit([(1e6, 1e5, 1e5), (1e6, 2e4, 2e5)])  # more at a smaller segment: no negative terms
    assert negative.per_known >= 0 and negative.per_fetched >= 0


def cost_row(size: int, fetched: int, serial_s: float, task_cpu_s: float) -> dict:
    stage = {"tasks": {"update_bucket": {"cpu_s": task_cpu_s, "store_bytes": {"GET": 100 * size, "PUT": 80 * size}}},
             "coordinator": {"wall_s": serial_s, "cpu_s": serial_s, "child_cpu_s": 0.0, "store_bytes": {}}}
    return {"size": size, "top_n_pct": 100 * fetched / size, "selected": fetched, "fetched": fetched,
            "generate": stage, "update": stage}


def test_projection_names_the_serial_coordinator_as_the_bottleneck(tmp_path, capsys):
    project = load_script("project_cluster")
    cost = tmp_path / "cost.json"
    # serial: 50 s per million fetched URLs (segment-wide steps); tasks: 10 CPU-s per million known
    cost.write_text(json.dumps({"rows": [cost_row(1_000_000, 100_000, 5.0, 10.0),
                                         cost_row(1_000_000, 20_000, 1.0, 10.0)]}))
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"hosts": 2, "pages": 2, "buckets": 4, "partitions": 2, "formulas": {
        "update": {"GET": {"fixed": 10, "bucket": 5}, "PUT": {"fixed": 2, "bucket": 1}}}}))
    project.main(["--cost", str(cost), "--cluster", str(cluster), "--known", "1e9", "--cycle-hours", "1,24",
                  "--flush-pages", "5000"])
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("| 1 B")]
    assert len(lines) == 2
    # 1 h: 1.44 M fetched x 2 stages x 50 s/M = 144 s serial = 4 % of the cycle: the tasks bind;
    # 24 h: 34.6 M fetched -> 58 min serial, still 4 %; both feasible, the tasks are the limit.
    assert "update_bucket CPU" in lines[0] and "update_bucket CPU" in lines[1]
    assert "shortest cycle with the coordinator within 5% is" in out
    # a serial part per fetched page above the target: no cycle length helps
    project.main(["--cost", str(cost), "--cluster", str(cluster), "--known", "1e9", "--cycle-hours", "1",
                  "--pages-per-s", "1000", "--flush-pages", "5000"])
    out = capsys.readouterr().out
    assert "coordinator: serial" in out and "none: the serial part per fetched page alone exceeds it" in out


def test_fit_tells_a_fixed_cost_from_per_url_costs_given_two_sizes():
    project = load_script("project_cluster")
    # y = 30 s fixed + 3 per known URL + 20 per fetched URL, at 1 M / 10 M / 100 M and two shares each
    rows = [(k, k * share, 30 + 3 * k + 20 * k * share) for k in (1e6, 1e7, 1e8) for share in (0.1, 0.02)]
    both = project.fit(rows)
    assert both.fixed == pytest.approx(30) and both.per_known == pytest.approx(3)
    assert both.per_fetched == pytest.approx(20)
    assert both.at(1e9, 1e8) == pytest.approx(30 + 3e9 + 2e9)
    # one size: the fixed part cannot be told from the per-URL ones, so none is made up
    one_size = project.fit([r for r in rows if r[0] == 1e6])
    assert one_size.fixed == 0 and one_size.per_known + 0.1 * one_size.per_fetched == pytest.approx(3 + 2 + 30e-6)
    # a cost that does not grow at all stays fixed instead of becoming a per-URL cost
    flat = project.fit([(k, k * 0.1, 12.0) for k in (1e6, 1e7, 1e8)])
    assert flat.fixed == pytest.approx(12) and flat.per_known == pytest.approx(0, abs=1e-12)
    assert flat.per_fetched == pytest.approx(0, abs=1e-12)


def test_a_built_store_is_shared_by_hard_links_and_survives_the_runs_on_its_copies(tmp_path):
    bench_scale = load_script("bench_scale")
    args = SimpleNamespace(built=str(tmp_path / "built"), linkdb_links_per_url=1.0)
    con = bench_scale.connect(1, "500MB", tmp_path / "spill")
    size, hosts, buckets = 2_000, 200, 8
    facts, _, counts = bench_scale.built_store(args, size, hosts, buckets, tmp_path / "a" / "2K", con)
    assert "reused_build" not in facts and int(counts.sum()) == size
    built = Store(tmp_path / "built" / "2K")
    built_files = sorted(p for p in (tmp_path / "built" / "2K").rglob("*.parquet"))
    assert built_files and built.manifest("crawldb").buckets == buckets
    # a second run (bench_cost's) starts from a hard-linked copy instead of building again
    again, _, counts2 = bench_scale.built_store(args, size, hosts, buckets, tmp_path / "b" / "2K", con)
    assert again["reused_build"] == str(tmp_path / "built" / "2K")
    assert again["db_bytes"] == facts["db_bytes"] and (counts2 == counts).all()
    copy = Store(tmp_path / "b" / "2K")
    version = copy.manifest("crawldb").version
    copied = copy.path("crawldb", version, "bucket-00000.parquet")
    assert copied.stat().st_ino == (built.path("crawldb", version, "bucket-00000.parquet")).stat().st_ino
    # a stage replacing and pruning the copy's files leaves the built store as it was
    copy.write_table(copied, pa.table({"url": ["http://x/"]}), TABLE_SCHEMA)
    copy.delete_dir(copy.path("crawldb", version))
    assert sorted(p for p in (tmp_path / "built" / "2K").rglob("*.parquet")) == built_files
    assert pa.parquet.read_metadata(built.path("crawldb", version, "bucket-00000.parquet")).num_rows > 0
    # a lock file is never shared: one flock would lock the built store and every copy together
    lock = tmp_path / "built" / "2K" / "crawldb" / ".lock"
    lock.touch()
    bench_scale.copy_store(tmp_path / "built" / "2K", tmp_path / "d")
    assert not (tmp_path / "d" / "crawldb" / ".lock").exists() and lock.exists()
    subprocess.run(["cp", "-al", str(tmp_path / "built" / "2K"), str(tmp_path / "e")], check=True)
    assert (tmp_path / "e" / "crawldb" / ".lock").stat().st_ino == lock.stat().st_ino  # what cp -al alone does
    # other settings: built anew, not taken from the store built for these
    args.linkdb_links_per_url = 0.0
    other, _, _ = bench_scale.built_store(args, size, hosts, buckets, tmp_path / "c" / "2K", con)
    assert "reused_build" not in other and "linkdb_s" not in other
    con.close()
