"""Parse in the fetch worker, or hand pages to parser processes? (issue #3: "measure whether
parsing in the same process or in separate parser processes keeps both cores busy").

Usage::

    .venv/bin/python scripts/bench_parse_ipc.py [--pages 300] [--repeat 3]

On the pages scripts/bench_fetch.py crawls (cycles.testweb, ~30 KB), prints CPU µs per page:

1. **inline**: ``parse_html`` in the process that fetched the page (what cycles/fetch/worker.py
   does);
2. **hand-off**: the fetching process sends the body and URL over a pipe to a parser process,
   which parses and sends the result back (text, title, links, fingerprints, pickled); the
   CPU of both sides is counted (``time.process_time`` in each process).

The hand-off costs the parse plus the copies and pickling on both sides. With as many fetch
workers as cores, each parsing inline, both cores are already busy on the fetch stage's own
work, so extra CPU per page is lost throughput; a hand-off only pays where the network loop
would otherwise wait on the parser, which scripts/bench_fetch.py's per-host gap distribution
shows (p50 near the 1 s delay: hosts are not waiting on the crawler).
"""

from __future__ import annotations

import argparse
import multiprocessing
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_parse import testweb_pages  # noqa: E402

from cycles.fetch.parse import parse_html  # noqa: E402


def inline_us(pages, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        for body, url, content_type in pages:
            parse_html(body, url, content_type)
        best = min(best, time.process_time() - started)
    return best / len(pages) * 1e6


def parser_process(conn) -> None:
    """Receive (url, content type) + body, parse, send the pickled page; report own CPU
    from the first page on (start-up excluded)."""
    started = None
    while True:
        meta = conn.recv_bytes()
        started = time.process_time() if started is None else started
        if meta == b"stop":
            conn.send_bytes(pickle.dumps(time.process_time() - started))
            return
        url, content_type = pickle.loads(meta)
        body = conn.recv_bytes()
        conn.send_bytes(pickle.dumps(parse_html(body, url, content_type), protocol=pickle.HIGHEST_PROTOCOL))


def handoff_us(pages, repeat: int) -> tuple[float, float]:
    """(fetching side, parser side) CPU µs per page, best run."""
    best = (float("inf"), float("inf"))
    context = multiprocessing.get_context("spawn")
    for _ in range(repeat):
        ours, theirs = context.Pipe()
        child = context.Process(target=parser_process, args=(theirs,))
        child.start()
        started = time.process_time()
        for body, url, content_type in pages:
            ours.send_bytes(pickle.dumps((url, content_type)))
            ours.send_bytes(body)
            pickle.loads(ours.recv_bytes())
        parent = time.process_time() - started
        ours.send_bytes(b"stop")
        child_cpu = pickle.loads(ours.recv_bytes())
        child.join()
        if parent + child_cpu < sum(best):
            best = (parent, child_cpu)
    return best[0] / len(pages) * 1e6, best[1] / len(pages) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pages", type=int, default=300)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    pages = testweb_pages(args.pages)
    size = sum(len(b) for b, _, _ in pages) / len(pages)
    inline = inline_us(pages, args.repeat)
    sender, parser = handoff_us(pages, args.repeat)
    print(f"{len(pages)} test-web pages, {size / 1000:.1f} KB on average; CPU µs per page, best of {args.repeat}")
    print(f"  inline parse (the fetch worker today)      {inline:8.0f}")
    print(f"  hand-off: fetching side (send, unpickle)   {sender:8.0f}")
    print(f"  hand-off: parser side (receive, parse, pickle) {parser:4.0f}")
    print(f"  hand-off total                             {sender + parser:8.0f}  "
          f"({(sender + parser) / inline - 1:+.0%} CPU per page)")


if __name__ == "__main__":
    main()
