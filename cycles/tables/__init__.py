"""Tables: the crawl's shared tables (schema, crawl DB, host DB, link DB, segment, leases, pages feed) and the one bucket rule; built on cycles.storage, never on a stage (docs/architecture.md)."""
