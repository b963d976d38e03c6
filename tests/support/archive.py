"""Reading the archive back: one WARC record at an offset, and replay with pywb."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def record_at(path: Path, offset: int, length: int | None = None):
    with open(path, "rb") as fh:
        fh.seek(offset)
        data = fh.read(length) if length is not None else fh.read()
    import io

    record = next(iter(ArchiveIterator(io.BytesIO(data))))
    record.body = record.content_stream().read()
    return record


@contextlib.contextmanager
def wayback(root: Path, segment_dirs: list[Path]):
    """pywb's `wayback` on loopback over a collection of the segments' WARCs and CDXJ (linked
    into pywb's collections/<name>/{archive,indexes} layout); yields the collection's URL and
    stops pywb on leaving (also tests/test_export_all.py)."""
    for sub in ("archive", "indexes"):
        (root / "collections" / "crawl" / sub).mkdir(parents=True)
    for folder in segment_dirs:
        for path in (folder / "warc").glob("*.warc.gz"):
            os.symlink(path, root / "collections" / "crawl" / "archive" / path.name)
        for path in (folder / "archive").glob("*.cdxj"):
            os.symlink(path, root / "collections" / "crawl" / "indexes" / path.name)
    port = _free_port()
    wayback = Path(sys.executable).with_name("wayback")
    proc = subprocess.Popen([str(wayback), "--port", str(port), "--bind", "127.0.0.1", "-d", str(root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("pywb did not start: " + proc.stderr.read().decode()[-2000:])
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/crawl"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def replay(url: str):
    """GET through pywb without following redirects: (status, headers, body)."""
    opener = urllib.request.build_opener(_NoRedirect, urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def capture_time(row) -> str:
    return row["fetched_at"].strftime("%Y%m%d%H%M%S")
