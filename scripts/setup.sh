#!/usr/bin/env bash
# Create .venv and install crawl with its test dependencies (idempotent, quiet).
set -euo pipefail
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
