"""The fetch stage's TLS policy: verify, classify a failure, back the host off, or archive anyway.

- Certificates are verified (libcurl's defaults, stated here so no option can drift:
  ``SSL_VERIFYPEER`` and ``SSL_VERIFYHOST`` 2), against the system CA store or
  ``fetch.ca_bundle``, with at least ``fetch.min_tls_version`` (default TLS 1.2).
- A failed handshake is classified by :func:`classify` (a pure function of libcurl's error
  number, its message and the connect/appconnect times) into one of :data:`REASONS`.
- The host is backed off as a whole, not URL by URL: the URL requested and every URL queued
  for the host get outcome ``tls_failed`` with the reason, the host is set aside, and its
  ``not_before`` (host DB) moves ``fetch.tls_failure_backoff_s`` ahead, doubling with each
  consecutive TLS failure across cycles (capped by ``fetch.max_not_before_s``); a
  ``handshake_timeout`` or ``other`` failure starts at an hour (:data:`TRANSIENT_BACKOFF_FRACTION`),
  as it may be a passing overload. The host DB
  keeps ``tls_failures`` and ``tls_error`` (``"expired: <libcurl's message>"``) for operators.
- Each failed exchange gets a WARC ``metadata`` record (``tls-verify: failed``,
  ``tls-failure: <reason>``, the libcurl error) — cycles/fetch/warc_records.py.
- Never a fallback to plain http: nothing here (or anywhere in fetch) rewrites a scheme.
- ``fetch.tls_archive_anyway`` (off by default), as archival crawlers (Heritrix, wget
  --no-check-certificate) do: after a certificate failure (expired, name_mismatch,
  untrusted_issuer) or a too-old protocol, the host is fetched *without verification* (for
  ``protocol_too_old`` down to TLS 1.0); every such exchange's metadata record says
  ``tls-verify: failed`` with the reason and ``tls-verification: skipped``. A stalled handshake
  stays a failure: there is nothing to archive.

Counters: ``tls/failures/<reason>``, ``tls/handshakes`` (new TLS connections) and
``tls/seconds`` (their handshake time, APPCONNECT_TIME - CONNECT_TIME, summed), plus
``tls/unverified`` (exchanges fetched under archive-anyway).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass

import pycurl

from cycles.config import FetchConfig

EXPIRED = "expired"
NAME_MISMATCH = "name_mismatch"
UNTRUSTED_ISSUER = "untrusted_issuer"
PROTOCOL_TOO_OLD = "protocol_too_old"
HANDSHAKE_TIMEOUT = "handshake_timeout"
OTHER = "other"
REASONS = (EXPIRED, NAME_MISMATCH, UNTRUSTED_ISSUER, PROTOCOL_TOO_OLD, HANDSHAKE_TIMEOUT, OTHER)
"""Why a TLS handshake failed (the ``tls/failures/<reason>`` counters and the host DB's ``tls_error``)."""

ARCHIVABLE = frozenset({EXPIRED, NAME_MISMATCH, UNTRUSTED_ISSUER, PROTOCOL_TOO_OLD})
"""Failures ``fetch.tls_archive_anyway`` fetches through (the others got no server to talk to)."""

VERDICTS = ARCHIVABLE
"""Failures that say what the server is (its certificate, its protocol): they stay until its
operator acts, so the host is left alone ``fetch.tls_failure_backoff_s``."""

TRANSIENT_BACKOFF_FRACTION = 1 / 24
"""A stalled handshake or an unclassified failure may be a passing overload (seen on the test
web at load 12 with a 2 s connect timeout: 53 good hosts timed out): its back-off starts at
this fraction of ``fetch.tls_failure_backoff_s`` (an hour of the default day), doubling alike."""

# libcurl error numbers (curl/curl.h).
CURLE_SSL_CONNECT_ERROR = 35
CURLE_PEER_FAILED_VERIFICATION = 60
CURLE_OBSOLETE51 = 51  # before 7.62 "SSL peer certificate or SSH remote key was not OK" (name check)
CURLE_OPERATION_TIMEDOUT = 28
CURLE_SSL_CERTPROBLEM = 58
CURLE_SSL_CIPHER = 59
CURLE_SSL_CACERT_BADFILE = 77
CURLE_SSL_ISSUER_ERROR = 83
CURLE_SSL_PINNEDPUBKEYNOTMATCH = 90
CURLE_SSL_INVALIDCERTSTATUS = 91
_OTHER_TLS_ERRORS = frozenset({CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER, CURLE_SSL_CACERT_BADFILE,
                               CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS})

# Phrases of OpenSSL's verify results (X509_verify_cert_error_string) and alerts, as libcurl
# puts them in its message, lower-cased.
_EXPIRED = ("certificate has expired", "certificate expired")
_NAME = ("no alternative certificate subject name", "subject name does not match",
         "does not match target host", "hostname mismatch", "certificate subject name")
_ISSUER = ("self-signed certificate", "self signed certificate", "unable to get local issuer",
           "unable to verify the first certificate", "unable to get issuer certificate", "unknown ca",
           "certificate chain", "untrusted", "issuer")
_TRANSPORT = ("connection reset", "broken pipe", "send failure", "recv failure", "unexpected eof",
              "connection refused", "network is unreachable")
"""A 35 whose message names the transport, not TLS: the connection broke during the
handshake. A network error (retried, then the host set aside after fetch.max_host_failures),
not a day's TLS back-off for what may be a blip."""
_OLD = ("unsupported protocol", "alert protocol version", "wrong version number", "no protocols available",
        "version too low", "unknown protocol", "inappropriate fallback")

_VERIFY_PHRASES = ((_EXPIRED, EXPIRED), (_NAME, NAME_MISMATCH), (_ISSUER, UNTRUSTED_ISSUER))
"""A failed verification (60; 51 before libcurl 7.62): the first reason whose phrases the message has."""
_CONNECT_PHRASES = ((_TRANSPORT, None), (_OLD, PROTOCOL_TOO_OLD), (_EXPIRED, EXPIRED))
"""A failed handshake (35): a transport phrase makes it no TLS failure at all (None)."""


def _by_phrase(text: str, table: tuple, otherwise: str) -> str | None:
    """The reason of the first (phrases, reason) row of ``table`` one of whose phrases is in
    ``text`` (lower-cased libcurl message), else ``otherwise``."""
    for phrases, reason in table:
        if any(p in text for p in phrases):
            return reason
    return otherwise


TLS_VERSIONS = {"1.0": pycurl.SSLVERSION_TLSv1_0, "1.1": pycurl.SSLVERSION_TLSv1_1,
                "1.2": pycurl.SSLVERSION_TLSv1_2, "1.3": pycurl.SSLVERSION_TLSv1_3}
"""``fetch.min_tls_version`` -> libcurl's SSLVERSION value (a minimum, not an exact version)."""

SECLEVEL0_CIPHERS = "DEFAULT:@SECLEVEL=0"
"""OpenSSL 3 refuses TLS 1.0/1.1 (SHA-1 handshake signatures) at its default security level:
only an unverified archive-anyway fetch of a ``protocol_too_old`` host lowers it."""


def classify(errno: int, message: str, https: bool, connect_s: float, appconnect_s: float) -> str | None:
    """The :data:`REASONS` entry of a failed transfer, or None when it is not a TLS failure.

    ``connect_s`` and ``appconnect_s`` are libcurl's CONNECT_TIME and APPCONNECT_TIME: a
    timeout (28) after TCP connected (connect > 0) and before TLS finished (appconnect 0) on
    an https URL is a stalled handshake; before TCP connected it is a network error.
    """
    if not https:
        return None
    text = (message or "").lower()
    if errno == CURLE_PEER_FAILED_VERIFICATION:
        return _by_phrase(text, _VERIFY_PHRASES, OTHER)
    if errno == CURLE_OBSOLETE51:
        return _by_phrase(text, _VERIFY_PHRASES[:1], NAME_MISMATCH)
    if errno == CURLE_SSL_ISSUER_ERROR:
        return UNTRUSTED_ISSUER
    if errno == CURLE_SSL_CONNECT_ERROR:
        return _by_phrase(text, _CONNECT_PHRASES, OTHER)
    if errno == CURLE_OPERATION_TIMEDOUT:
        return HANDSHAKE_TIMEOUT if connect_s > 0 and appconnect_s == 0 else None
    if errno in _OTHER_TLS_ERRORS:
        return OTHER
    return None


def configure(curl: pycurl.Curl, fc: FetchConfig, unverified_for: str | None = None) -> None:
    """TLS options of one transfer (set after every reset). ``unverified_for``: the failure
    reason an archive-anyway fetch goes through unverified (module doc)."""
    if fc.ca_bundle:
        curl.setopt(pycurl.CAINFO, fc.ca_bundle)
    if unverified_for is None:
        curl.setopt(pycurl.SSL_VERIFYPEER, 1)
        curl.setopt(pycurl.SSL_VERIFYHOST, 2)
        curl.setopt(pycurl.SSLVERSION, TLS_VERSIONS[fc.min_tls_version])
        if fc.min_tls_version in ("1.0", "1.1"):
            # Asked for on purpose: without it OpenSSL 3 would still refuse TLS 1.0/1.1.
            curl.setopt(pycurl.SSL_CIPHER_LIST, SECLEVEL0_CIPHERS)
        return
    curl.setopt(pycurl.SSL_VERIFYPEER, 0)
    curl.setopt(pycurl.SSL_VERIFYHOST, 0)
    if unverified_for == PROTOCOL_TOO_OLD:
        curl.setopt(pycurl.SSLVERSION, pycurl.SSLVERSION_TLSv1_0)
        curl.setopt(pycurl.SSL_CIPHER_LIST, SECLEVEL0_CIPHERS)
    else:
        curl.setopt(pycurl.SSLVERSION, TLS_VERSIONS[fc.min_tls_version])


@dataclass
class HostTls:
    """A host's TLS record, loaded from and written to the host DB (schema.HOSTS)."""

    failures: int = 0
    error: str | None = None
    checked_at: dt.datetime | None = None
    unverified_for: str | None = None
    """Set when archive-anyway fetches this host unverified for this reason (this run only)."""
    changed: bool = False
    """Something to write to the host DB (a failure, or a success after failures)."""


class TlsSteps:
    """The TLS steps of one partition's fetch, counting into ``stats``."""

    def __init__(self, fc: FetchConfig, stats: Counter):
        self.fc = fc
        self.stats = stats
        self.hosts: dict[str, HostTls] = {}

    def load(self, host: str, state: dict | None) -> None:
        """The host DB row's TLS columns (rows written before they existed read as null)."""
        if state is not None and state.get("tls_checked_at") is not None:
            self.hosts[host] = HostTls(int(state.get("tls_failures") or 0), state.get("tls_error"),
                                       state["tls_checked_at"])

    def unverified_for(self, host: str) -> tuple[str, str] | None:
        """(reason, error) when archive-anyway fetches the host unverified, else None."""
        record = self.hosts.get(host)
        if record is None or record.unverified_for is None:
            return None
        return record.unverified_for, record.error or ""

    def observe(self, curl: pycurl.Curl, url: str, error: tuple[int, str] | None) -> str | None:
        """After a transfer: count a new handshake's time; the failure reason, if TLS failed."""
        https = url[:6].lower() == "https:"
        if not https:
            return None
        connect_s = curl.getinfo(pycurl.CONNECT_TIME)
        appconnect_s = curl.getinfo(pycurl.APPCONNECT_TIME)
        if appconnect_s > 0:  # 0 on a reused connection: no handshake this time
            self.stats["tls/handshakes"] += 1
            self.stats["tls/seconds"] = round(self.stats["tls/seconds"] + max(0.0, appconnect_s - connect_s), 6)
        if error is None:
            return None
        return classify(error[0], error[1], True, connect_s, appconnect_s)

    def succeeded(self, host: str, unverified: bool, now: dt.datetime) -> None:
        """A verified https answer: a run of TLS failures ends (the host DB forgets the error)."""
        record = self.hosts.get(host)
        if record is not None and not unverified and (record.failures or record.error):
            record.failures, record.error, record.checked_at, record.changed = 0, None, now, True

    def failed(self, host: str, reason: str, message: str, now: dt.datetime) -> tuple[float, bool]:
        """Record a failure; returns (host back-off in seconds, fetch it unverified now?)."""
        self.stats[f"tls/failures/{reason}"] += 1
        record = self.hosts.setdefault(host, HostTls())
        record.failures += 1
        record.error = describe(reason, message)
        record.checked_at, record.changed = now, True
        if self.fc.tls_archive_anyway and reason in ARCHIVABLE and record.unverified_for is None:
            record.unverified_for = reason
            return 0.0, True
        base = self.fc.tls_failure_backoff_s * (1.0 if reason in VERDICTS else TRANSIENT_BACKOFF_FRACTION)
        wait = base * 2 ** min(record.failures - 1, 20)
        return min(wait, self.fc.max_not_before_s), False

    def host_row(self, host: str) -> dict:
        """The TLS columns of the host's HOSTS row (null when nothing is known or changed)."""
        record = self.hosts.get(host)
        if record is None or not record.changed:
            return {"tls_failures": None, "tls_error": None, "tls_checked_at": None}
        return {"tls_failures": record.failures, "tls_error": record.error, "tls_checked_at": record.checked_at}


def describe(reason: str, message: str) -> str:
    """``"expired: SSL certificate OpenSSL verify result: certificate has expired (10)"``."""
    return f"{reason}: {(message or '').strip()}"[:500]


def metadata_fields(verify: str, reason: str | None, message: str | None, skipped: bool) -> str:
    """The WARC metadata record's TLS lines (application/warc-fields)."""
    fields = f"tls-verify: {verify}\r\n"
    if reason:
        fields += f"tls-failure: {reason}\r\n"
    if message:
        fields += "tls-error: " + message.replace("\r", " ").replace("\n", " ") + "\r\n"
    if skipped:
        fields += "tls-verification: skipped (fetch.tls_archive_anyway)\r\n"
    return fields
