"""A deterministic multi-host web on loopback addresses, for tests, the demo and benchmarks.

- :mod:`cycles.testweb.site`: the model (hosts, robots.txt, pages, links) and the oracle
  (:meth:`Web.expected_reachable`, :meth:`Web.must_not_request`).
- :mod:`cycles.testweb.server`: the asyncio HTTP/1.1 server and its JSON-lines request log.
- :mod:`cycles.testweb.traps`, :mod:`cycles.testweb.neardups`, :mod:`cycles.testweb.changing`:
  optional kinds of hosts (crawler traps, labelled near-duplicates, pages that change on a
  virtual clock), off unless asked for (``traps=True``...).
- :mod:`cycles.testweb.harness`: :class:`TestWeb`, which runs the server in a subprocess.
- ``python -m cycles.testweb serve|bench``: the command line.
"""

from cycles.testweb.harness import TestWeb, TestWebError
from cycles.testweb.site import Web

__all__ = ["TestWeb", "TestWebError", "Web"]
