"""What the update stage decides, measured on the local test web (GitHub issue #4).

Two runs, both real crawls (generate -> fetch -> update) of the test web on loopback:

1. **dedup and traps** — regular hosts plus the trap hosts and the near-duplicate hosts,
   crawled until nothing is due. Prints URLs dropped by reason, near-duplicate precision
   and recall against the web's labels, exact-duplicate groups and mirrors found, trap URLs
   requested against the budget, and what the outlink Bloom filter would save (its measured
   false-positive rate on the real outlinks).
2. **near-duplicate set** — no crawl: the labelled pairs of ``testweb.neardup_set`` (720
   pairs, 12 kinds of copies, 6 kinds of different pages) parsed as fetch parses them. Three
   fingerprints: the one before issue #13 section 3 (``cycles/fingerprint.py`` and
   ``cycles/fetch/parse.py`` at ``--before``, loaded from git: a SimHash of the whole visible
   text), the SimHash of the main content (the opt-in that followed), and what fetch stores
   now with the default config (the 1-bit MinHash of the main content). Prints recall by
   kind, precision and recall at k = 2..8, the closest different pages, CPU per page
   (parse_html in all, and the fingerprints alone), update's own search
   (``find_duplicates``: canonical choice included, among ``--stored`` random stored
   fingerprints) with its cost per segment page, and MinHash (datasketch) on the whole text.
3. **freshness** — the host whose pages change at known rates, recrawled over simulated
   days (the crawler's clock and the web's virtual clock shifted in step). Prints the
   freshness of our copies (time-weighted share of pages whose stored version is the live
   one) against a uniform schedule with the same number of fetches, how often each change
   class was fetched, and the share of unchanged refetches answered 304.

    .venv/bin/python scripts/bench/web.py update            # both, ~5 minutes
    .venv/bin/python scripts/bench/web.py update --only freshness --days 4
    .venv/bin/python scripts/bench/web.py update --only neardup-set   # ~1 minute, no test web
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from benchlib import REPO as ROOT  # noqa: E402  (the repository on sys.path: testweb)

from cycles import clock  # noqa: E402
from cycles.storage.bloom import BloomFilter  # noqa: E402
from cycles.config import Config  # noqa: E402
from cycles.tables.crawldb import current_bucket_files, url_pattern_sql  # noqa: E402
from cycles.commands.cycle import run_cycles  # noqa: E402
from cycles.fetch.fetch import fetch_segment  # noqa: E402
from cycles.generate.generate import generate  # noqa: E402
from cycles.commands.inject import inject  # noqa: E402
from cycles.storage.store import Store  # noqa: E402
from testweb.harness import TestWeb  # noqa: E402
from testweb.model import CLOCK_START  # noqa: E402
from cycles.update.update import update_segment  # noqa: E402


def base_config(web) -> Config:
    return web.crawl_config()


def crawldb_rows(store: Store) -> list[dict]:
    _, files = current_bucket_files(store)
    return duckdb.connect().sql(f"SELECT * FROM read_parquet([{', '.join(repr(str(f)) for f in files)}])").to_arrow_table().to_pylist()


def segment_stats(store: Store, name: str) -> Counter:
    total = Counter()
    for segment in store.segments():
        path = store.segment_dir(segment) / "stats" / name
        if path.exists():  # the numbers only (update.json also lists copies by host, mirrors)
            total.update({k: v for k, v in store.read_json(path).items() if isinstance(v, (int, float))})
    return total


# --- 1. dedup and traps ------------------------------------------------------------------
def run_dedup_traps(args) -> None:
    print("== dedup and traps ==")
    with TestWeb(hosts=args.hosts, pages=8, page_bytes=4000, special=False, traps=True, neardups=True,
                 max_seconds=1800) as web, tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "data")
        config = base_config(web)
        config.generate.max_urls_per_pattern = args.pattern_per_cycle
        config.update.max_urls_per_pattern = args.pattern_total
        seeds = Path(tmp) / "seeds.txt"
        # A copied site's links point at the original, so its pages are only found from
        # outside: seed them, as links from elsewhere on the web would.
        mirror_pages = sorted(u for group in web.exact_duplicate_groups() for u in group
                              if any(f"//{m}" in u for m in web.mirror_hosts()))
        seeds.write_text("\n".join(web.seeds() + mirror_pages) + "\n")
        inject(store, config, seeds)
        started = time.monotonic()
        for line in run_cycles(store, config, cycles=args.cycles):
            print("  " + line)
        print(f"  crawl took {time.monotonic() - started:.0f}s")
        report_drops(store)
        report_neardups(store, web)
        compare_neardup_methods(store, web, config)
        report_traps(store, web, config, args)
        report_bloom(store)


def report_drops(store: Store) -> None:
    stats = segment_stats(store, "update.json")
    print("\nURLs dropped by reason (all cycles):")
    for key in sorted(k for k in stats if k.startswith(("filter/", "trap/", "outlinks/nofollow", "outlinks/from_dup"))):
        print(f"  {key:<32} {stats[key]:>7}")
    print(f"  {'(outlinks found)':<32} {stats['outlinks/found']:>7}   new URLs added: {stats['outlinks/new']}")


def report_neardups(store: Store, web) -> None:
    rows = {r["url"]: r for r in crawldb_rows(store)}
    dup_status = {"duplicate", "near_duplicate"}

    def same_cluster(a: str, b: str) -> bool | None:
        ra, rb = rows.get(a), rows.get(b)
        if not ra or not rb or ra["content_hash"] is None or rb["content_hash"] is None:
            return None  # not both fetched
        root = lambda r: r["duplicate_of"] if r["status"] in dup_status else r["url"]  # noqa: E731
        return root(ra) == root(rb) or root(ra) == rb["url"] or root(rb) == ra["url"]

    tp = fp = fn = tn = skipped = 0
    for a, b, label, _kind in web.neardup_pairs():
        found = same_cluster(a, b)
        if found is None:
            skipped += 1
        elif label and found:
            tp += 1
        elif label:
            fn += 1
        elif found:
            fp += 1
        else:
            tn += 1
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    print(f"\nnear-duplicates (labelled pairs {tp + fp + fn + tn}, {skipped} not both fetched): "
          f"precision {precision:.3f}  recall {recall:.3f}  (tp {tp}, fp {fp}, fn {fn}, tn {tn})")
    groups = web.exact_duplicate_groups()

    def root(url: str) -> str:
        return rows[url]["duplicate_of"] if rows[url]["status"] in dup_status else url

    # A group is collapsed when its fetched members have one canonical (one of them, or the
    # page one of them is a near copy of: dedup.flatten_marks); every byte-identical pair of
    # fetched pages counts for the recall.
    fetched = [[u for u in g if rows.get(u, {}).get("content_hash")] for g in groups]
    whole = sum(1 for f in fetched if len(f) > 1 and len({root(u) for u in f}) == 1)
    pairs = [(a, b) for f in fetched for i, a in enumerate(f) for b in f[i + 1:]]
    joined = sum(1 for a, b in pairs if root(a) == root(b))
    print(f"exact-duplicate groups collapsed to one canonical URL: {whole} of {sum(len(f) > 1 for f in fetched)} "
          f"with two or more pages fetched ({len(groups)} labelled); byte-identical fetched pairs under one "
          f"canonical: {joined} of {len(pairs)} (recall {joined / max(1, len(pairs)):.3f})")
    mirrors = {}
    for segment in store.segments():
        path = store.segment_dir(segment) / "stats" / "mirrors.json"
        if path.exists():
            mirrors.update(store.read_json(path))
    labelled = {frozenset(pair) for pair in web.mirror_hosts().items()}
    found = {frozenset(pair) for pair in mirrors.items()}
    print(f"mirror host pairs: labelled {len(labelled)}, detected {len(found & labelled)} of them, "
          f"{len(found - labelled)} wrong  (detected mirror -> original: {mirrors}; which side is the "
          "'original' follows the canonical-URL rule: docs/dedup.md)")


def compare_neardup_methods(store: Store, web, config: Config) -> None:
    """SimHash (64 bits, k = 3, what update uses) against MinHash LSH (datasketch) on the same
    fetched texts and the same labelled pairs: precision, recall, CPU time per page."""
    from datasketch import MinHash, MinHashLSH

    from cycles.fingerprint import hamming, simhash64

    texts, fetched_simhash = {}, {}
    for segment in store.segments():
        table = pq.read_table(store.segment_dir(segment) / "fetched", columns=["url", "outcome", "text", "minhash"])
        for row in table.to_pylist():
            if row["outcome"] == "ok" and row["text"]:
                texts[row["url"]] = row["text"]
                fetched_simhash[row["url"]] = row["minhash"]
    pairs = [(a, b, label) for a, b, label, _ in web.neardup_pairs() if a in texts and b in texts]
    urls = sorted({u for a, b, _ in pairs for u in (a, b)})

    def score(decide) -> tuple[float, float]:
        tp = sum(1 for a, b, label in pairs if label and decide(a, b))
        fp = sum(1 for a, b, label in pairs if not label and decide(a, b))
        fn = sum(1 for a, b, label in pairs if label and not decide(a, b))
        return tp / max(1, tp + fp), tp / max(1, tp + fn)

    started = time.process_time()
    sims = {u: simhash64(texts[u]) for u in urls}
    sim_ms = (time.process_time() - started) * 1000 / max(1, len(urls))
    k = config.update.minhash_max_distance
    sim_p, sim_r = score(lambda a, b: hamming(sims[a], sims[b]) <= k)
    # What update compares: the SimHash fetch took of the main content (parse._main_blocks).
    main_p, main_r = score(lambda a, b: hamming(fetched_simhash[a], fetched_simhash[b]) <= k)

    def shingles(text: str) -> set[bytes]:
        words = text.lower().split()
        return {" ".join(words[i:i + 3]).encode() for i in range(max(1, len(words) - 2))}

    results = []
    for threshold in (0.5, 0.7, 0.9):
        started = time.process_time()
        lsh = MinHashLSH(threshold=threshold, num_perm=128)
        hashes = {}
        for url in urls:
            m = MinHash(num_perm=128)
            m.update_batch(list(shingles(texts[url])))
            hashes[url] = m
            lsh.insert(url, m)
        near = {u: set(lsh.query(hashes[u])) for u in urls}
        ms = (time.process_time() - started) * 1000 / max(1, len(urls))
        results.append((threshold, *score(lambda a, b: b in near[a]), ms))
    print(f"\nnear-duplicate method on {len(pairs)} labelled pairs of fetched pages:")
    print(f"  SimHash 64-bit, k={k}, main content (fetch's, what update uses): precision {main_p:.3f}  recall {main_r:.3f}")
    print(f"  SimHash 64-bit, k={k}, whole text:    precision {sim_p:.3f}  recall {sim_r:.3f}  {sim_ms:.2f} CPU-ms/page")
    for threshold, p_, r_, ms in results:
        print(f"  MinHash LSH 128 perm, J>={threshold}:      precision {p_:.3f}  recall {r_:.3f}  {ms:.2f} CPU-ms/page")


def report_traps(store: Store, web, config: Config, args) -> None:
    print("\ntrap hosts: requests to trap URLs vs budget, good pages harvested")
    requests = web.requests()
    budget = args.pattern_total
    for host in web.trap_hosts():
        mine = [r for r in requests if r["host_header"].split(":")[0] == host]
        urls = {web.url(host, r["path"]) for r in mine}
        trap_urls = sorted(u for u in urls if web.is_trap(u))
        patterns = duckdb.connect().execute(
            f"SELECT count(DISTINCT {url_pattern_sql('u')}) FROM unnest($urls) t(u)", {"urls": trap_urls}).fetchall()[0][0]
        good = set(web.good_pages(host))
        got = len(good & urls)
        print(f"  {host:<24} trap URLs fetched {len(trap_urls):>4} in {patterns} URL patterns "
              f"(budget {patterns} x {budget} = {patterns * budget}; {args.pattern_per_cycle}/pattern/cycle)  "
              f"good pages {got}/{len(good)}")


def report_bloom(store: Store) -> None:
    """Replay the real outlinks of each segment partition through the Bloom filter the fetch
    worker would use, against an exact set: false positives and rows saved."""
    fp = written = seen_exact = total = 0
    for segment in store.segments():
        folder = store.segment_dir(segment) / "outlinks"
        parts = defaultdict(list)
        for path in sorted(folder.glob("part-*.parquet")):
            parts[path.name.split("-c")[0]].append(path)
        for files in parts.values():
            urls = [u for f in files for u in pq.read_table(f, columns=["url"])["url"].to_pylist()]
            bloom = BloomFilter(max(1000, len(urls)), 0.001)
            exact: set[str] = set()
            new = bloom.add_new(urls)
            for url, is_new in zip(urls, new):
                if url not in exact and not is_new:
                    fp += 1
                exact.add(url)
            total += len(urls)
            written += int(new.sum())
            seen_exact += len(exact)
    print(f"\noutlink Bloom filter (0.1% target), replayed on {total} outlinks written: "
          f"would write {written} rows ({100 * (1 - written / max(1, total)):.1f}% fewer); "
          f"false positives {fp} of {seen_exact} distinct = {100 * fp / max(1, seen_exact):.3f}%")


# --- 2. near-duplicate set -----------------------------------------------------------------
BEFORE_REV = "4f259af"
"""The last commit before issue #13 section 3 changed the fingerprint features."""


def load_before(rev: str):
    """``(fingerprint, parse)`` modules as they were at ``rev`` (read with git show), the old
    parse importing the old fingerprint."""
    import importlib.util
    import subprocess
    import types

    def source(path: str) -> str:
        return subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True,
                              capture_output=True, text=True).stdout

    modules = []
    for name, path, patch in (("_before_fingerprint", "cycles/fingerprint.py", None),
                              ("_before_parse", "cycles/fetch/parse.py", ("from cycles.fingerprint import", "from _before_fingerprint import"))):
        text = source(path)
        if patch:
            text = text.replace(*patch)
        module = types.ModuleType(name)
        module.__file__ = f"{rev}:{path}"
        sys.modules[name] = module
        exec(compile(text, module.__file__, "exec"), module.__dict__)
        modules.append(module)
    del importlib
    return tuple(modules)


def run_neardup_set(args) -> None:
    from cycles.fetch.parse import _main_blocks, _scan, _visible_text, _clear, parse_html
    from cycles.fingerprint import fingerprints, hamming, simhash64_blocks
    from testweb.neardup_set import NEGATIVE_KINDS, POSITIVE_KINDS, labelled_pairs

    print("== near-duplicate set ==")
    old_fp, old_parse = load_before(args.before)
    config = Config()
    k = config.update.minhash_max_distance
    block = config.fetch.minhash_block_min_bytes if config.fetch.minhash_main_content else None
    pairs = labelled_pairs()
    distinct_pages = sorted({(p.a, p.a_url) for p in pairs} | {(p.b, p.b_url) for p in pairs}, key=lambda x: x[1])

    def cpu_ms(fn, items, repeat=5) -> float:
        """Mean over the items of each item's best of ``repeat`` CPU times: the machine is
        shared, and the best of a few runs is the least disturbed by other processes."""
        total = 0.0
        for item in items:
            best = float("inf")
            for _ in range(repeat):
                started = time.thread_time()
                fn(*item)
                best = min(best, time.thread_time() - started)
            total += best
        return total * 1000 / len(items)

    def parse_after(body, url):
        return parse_html(body, url, block_min_bytes=block)

    old_parse.parse_html(*distinct_pages[0])
    parse_after(*distinct_pages[0])
    before_ms = cpu_ms(old_parse.parse_html, distinct_pages)
    after_ms = cpu_ms(parse_after, distinct_pages)
    texts = [old_parse.parse_html(body, url).text for body, url in distinct_pages]
    fp_before = cpu_ms(lambda text: old_fp.fingerprints(text, collapsed=True), [(t,) for t in texts])

    def blocks_of(body, url):
        root = old_parse._tree(body, *old_parse._decode(body, None))
        scan = _scan(root, "crawlbot")
        _clear(scan.hidden)
        _clear(scan.noscripts)
        text = _visible_text(root)
        return root, text

    trees = [blocks_of(body, url) for body, url in distinct_pages]
    main_ms = cpu_ms(lambda root, text: _main_blocks(root, text, block or 0), trees, repeat=1)  # it edits the tree
    blocks = [_main_blocks(*blocks_of(body, url), block or 0) for body, url in distinct_pages]
    with_blocks = [(text, bl) for (_, text), bl in zip(trees, blocks)]
    fp_simhash_main = cpu_ms(lambda text, bl: (old_fp.content_hash(text), simhash64_blocks(bl)), with_blocks)
    fp_after = cpu_ms(lambda text, bl: fingerprints(text, collapsed=True, blocks=bl), with_blocks)

    # Three fingerprints of every page: the one at --before (whole text), the SimHash of the
    # main content (the opt-in before the 1-bit MinHash), and the one fetch stores now.
    methods = {"before": {}, "simhash-main": {}, "after": {}}
    for (body, url), bl in zip(distinct_pages, blocks):
        methods["before"][url] = old_parse.parse_html(body, url).simhash
        methods["simhash-main"][url] = simhash64_blocks(bl)
        methods["after"][url] = parse_after(body, url).minhash
    distances = {name: {id(p): hamming(prints[p.a_url], prints[p.b_url]) for p in pairs}
                 for name, prints in methods.items()}
    print(f"  {len(pairs)} labelled pairs ({sum(p.label for p in pairs)} copies), {len(distinct_pages)} pages; "
          f"before = {args.before} (whole text, SimHash), simhash-main = SimHash of the main content, "
          f"after = what fetch stores now (config defaults: main content "
          f"{'on' if block is not None else 'off'}, 1-bit MinHash); k = {k}")
    print(f"  {'kind':<22}{'label':>6}{'pairs':>6}{'before':>9}{'simhash-main':>14}{'after':>8}")
    for kind in POSITIVE_KINDS + NEGATIVE_KINDS:
        mine = [p for p in pairs if p.kind == kind]
        hits = [sum(distances[name][id(p)] <= k for p in mine) / len(mine) for name in methods]
        print(f"  {kind:<22}{str(mine[0].label):>6}{len(mine):>6}{hits[0]:>9.2f}{hits[1]:>14.2f}{hits[2]:>8.2f}")

    def precision_recall(found: dict, within) -> tuple[float, float]:
        tp = sum(1 for p in pairs if p.label and within(found[id(p)]))
        fp = sum(1 for p in pairs if not p.label and within(found[id(p)]))
        fn = sum(1 for p in pairs if p.label and not within(found[id(p)]))
        return tp / max(1, tp + fp), tp / max(1, tp + fn)

    print("  64-bit fingerprints, precision / recall by distance k:")
    for kk in range(2, 9):
        figures = "   ".join(f"{name} P {pr[0]:.3f} R {pr[1]:.3f}" for name, pr in
                             ((name, precision_recall(distances[name], lambda d: d <= kk)) for name in methods))
        mark = "  <- update.minhash_max_distance" if kk == k else ""
        print(f"    k={kk}: {figures}{mark}")
    nearest = {name: min(distances[name][id(p)] for p in pairs if not p.label) for name in methods}
    print(f"  closest different pages: {nearest} bits")
    print(f"  CPU per page: parse_html {before_ms:.3f} ms before, {after_ms:.3f} ms after; "
          f"fingerprints alone {fp_before:.3f} ms before, SimHash of the main content {fp_simhash_main:.3f} ms, "
          f"after {fp_after:.3f} ms (+ main-content blocks {main_ms:.3f} ms): "
          f"fingerprinting {fp_after + main_ms:.3f} CPU-ms a page on the fetch path")
    report_update_on_set(pairs, methods["after"], distinct_pages, config, args.stored)
    report_tuning_and_held_back(config, args.stored)
    report_minhash_on_set(pairs, {id(p): (old_parse.parse_html(p.a, p.a_url).text, old_parse.parse_html(p.b, p.b_url).text)
                                  for p in pairs})


def report_update_on_set(pairs, prints: dict[str, int], pages, config: Config, stored: int) -> None:
    """update's own search on the set (testweb.neardup_set.update_search: canonical choice
    made, among ``stored`` random stored fingerprints): precision, recall and its cost per
    segment page."""
    from cycles.fetch.parse import parse_html
    from testweb.neardup_set import update_search

    texts = {url: parse_html(body, url).text for body, url in pages}
    run = update_search(pairs, prints, texts, config, stored)
    tp = sum(1 for p in pairs if p.label and run.found[id(p)])
    fp = sum(1 for p in pairs if not p.label and run.found[id(p)])
    fn = sum(1 for p in pairs if p.label and not run.found[id(p)])
    print(f"  update (find_duplicates, canonical choice made; {run.stored_pages:,} stored fingerprints of which "
          f"{stored:,} random, {run.segment_pages} segment pages): P {tp / max(1, tp + fp):.3f} "
          f"R {tp / max(1, tp + fn):.3f}; {1000 * run.cpu_s / run.segment_pages:.3f} CPU-ms, "
          f"{1000 * run.wall_s / run.segment_pages:.3f} wall-ms a segment page "
          f"({run.cpu_s:.2f} s CPU in all, every DuckDB thread counted)")


def report_tuning_and_held_back(config: Config, stored: int) -> None:
    """update's own search on the issue #26 sets (testweb.neardup_set.tuning_pairs, and
    held_back_pairs, which no threshold was chosen on): precision, recall, and the kinds
    it gets wrong; mirror pairs are both fetched in one segment."""
    from collections import defaultdict

    from cycles.fetch.parse import parse_html
    from testweb.neardup_set import held_back_pairs, tuning_pairs, update_search

    block = config.fetch.minhash_block_min_bytes if config.fetch.minhash_main_content else None
    for name, pairs in (("tuning", tuning_pairs()), ("held back", held_back_pairs())):
        prints, texts = {}, {}
        for p in pairs:
            for body, url in ((p.a, p.a_url), (p.b, p.b_url)):
                if url not in prints:
                    page = parse_html(body, url, block_min_bytes=block)
                    prints[url], texts[url] = page.minhash, page.text
        run = update_search(pairs, prints, texts, config, stored)
        tp = sum(1 for p in pairs if p.label and run.found[id(p)])
        fp = sum(1 for p in pairs if not p.label and run.found[id(p)])
        fn = sum(1 for p in pairs if p.label and not run.found[id(p)])
        wrong = defaultdict(int)
        for p in pairs:
            if p.label != run.found[id(p)]:
                wrong[p.kind] += 1
        print(f"  update on the {name} set ({len(pairs)} pairs, {len({p.kind for p in pairs})} kinds; "
              f"{stored:,} random stored fingerprints): P {tp / max(1, tp + fp):.3f} R {tp / max(1, tp + fn):.3f} "
              f"(tp {tp}, fp {fp}, fn {fn}); wrong by kind: {dict(sorted(wrong.items()))}")


def report_minhash_on_set(pairs, texts) -> None:
    """MinHash (datasketch, 128 permutations) of whole-text word 3-shingles: the estimated
    Jaccard similarity of each pair against thresholds, and its CPU per page."""
    try:
        from datasketch import MinHash
    except ImportError:
        print("  (MinHash skipped: datasketch is in the bench extra)")
        return

    def shingles(text: str) -> list[bytes]:
        words = text.lower().split()
        return list({" ".join(words[i:i + 3]).encode() for i in range(max(1, len(words) - 2))})

    cache = {}
    started = time.process_time()
    for p in pairs:
        for text in texts[id(p)]:
            if text not in cache:
                m = MinHash(num_perm=128)
                m.update_batch(shingles(text))
                cache[text] = m
    ms = (time.process_time() - started) * 1000 / len(cache)
    sims = {id(p): cache[texts[id(p)][0]].jaccard(cache[texts[id(p)][1]]) for p in pairs}
    for threshold in (0.5, 0.7, 0.8, 0.9):
        tp = sum(1 for p in pairs if p.label and sims[id(p)] >= threshold)
        fp = sum(1 for p in pairs if not p.label and sims[id(p)] >= threshold)
        fn = sum(1 for p in pairs if p.label and sims[id(p)] < threshold)
        print(f"  MinHash 128 perm, whole text, J >= {threshold}: P {tp / max(1, tp + fp):.3f} "
              f"R {tp / max(1, tp + fn):.3f}  {ms:.2f} CPU-ms/page")


def recrawl(web, pages: list[str], config, steps: int, step_s: float, tmp: Path, on_fetch=None):
    """Recrawl ``pages`` for ``steps`` cycles of ``step_s`` virtual seconds (one generate →
    fetch → update each): fetch times per URL, each fetched URL's stored interval after every
    cycle (a list per cycle), and the virtual end time. ``on_fetch(url, when, outcome,
    earlier_times)`` sees every fetch as it is recorded."""
    store = Store(tmp / "data")
    seeds = tmp / "seeds.txt"
    seeds.write_text("\n".join(pages) + "\n")
    t = float(CLOCK_START)
    shift(web, t)
    inject(store, config, seeds)
    fetches: dict[str, list[float]] = defaultdict(list)
    intervals: list[dict[str, int]] = []
    for _ in range(steps + 1):
        shift(web, t)
        generated = generate(store, config)
        if generated.segment:
            fetch_segment(store, config, generated.segment)
            update_segment(store, config, generated.segment)
            for row in pq.read_table(store.segment_dir(generated.segment) / "fetched").to_pylist():
                if row["fetched_at"] is None:
                    continue
                when = row["fetched_at"].timestamp()
                if on_fetch:
                    on_fetch(row["url"], when, row["outcome"], fetches[row["url"]])
                fetches[row["url"]].append(when)
        _, files = current_bucket_files(store)
        rows = duckdb.connect().sql(f"SELECT url, fetch_interval_s, fetch_count FROM read_parquet("
                                    f"[{', '.join(repr(str(f)) for f in files)}])").fetchall()
        intervals.append({url: interval for url, interval, count in rows if count > 0})
        t += step_s
    os.environ.pop(clock.OFFSET_ENV, None)
    return fetches, intervals, t


# --- 3. freshness --------------------------------------------------------------------------
def run_freshness(args) -> None:
    print("== freshness ==")
    step_s = args.step_hours * 3600
    horizon = args.days * 86400
    with TestWeb(hosts=0, pages=1, special=False, changing=True, max_seconds=3600) as web, \
            tempfile.TemporaryDirectory() as tmp:
        config = base_config(web)
        config.update.default_interval_s = 86400
        config.update.min_interval_s = 2 * 3600
        config.update.max_interval_s = 14 * 86400
        config.update.deferred_retry_s = 3600
        pages = [u for u in web.expected_reachable(web.seeds()) if "/c/" in u]
        outcomes = Counter()

        def count_outcome(url: str, when: float, outcome: str, earlier: list[float]) -> None:
            if earlier:
                unchanged = web.version_at(url, when) == web.version_at(url, earlier[-1])
                outcomes[(unchanged, outcome)] += 1

        fetches, _, end = recrawl(web, pages, config, int(horizon // step_s), step_s, Path(tmp), count_outcome)
        ours = freshness(web, fetches, CLOCK_START, end)
        total = sum(len(v) for v in fetches.values())
        uniform = uniform_freshness(web, pages, total, CLOCK_START, end)
        print(f"  {len(pages)} pages, {args.days} simulated days in {args.step_hours} h steps, {total} fetches")
        print(f"  freshness: ours {ours:.3f}   uniform schedule with the same {total} fetches {uniform:.3f}")
        by_period = defaultdict(list)
        for url in pages:
            by_period[web.change_period(url)].append(len(fetches[url]))
        for period, counts in sorted(by_period.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)):
            label = "never" if period is None else f"{period / 3600:g} h"
            print(f"  pages changing every {label:<7}: fetched {sum(counts) / len(counts):.1f} times each")
        unchanged = sum(v for (same, _), v in outcomes.items() if same)
        answered_304 = outcomes[(True, "not_modified")]
        print(f"  unchanged refetches answered 304: {answered_304} of {unchanged} "
              f"({100 * answered_304 / max(1, unchanged):.0f}%)")
    os.environ.pop(clock.OFFSET_ENV, None)


def shift(web, t: float) -> None:
    """Put both clocks at virtual time t (the crawler's by an offset from real time)."""
    offset = t - time.time()
    os.environ[clock.OFFSET_ENV] = repr(offset)
    web.set_clock(offset=offset)


def freshness(web, fetches: dict[str, list[float]], start: float, end: float, sample_s: float = 300) -> float:
    fresh = samples = 0
    for url, times in fetches.items():
        times = sorted(times)
        i = 0
        t = times[0] if times else end
        while t < end:
            while i + 1 < len(times) and times[i + 1] <= t:
                i += 1
            fresh += web.version_at(url, t) == web.version_at(url, times[i])
            samples += 1
            t += sample_s
    return fresh / max(1, samples)


def uniform_freshness(web, pages: list[str], budget: int, start: float, end: float) -> float:
    per_page = max(1, budget // len(pages))
    interval = (end - start) / per_page
    schedule = {url: [start + k * interval for k in range(per_page)] for url in pages}
    return freshness(web, schedule, start, end)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=["dedup", "neardup-set", "freshness"])
    parser.add_argument("--before", default=BEFORE_REV, help="git revision of the 'before' fingerprints")
    parser.add_argument("--stored", type=int, default=1_000_000,
                        help="random stored fingerprints beside the near-duplicate set's pages in update's search")
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--cycles", type=int, default=8)
    parser.add_argument("--pattern-per-cycle", type=int, default=10)
    parser.add_argument("--pattern-total", type=int, default=40)
    parser.add_argument("--days", type=float, default=7)
    parser.add_argument("--step-hours", type=float, default=4)
    args = parser.parse_args()
    if args.only in (None, "dedup"):
        run_dedup_traps(args)
    if args.only in (None, "neardup-set"):
        run_neardup_set(args)
    if args.only in (None, "freshness"):
        run_freshness(args)


if __name__ == "__main__":
    main()
