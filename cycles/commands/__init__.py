"""Commands: the CLI, the run loop and what reads a whole crawl (status, report, views); on top of the stages (docs/architecture.md)."""
