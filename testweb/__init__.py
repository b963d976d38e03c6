"""A deterministic multi-host web on loopback addresses, for tests, the demo and benchmarks.

Tooling, not product: this package lives beside ``cycles`` and is not in the wheel. Tests
import it through pytest's ``pythonpath = ["."]``, scripts through the repository root on
``sys.path``.

- :mod:`testweb.web`: :class:`Web`, the whole web for one set of parameters, and the oracle
  (:meth:`Web.expected_reachable`, :meth:`Web.must_not_request`); its module doc describes
  the shape of the web.
- :mod:`testweb.model`: names, addresses, filler text and the records hosts answer with
  (:class:`~testweb.model.Page`, :class:`~testweb.model.Robots`...).
- :mod:`testweb.host`: the base classes of every host; :mod:`testweb.regular` and
  :mod:`testweb.special`: the hosts that are always there (``h{i}``, robots.txt variants,
  ``odd``).
- :mod:`testweb.traps`, :mod:`testweb.neardups`, :mod:`testweb.changing`,
  :mod:`testweb.hostile`: optional kinds of hosts (crawler traps, labelled near-duplicates,
  pages that change on a virtual clock, hostile servers), off unless asked for
  (``traps=True``...).
- :mod:`testweb.neardup_set`: a labelled set of near-duplicate page pairs, served by no
  host (scored on the bodies); :mod:`testweb.languages`: filler text in Japanese, Chinese,
  Thai, Korean and Arabic.
- :mod:`testweb.respond`: server glue (rendering a page, conditional requests, HTTP dates);
  :mod:`testweb.server`: the asyncio HTTP/1.1 server and its JSON-lines request log.
- :mod:`testweb.tls`: HTTPS (a test CA made at run time, certificates by SNI, hosts with bad
  TLS, http -> https redirects, per-host round trips; ``https=``, ``tls=True``, ``rtt_ms=``)
  and :mod:`testweb.http2`: HTTP/2 where a host offers it (``h2=``).
- :mod:`testweb.harness`: :class:`TestWeb`, which runs the server in a subprocess.
- ``python -m testweb serve|bench``: the command line.

Imports go one way: model <- respond <- host <- regular, special, kinds <- web <- server,
harness. No module imports another's private names.
"""

from testweb.harness import TestWeb, TestWebError
from testweb.web import Web

__all__ = ["TestWeb", "TestWebError", "Web"]
