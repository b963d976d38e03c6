#!/usr/bin/env bash
# Create .venv and install crawl with its test dependencies (idempotent, quiet).
set -euo pipefail
if [ "${1:-}" = "-h" ] || [ "${1:-}" = "--help" ]; then
    echo "usage: bash scripts/setup.sh   (PYTHON=python3.12 to choose the interpreter)"
    echo "Makes .venv and installs crawl with its test dependencies; again only after pyproject.toml changed."
    exit 0
fi
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
# Reinstall only when pyproject.toml changed since the last install.
stamp=.venv/.crawl-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/pip install --quiet --disable-pip-version-check -e '.[test]'
    touch "$stamp"
fi
# iproute2 (`ip netns`) for the cluster test across network namespaces (tests/test_cluster_netns.py,
# which skips without it or without root): installed when missing and we are root on Debian.
if ! command -v ip >/dev/null && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null
fi
