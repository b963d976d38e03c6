"""A local S3 server (moto) for the tests that run the crawl on an s3:// store."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator

import pytest

from testweb.moto import STRAY_AWS_SETTINGS, moto_server_path, start_moto, stop_moto

HOST = "127.0.83.1"
BUCKET = "crawl-test"
SERVER_MAX_S = 900


@contextmanager
def moto_s3() -> Iterator[dict]:
    """Start moto_server on loopback, point the AWS settings at it, create the bucket."""
    if not moto_server_path().exists():
        pytest.skip("moto_server is not installed (pip install 'moto[server]')")
    proc, env = start_moto(HOST)
    watchdog = threading.Timer(SERVER_MAX_S, proc.kill)  # never outlives a hung test run
    watchdog.daemon = True
    watchdog.start()
    try:
        with s3_settings_with_bucket(env, BUCKET):
            yield env
    finally:
        watchdog.cancel()
        stop_moto(proc)


@contextmanager
def s3_settings_with_bucket(settings: dict[str, str], bucket: str) -> Iterator[None]:
    """This process's AWS settings pointed at an S3 server (``settings``), the user's stray
    ones (a profile, a real endpoint) removed so that no request can leave for real AWS; then
    ``bucket`` is created there. The environment is restored on exit."""
    with pytest.MonkeyPatch.context() as patch:
        for key, value in settings.items():
            patch.setenv(key, value)
        for key in STRAY_AWS_SETTINGS:
            patch.delenv(key, raising=False)
        import boto3

        boto3.client("s3").create_bucket(Bucket=bucket)
        yield
