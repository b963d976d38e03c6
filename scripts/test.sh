#!/usr/bin/env bash
# The test command of the README and of CI: set up, then run the whole suite.
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    echo "usage: bash scripts/test.sh [PYTEST ARGS]   e.g. -m \"not web\" (the fast tier), -n 0 -x tests/test_cli.py"
    echo "Sets up .venv (scripts/setup.sh), then runs the suite with pytest on every core; arguments go to pytest."
    exit 0
fi
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# pytest-xdist workers (`-n auto`: two per core for the full suite, which mostly waits, one
# per core for the CPU-bound fast tier: tests/conftest.py pytest_xdist_auto_num_workers), each taking whole test files (--dist loadfile), so a
# module's shared crawl (a scope="module" fixture) is made once. On the 2-core CI machine the
# full suite took 15.5 min with two workers under load, against ~20 min in one process.
# The fast tier (-m "not web") took 66 s for 1,531 tests on the 2-core machine, quiet, and the
# full suite 19.0 min for 1,982 (both measured 2026-12-07, before session 12). Session 12 cut
# the fast tier's CPU by a quarter (update's SQL planned once per bucket, not twice as big; one
# DuckDB database per process for plain reads; tests/conftest.py writes the bytecode cache even
# under PYTHONDONTWRITEBYTECODE=1): 135 -> 100 CPU-s, 71.5 -> 53-54 s wall for 1,532 tests at
# load 0.4-2.7 (-n 2 --dist loadfile, the two trees back to back, 2026-12-07). Session 13: a
# bucket task whose files hold no row skips DuckDB (docs/cluster.md), two slow tests do less of
# the same work (tests/update/test_hostrank.py, test_linkgraph.py), no Faker plugin: the tree
# before and after run side by side (-n 1 each, load 4-6, so each pays for the other): 126.7 ->
# 105.6, 120.2 -> 106.6, 108.9 -> 95.7 CPU-s (-11 to -17 %; back to back the noise was +-7 CPU-s).
# After the merges (quiet, load 0.5-2.7 at the starts, 1,561 tests, 2026-12-07): -n 2 --dist
# loadfile 50.1, 48.5, 54.2 s; this script with -m "not web" 57.2, 51.6 s. The full suite with
# four workers: 2,036 passed in 696 s (11.6 min), quiet (two workers: 19.0 min in session 12).
# --no-loadscope-reorder: the files go out in the order tests/conftest.py gives them, the
# longest first (xdist's own order, most tests first, left a 2-minute file alone at the end:
# the full suite took 20.0 min, one worker idle for its last 2-3 min).
# Pass -n 0 to run in one process (a debugger, -x on the first failure in file order).
exec .venv/bin/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder "$@"
