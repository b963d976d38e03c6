"""moto's S3 server on a loopback address: the only S3 the tests and benchmarks talk to.

Used by tests/test_s3.py (and the cluster test through it) and scripts/bench_cluster.py.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

STRAY_AWS_SETTINGS = ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3")
"""Settings of the user's own AWS set-up that would send requests elsewhere: removed while
the server is used."""


def moto_server_path() -> Path:
    """The ``moto_server`` command of this interpreter's environment (``moto[server]``)."""
    return Path(sys.executable).parent / "moto_server"


def free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def start_moto(host: str, log: Path | None = None, wait_s: float = 30.0) -> tuple[subprocess.Popen, dict]:
    """Start moto_server on ``host`` (a loopback address) and wait until it answers; returns
    the process and the AWS settings that point boto3 and pyarrow at it. Raises
    RuntimeError when it does not start within ``wait_s``."""
    port = free_port(host)
    stderr = log.open("wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen([str(moto_server_path()), "-H", host, "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            socket.create_connection((host, port), timeout=0.5).close()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                stop_moto(proc)
                raise RuntimeError("moto_server did not start (pip install 'moto[server]')") from None
            time.sleep(0.1)
    env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "testing",
           "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true"}
    return proc, env


def stop_moto(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
