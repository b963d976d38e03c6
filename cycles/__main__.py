"""``python -m cycles`` is the ``crawl`` command."""

from cycles.cli import app

app(prog_name="crawl")
