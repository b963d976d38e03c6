"""cycles/fetch/tls.py's pure parts: the failure reason from libcurl's error, and the settings."""

from __future__ import annotations

import pytest

from cycles.config import Config, ConfigError, check_config
from cycles.fetch import tls

# (errno, message as libcurl 8 with OpenSSL 3 writes it, connect s, appconnect s) -> reason
CASES = [
    (60, "SSL certificate OpenSSL verify result: certificate has expired (10)", 0.001, 0, tls.EXPIRED),
    (60, "SSL certificate problem: certificate has expired", 0.001, 0, tls.EXPIRED),
    (60, "SSL: no alternative certificate subject name matches target hostname 'a.test'", 0.001, 0,
     tls.NAME_MISMATCH),
    (60, "SSL: certificate subject name 'b.test' does not match target host name 'a.test'", 0.001, 0,
     tls.NAME_MISMATCH),
    (51, "SSL: certificate subject name 'b' does not match target host name 'a'", 0.001, 0, tls.NAME_MISMATCH),
    (60, "SSL certificate OpenSSL verify result: self-signed certificate (18)", 0.001, 0, tls.UNTRUSTED_ISSUER),
    (60, "SSL certificate problem: unable to get local issuer certificate", 0.001, 0, tls.UNTRUSTED_ISSUER),
    (60, "SSL certificate problem: self-signed certificate in certificate chain", 0.001, 0, tls.UNTRUSTED_ISSUER),
    (83, "SSL: issuer check failed", 0.001, 0, tls.UNTRUSTED_ISSUER),
    (60, "SSL certificate problem: certificate is not yet valid", 0.001, 0, tls.OTHER),
    (35, "TLS connect error: error:0A00042E:SSL routines::tlsv1 alert protocol version", 0.001, 0,
     tls.PROTOCOL_TOO_OLD),
    (35, "error:0A000102:SSL routines::unsupported protocol", 0.001, 0, tls.PROTOCOL_TOO_OLD),
    (35, "error:0A00010B:SSL routines::wrong version number", 0.001, 0, tls.PROTOCOL_TOO_OLD),
    (35, "TLS connect error: error:0A000410:SSL routines::sslv3 alert handshake failure", 0.001, 0, tls.OTHER),
    (28, "Connection timed out after 2001 milliseconds", 0.001, 0, tls.HANDSHAKE_TIMEOUT),
    (59, "failed setting cipher list", 0, 0, tls.OTHER),
    (77, "error setting certificate file: /nope.pem", 0, 0, tls.OTHER),
]


@pytest.mark.parametrize("errno, message, connect_s, appconnect_s, reason", CASES)
def test_classify(errno, message, connect_s, appconnect_s, reason):
    assert tls.classify(errno, message, True, connect_s, appconnect_s) == reason


def test_not_tls_failures():
    # A TCP connect that timed out never reached TLS: a network error.
    assert tls.classify(28, "Connection timed out after 2001 milliseconds", True, 0.0, 0.0) is None
    # A timeout after the handshake (a slow body) is not a TLS failure either.
    assert tls.classify(28, "Operation timed out", True, 0.001, 0.002) is None
    assert tls.classify(7, "Failed to connect", True, 0, 0) is None
    assert tls.classify(6, "Could not resolve host: a.test", True, 0, 0) is None
    # The connection broke during the handshake: a network error, not a TLS verdict.
    assert tls.classify(35, "TLS connect error: error:0A000126:SSL routines::unexpected eof while reading",
                        True, 0.001, 0) is None
    assert tls.classify(35, "Send failure: Broken pipe", True, 0.001, 0) is None
    assert tls.classify(35, "OpenSSL SSL_connect: Connection reset by peer in connection to a:443", True,
                        0.001, 0) is None
    # Plain http has no TLS to fail.
    assert tls.classify(60, "certificate has expired", False, 0.001, 0) is None


def test_tls_settings_are_checked(tmp_path):
    config = Config()
    assert (config.fetch.ca_bundle, config.fetch.min_tls_version, config.fetch.tls_archive_anyway) == ("", "1.2", False)
    config.fetch.min_tls_version = "1.4"
    with pytest.raises(ConfigError, match="min_tls_version"):
        check_config(config)
    config = Config()
    config.fetch.ca_bundle = str(tmp_path / "missing.pem")
    with pytest.raises(ConfigError, match="ca_bundle"):
        check_config(config)
    (tmp_path / "ca.pem").write_text("x")
    config.fetch.ca_bundle = str(tmp_path / "ca.pem")
    check_config(config)


def test_backoff_doubles_per_consecutive_failure_and_success_clears():
    import datetime as dt
    from collections import Counter

    config = Config()
    stats: Counter = Counter()
    steps = tls.TlsSteps(config.fetch, stats)
    now = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    steps.load("a.test", {"tls_checked_at": now, "tls_failures": 2, "tls_error": "expired: x"})
    wait, unverified = steps.failed("a.test", tls.EXPIRED, "curl 60: certificate has expired", now)
    assert (wait, unverified) == (4 * 86400.0, False)
    row = steps.host_row("a.test")
    assert row["tls_failures"] == 3 and row["tls_error"].startswith("expired: curl 60")
    assert stats["tls/failures/expired"] == 1
    steps.succeeded("a.test", unverified=False, now=now)
    assert steps.host_row("a.test")["tls_failures"] == 0 and steps.host_row("a.test")["tls_error"] is None
    # A host never failing writes no TLS columns.
    assert steps.host_row("b.test") == {"tls_failures": None, "tls_error": None, "tls_checked_at": None}
    # Archive anyway: the first certificate failure opens the host unverified, no back-off.
    config.fetch.tls_archive_anyway = True
    assert tls.TlsSteps(config.fetch, Counter()).failed("c.test", tls.NAME_MISMATCH, "m", now) == (0.0, True)
    assert tls.TlsSteps(config.fetch, Counter()).failed("c.test", tls.HANDSHAKE_TIMEOUT, "m", now)[1] is False
    # A stalled handshake may be a passing overload: an hour, not a day, doubling likewise.
    config.fetch.tls_archive_anyway = False
    steps = tls.TlsSteps(config.fetch, Counter())
    assert steps.failed("d.test", tls.HANDSHAKE_TIMEOUT, "m", now)[0] == 3600.0
    assert steps.failed("d.test", tls.HANDSHAKE_TIMEOUT, "m", now)[0] == 7200.0


def test_tls_counters_in_fetch_json_and_prometheus(tmp_path):
    from prometheus_client.parser import text_string_to_metric_families

    from cycles import metrics

    counters = {"tls/failures/expired": 2, "tls/failures/handshake_timeout": 1, "tls/handshakes": 4,
                "tls/seconds": 0.2, "fetch/requests": 10}
    summary = metrics.fetch_summary(counters, 10.0)
    assert summary["fetch/tls_failures"] == 3 and summary["fetch/tls_failures/expired"] == 2
    assert summary["fetch/tls_ms_per_handshake"] == 50.0
    path = tmp_path / "crawl_fetch.prom"
    metrics.write_textfile(path, metrics.fetch_families(counters, 10.0, "seg", running=False, started_wall=0.0))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(path.read_text()) for s in f.samples}
    assert samples[("crawl_fetch_tls_failures_total", (("reason", "expired"),))] == 2
    assert samples[("crawl_fetch_tls_failures_total", (("reason", "handshake_timeout"),))] == 1
    assert samples[("crawl_fetch_tls_seconds_total", ())] == 0.2
    assert samples[("crawl_fetch_tls_handshakes_total", ())] == 4
