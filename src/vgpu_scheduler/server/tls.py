"""Server TLS with certificate hot reload.

aiohttp hands our SSLContext to every new connection. Once a reload has loaded a newer pair, its
SNI callback (called on every handshake, with or without SNI) switches the connection to the context
of the newest pair: new connections get the new certificate, open ones keep theirs. Until then the
listener's context serves the first pair itself, with no Python call per handshake. Each reloaded
pair is loaded into a fresh context, never into the one in use: OpenSSL replaces a context's
certificate before it checks the key, so a failed load in place would leave a certificate without
its key and every handshake failing. A cheap poll of the files' stat replaces a file-watcher
dependency and also catches Kubernetes' atomic symlink swaps of mounted Secrets (cert-manager or
`vgpu-scheduler certs --every` rotating the Secret, kubelet updating the mounted files).

A pair that does not load (half-written rotation, key of another certificate) keeps the loaded pair
serving; the next change of the files is tried again. It is logged once, when a second poll finds
the files in the same broken state: a writer that replaces the two files one after the other
(`vgpu-scheduler certs`) passes through a certificate-without-its-key state for an instant, which is
not worth a warning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
from dataclasses import dataclass
from datetime import datetime

from cryptography import x509

from vgpu_scheduler.server.http2 import ALPN_PROTOCOLS

log = logging.getLogger(__name__)

RELOAD_INTERVAL_SECONDS = 1.0
"""How often the files' stat is compared: a stat per second costs nothing and a rotation is
served within a second."""

Signature = tuple[tuple[int, int, int, int], tuple[int, int, int, int]]
_UNREADABLE = "unreadable"
"""The failed state of files that cannot be stat'ed (no signature to remember)."""


def _signature(path: str) -> tuple[int, int, int, int]:
    st = os.stat(path)  # follows symlinks, so a swapped ..data link changes the inode
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True, slots=True)
class CertDetails:
    """What the gauges and the log say about the serving (leaf) certificate."""

    serial: int
    not_after: datetime

    @property
    def expiry_timestamp(self) -> float:
        return self.not_after.timestamp()


def leaf_details(pem: bytes) -> CertDetails:
    """The first certificate of a PEM chain: the one the server presents."""
    cert = x509.load_pem_x509_certificate(pem)
    return CertDetails(cert.serial_number, cert.not_valid_after_utc)


def _server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_alpn_protocols(ALPN_PROTOCOLS)  # every context: a reload's SNI switch keeps h2
    return context


class ReloadingCertificate:
    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context = _server_context()
        """What the listener is given; once a reload loaded a newer pair, each handshake is moved
        to `_serving` (until then there is nothing to switch, and no callback per handshake)."""
        self._serving = self.context
        self._loaded: Signature | None = None
        self._failed: Signature | str | None = None  # the broken state already logged
        self._suspect: Signature | str | None = None  # a broken state seen once, not logged yet
        self.details: CertDetails | None = None
        self.reloads = 0
        self.failures = 0
        self.load()

    def _select(self, conn: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext) -> None:
        conn.context = self._serving

    def _pair_signature(self) -> Signature:
        return (_signature(self.cert_file), _signature(self.key_file))

    def load(self) -> None:
        """Load the pair; raises on a broken pair so start-up fails loudly."""
        signature = self._pair_signature()
        fresh = _server_context()
        fresh.load_cert_chain(self.cert_file, self.key_file)
        # Read after loading: if the files changed in between, the signature taken before differs
        # from the files' and the next poll loads (and reads) them again.
        with open(self.cert_file, "rb") as f:
            details = leaf_details(f.read())
        if self._loaded is None:
            # The listener's own context serves the first pair itself (and is never reloaded).
            self.context.load_cert_chain(self.cert_file, self.key_file)
            fresh = self.context
        else:
            self.context.sni_callback = self._select
        self._serving, self.details = fresh, details
        self._loaded = signature
        self._failed = self._suspect = None
        self.reloads += 1

    def reload_if_changed(self) -> bool:
        try:
            signature = self._pair_signature()
        except OSError as exc:
            self._fail(None, f"certificate files unreadable: {exc}")
            return False
        if signature == self._loaded:
            self._failed = self._suspect = None  # back to the loaded files: a later break is new
            return False
        if signature == self._failed:
            return False
        try:
            self.load()  # again for a suspect state: the failure is logged on its second sight
        except (OSError, ValueError, ssl.SSLError) as exc:  # ValueError: cryptography's parse
            self._fail(signature, str(exc))
            return False
        assert self.details is not None
        log.info(
            "reloaded TLS certificate from %s: serial %x, expires %s",
            self.cert_file,
            self.details.serial,
            self.details.not_after.isoformat(),
        )
        return True

    def _fail(self, signature: Signature | None, reason: str) -> None:
        """One line per broken state of the files that lasts two polls, not one per poll."""
        state = signature if signature is not None else _UNREADABLE
        if state == self._failed:
            return
        if state != self._suspect:
            self._suspect = state  # maybe a rotation halfway through: look again next poll
            return
        self._failed = state
        self.failures += 1
        serving = (
            f"serial {self.details.serial:x}, expires {self.details.not_after.isoformat()}"
            if self.details
            else "none"
        )
        log.warning(
            "TLS certificate reload from %s and %s failed (%s); still serving the loaded one (%s)",
            self.cert_file,
            self.key_file,
            reason,
            serving,
        )

    async def watch(self, interval: float = RELOAD_INTERVAL_SECONDS) -> None:
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(Exception):
                self.reload_if_changed()
