"""A polite Scrapy crawler over the local test web: the peer that scripts/bench_fetch.py compares with.

Usage (normally started by bench_fetch.py as a subprocess)::

    .venv/bin/python scripts/scrapy_peer.py --urls urls.txt --resolve resolve.json \\
        --out stats.json [--seconds 60] [--pages 0] [--concurrency 256] [--log scrapy.log]

Configured as a polite crawler, the same promises ours makes:

- robots.txt obeyed (``ROBOTSTXT_OBEY``; product token ``crawlbot``, the token ours uses,
  so both see the same rules);
- one request in flight per host (``CONCURRENT_REQUESTS_PER_DOMAIN = 1``) and one second
  between requests to a host (``DOWNLOAD_DELAY = 1``, no jitter: ``DOWNLOAD_DELAY_JITTER = 0``,
  the Scrapy 2.19 name of ``RANDOMIZE_DOWNLOAD_DELAY = False``). Note Scrapy measures the delay
  from the *start* of the previous request, ours from the *end* of the previous response;
  bench_fetch.py counts both kinds of violation;
- AutoThrottle off, ``CONCURRENT_REQUESTS`` high (``--concurrency``);
- links followed with a ``LinkExtractor`` allowed to ``web.test`` (by URL pattern) (``rel=nofollow`` links skipped,
  as ours does); the start URLs are the same list ours is given.

Host names resolve to the test web's loopback addresses through :class:`MapResolver`, a
``TWISTED_DNS_RESOLVER`` (the 2.19 name of ``DNS_RESOLVER``) answering from ``--resolve``
(the JSON of ``TestWeb.resolve_map()``), so no /etc/hosts editing is needed.

Costs that would penalise Scrapy unfairly are turned off: per-request DEBUG logging
(``LOG_LEVEL = INFO``), cookies, the telnet console. Items are not exported (ours writes
WARC + Parquet; Scrapy here only parses, extracts the title and links).

At the end ``--out`` receives JSON: pages parsed (HTTP 200 HTML), links followed, the
Scrapy stats, and the wall time between the engine start and stop.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import scrapy
from scrapy import signals
from scrapy.crawler import CrawlerProcess
from scrapy.linkextractors import LinkExtractor
from twisted.internet import defer
from twisted.internet.error import DNSLookupError
from twisted.internet.interfaces import IResolverSimple
from zope.interface import implementer

ROBOTS_AGENT = "crawlbot"
USER_AGENT = "scrapy-peer/2 (crawlbot-compatible benchmark peer)"


@implementer(IResolverSimple)
class MapResolver:
    """Twisted simple resolver answering from a fixed name -> IPv4 map (setting ``PEER_RESOLVE``)."""

    def __init__(self, reactor, mapping: dict[str, str]):
        self.reactor = reactor
        self.mapping = {k.lower(): v for k, v in mapping.items()}

    @classmethod
    def from_crawler(cls, crawler, reactor):
        return cls(reactor, crawler.settings.getdict("PEER_RESOLVE"))

    def install_on_reactor(self) -> None:
        self.reactor.installResolver(self)

    def getHostByName(self, name: str, timeout=()):
        ip = self.mapping.get(name.lower().rstrip("."))
        if ip is None:
            # Only loopback addresses of the test web may be contacted.
            return defer.fail(DNSLookupError(f"{name} is not a test web host"))
        return defer.succeed(ip)


class PeerSpider(scrapy.Spider):
    name = "peer"

    def __init__(self, urls_file: str, **kwargs):
        super().__init__(**kwargs)
        self.urls_file = urls_file
        # Not allow_domains=["web.test"]: Scrapy compares it with the netloc, port included,
        # and the test web is on a non-default port, so it would reject every link.
        self.extractor = LinkExtractor(allow=[r"^https?://([^/:]+\.)?web\.test(:\d+)?(/|$)"])
        self.pages = 0
        self.links_followed = 0
        self.non_200 = 0

    @classmethod
    def from_crawler(cls, crawler, *args, **kwargs):
        spider = super().from_crawler(crawler, *args, **kwargs)
        crawler.signals.connect(spider.on_opened, signal=signals.spider_opened)
        crawler.signals.connect(spider.on_closed, signal=signals.spider_closed)
        return spider

    def on_opened(self, spider) -> None:
        self.t_open = time.monotonic()

    def on_closed(self, spider, reason) -> None:
        self.t_close = time.monotonic()
        self.close_reason = reason

    async def start(self):
        for url in Path(self.urls_file).read_text().split():
            yield scrapy.Request(url, callback=self.parse)

    def parse(self, response):
        if response.status != 200 or not isinstance(response, scrapy.http.HtmlResponse):
            self.non_200 += 1
            return
        self.pages += 1
        response.css("title::text").get()  # what a real spider would at least take
        for link in self.extractor.extract_links(response):
            if link.nofollow:
                continue
            self.links_followed += 1
            yield response.follow(link.url, callback=self.parse)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--urls", required=True, help="start URLs, one a line")
    ap.add_argument("--resolve", default=None, help="JSON host name -> loopback IP (default: none, Scrapy's own "
                    "resolver and DNS cache, as in a namespace made by testweb/namespace.py)")
    ap.add_argument("--out", required=True, help="JSON summary written at the end")
    ap.add_argument("--seconds", type=float, default=60.0, help="CLOSESPIDER_TIMEOUT (default 60)")
    ap.add_argument("--pages", type=int, default=0, help="CLOSESPIDER_PAGECOUNT (responses; 0: none)")
    ap.add_argument("--concurrency", type=int, default=256, help="CONCURRENT_REQUESTS (default 256)")
    ap.add_argument("--log", default=None, help="Scrapy log file (default stderr)")
    args = ap.parse_args(argv)

    settings = {
        "BOT_NAME": "scrapy-peer",
        "USER_AGENT": USER_AGENT,
        "ROBOTSTXT_OBEY": True,
        "ROBOTSTXT_USER_AGENT": ROBOTS_AGENT,
        "CONCURRENT_REQUESTS": args.concurrency,
        "CONCURRENT_REQUESTS_PER_DOMAIN": 1,
        "DOWNLOAD_DELAY": 1.0,
        "DOWNLOAD_DELAY_JITTER": 0.0,  # 2.19 name of RANDOMIZE_DOWNLOAD_DELAY = False
        "AUTOTHROTTLE_ENABLED": False,
        "CLOSESPIDER_TIMEOUT": args.seconds,
        "CLOSESPIDER_PAGECOUNT": args.pages,
        "DOWNLOAD_TIMEOUT": 30,
        "DOWNLOAD_MAXSIZE": 2 * 1024 * 1024,
        "RETRY_ENABLED": False,  # ours does not retry within a cycle either
        "COOKIES_ENABLED": False,
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "LOG_FILE": args.log,
    }
    if args.resolve:
        settings.update({"TWISTED_DNS_RESOLVER": MapResolver, "PEER_RESOLVE": json.loads(Path(args.resolve).read_text()),
                         "DNSCACHE_ENABLED": False})
    process = CrawlerProcess(settings, install_root_handler=args.log is None)
    crawler = process.create_crawler(PeerSpider)
    started = time.monotonic()
    process.crawl(crawler, urls_file=args.urls)
    process.start()
    wall = time.monotonic() - started
    spider = crawler.spider
    stats = {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v))
             for k, v in crawler.stats.get_stats().items()}
    summary = {
        "pages": spider.pages,
        "non_200": spider.non_200,
        "links_followed": spider.links_followed,
        "close_reason": getattr(spider, "close_reason", None),
        "crawl_seconds": round(getattr(spider, "t_close", time.monotonic()) - getattr(spider, "t_open", started), 3),
        "wall_seconds": round(wall, 3),
        "scrapy_version": scrapy.__version__,
        "stats": stats,
    }
    Path(args.out).write_text(json.dumps(summary, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
