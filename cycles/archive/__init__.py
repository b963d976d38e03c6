"""``crawl export``: what web-archive tools read, made from a fetched segment's WARC files.

- cycles/archive/records.py: one pass over the WARC files (every record's type, offsets, headers);
- cycles/archive/cdxj.py: the CDXJ index (cdxj-indexer's, SURT-sorted; pywb reads it);
- cycles/archive/ccindex.py: the URL index in Parquet with Common Crawl's cc-index columns;
- cycles/archive/wet.py: WET files, the pages' text with their detected language;
- cycles/archive/export.py: the entry point, :func:`export_segment`.

Everything goes to ``segments/<id>/archive/`` (the export stage's own folder); the WARC
files themselves are written by fetch (cycles/fetch/warc_records.py) and never changed.
"""
