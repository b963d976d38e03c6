"""``python -m cycles`` is the ``crawl`` command."""

from cycles.commands.cli import app

app(prog_name="crawl")
