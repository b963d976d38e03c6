#!/usr/bin/env bash
# The README's first command: set up, start the local demo web on loopback, crawl it
# for a few cycles into ./data (the embedded default store), print `crawl status`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python scripts/demo.py "$@"
