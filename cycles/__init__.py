"""crawl: a polite batch web crawler (generate -> fetch -> update over a Parquet crawl DB).

For consumers of a crawl, ``cycles.open(data)`` gives its tables as DuckDB relations
(cycles/commands/views.py, :class:`cycles.commands.views.Crawl`)::

    import cycles
    crawl = cycles.open("data")              # a folder, or "s3://bucket/prefix"
    crawl.crawldb.filter("status = 'fetched'").count("*").fetchall()
"""


def open(data, config=None, *, verify=True):  # noqa: A001 (cycles.open, as the issue asks; the builtin is not used here)
    """Open the crawl in ``data`` (a folder or ``s3://bucket/prefix``) for reading; see
    :func:`cycles.commands.views.open_crawl`. Imported lazily: ``import cycles`` stays cheap."""
    from cycles.commands.views import open_crawl

    return open_crawl(data, config, verify=verify)
