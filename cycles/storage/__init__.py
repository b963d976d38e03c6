"""Storage: local and S3 files, atomic writes, Parquet checks, versions and locks; imports nothing of the crawl's domain (docs/architecture.md)."""
