#!/usr/bin/env python3
"""Write the files generated from code: crawl.toml (every setting of cycles/config.py at its
default, documented) and deploy/grafana/crawl.json (the Grafana dashboard of the Prometheus
metrics). Tests check both are up to date (tests/test_scripts.py, tests/test_cli_ops.py,
tests/test_grafana_dashboard.py); run this after changing a setting or a panel.

    python scripts/regenerate.py                    # both
    python scripts/regenerate.py config             # crawl.toml only
    python scripts/regenerate.py --check            # exit 1, naming the file, if one is out of date
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # cycles, where the venv does not hold it

from generated import crawl_toml, grafana_dashboard  # noqa: E402

TARGETS = {"config": crawl_toml, "dashboard": grafana_dashboard}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="*", metavar="TARGET",
                        help="config (crawl.toml), dashboard (deploy/grafana/crawl.json); default: both")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file is out of date")
    args = parser.parse_args(argv)
    unknown = [name for name in args.targets if name not in TARGETS]
    if unknown:
        parser.error(f"unknown target {unknown[0]!r}: choose from {', '.join(TARGETS)}")
    stale = []
    for name in args.targets or list(TARGETS):
        module = TARGETS[name]
        wanted, path = module.text(), module.OUT
        if args.check:
            if not path.exists() or path.read_text() != wanted:
                stale.append(path)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(wanted)
        print(f"wrote {path.relative_to(module.REPO)}")
    for path in stale:
        print(f"{path.relative_to(TARGETS['config'].REPO)} is out of date: run python scripts/regenerate.py",
              file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
