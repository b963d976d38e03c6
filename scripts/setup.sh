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
