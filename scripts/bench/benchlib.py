"""What the benchmarks share: the repository's place, sizes, memory peaks, the machine's load,
tables, and the subcommand dispatch of the three entry points (web.py, scale.py, cluster.py).

The benchmark modules beside this file are imported by those entry points (their folder is
the first entry of ``sys.path`` when one of them runs), never by reaching through
``sys.path`` from one script into another. ``testweb/`` is tooling beside the product, not
installed with it, so the repository root is put on ``sys.path`` once, here.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(1, str(REPO))


def parse_size(text: str) -> int:
    """``100K``, ``1M``, ``2G`` or a plain count."""
    text = text.strip().upper()
    mult = {"K": 1_000, "M": 1_000_000, "G": 1_000_000_000}.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * mult)


def human(n: int) -> str:
    for unit, div in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def own_peak_rss() -> int:
    """This process's peak resident set (VmHWM), bytes; 0 where /proc has none."""
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return 0
    for line in lines:
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def load_average() -> str:
    """The 1/5/15-minute load, printed beside every figure: the machine is shared."""
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def print_table(columns: Sequence[tuple[str, int]], rows: Sequence[Sequence[str]]) -> None:
    """A fixed-width table: ``columns`` are (title, width), each row's cells already formatted."""
    head = " ".join(f"{title:>{width}}" for title, width in columns)
    print(head)
    print("-" * len(head))
    for row in rows:
        print(" ".join(f"{cell:>{width}}" for cell, (_, width) in zip(row, columns)))


def print_side_by_side(rows: Sequence[tuple[str, Callable[[dict], str]]], names: Sequence[str],
                      results: Sequence[dict]) -> None:
    """A markdown table, one column a crawler: each row a label and how to show a result's value."""
    width = max(len(label) for label, _ in rows)
    print("| " + " | ".join([" " * width, *names]) + " |")
    print("|" + "|".join(["-" * (width + 2)] + ["-" * (len(n) + 2) for n in names]) + "|")
    for label, show in rows:
        print("| " + " | ".join([label.ljust(width)] + [show(r).rjust(len(n)) for n, r in zip(names, results)]) + " |")


SCRAPY_PEER = Path(__file__).resolve().parent / "scrapy_peer.py"
"""The peer crawler's script (Scrapy with our politeness settings), run as a subprocess."""


def by_host_round_robin(urls: Iterable[str]) -> list[str]:
    """Page k of every host, then k+1: Scrapy's downloader counts the requests waiting in a
    host's slot against CONCURRENT_REQUESTS, so a host-ordered list would starve it; this is
    the order most favourable to Scrapy."""
    by_host: dict[str, list[str]] = {}
    for url in urls:
        by_host.setdefault(url.split("/")[2], []).append(url)
    groups = list(by_host.values())
    return [group[k] for k in range(max(map(len, groups), default=0)) for group in groups if k < len(group)]


def scrapy_peer_command(work: Path, urls: Iterable[str], seconds: float, *options: str) -> tuple[list[str], Path]:
    """The scrapy_peer command for ``urls`` (written to ``work``), and where it writes its stats."""
    urls_file, out = work / "scrapy-urls.txt", work / "scrapy-stats.json"
    urls_file.write_text("\n".join(urls) + "\n")
    return [sys.executable, str(SCRAPY_PEER), "--urls", str(urls_file), "--out", str(out), "--seconds", str(seconds),
            "--log", str(work / "scrapy.log"), *options], out


def dispatch(prog: str, doc: str, commands: dict[str, tuple[str, str]], argv: list[str] | None = None) -> int:
    """Run ``prog COMMAND [ARGS]``: ``commands`` maps a command to (module beside this file,
    one line of help). The module's ``main()`` parses the rest of the arguments itself, so
    ``prog COMMAND --help`` is that benchmark's own help."""
    argv = sys.argv[1:] if argv is None else argv
    listing = "\n".join(f"  {name:<11} {line}" for name, (_, line) in commands.items())
    parser = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"commands:\n{listing}\n\n`{prog} COMMAND --help` for a command's options.")
    parser.add_argument("command", choices=list(commands), metavar="COMMAND", help="one of: " + ", ".join(commands))
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    parser.parse_args(argv[:1])
    module = importlib.import_module(commands[argv[0]][0])
    sys.argv = [f"{prog} {argv[0]}", *argv[1:]]
    result = module.main()
    return result if isinstance(result, int) else 0
