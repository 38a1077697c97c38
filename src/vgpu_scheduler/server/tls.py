"""Server TLS with certificate hot reload.

aiohttp hands our SSLContext to every new connection, so reloading is just calling
load_cert_chain() again on the live context: connections opened after that get the new
certificate, open ones keep theirs. A cheap poll of the files' stat replaces a file-watcher
dependency and also catches Kubernetes' atomic symlink swaps of mounted Secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl

log = logging.getLogger(__name__)


def _signature(path: str) -> tuple[int, int, int, int]:
    st = os.stat(path)  # follows symlinks, so a swapped ..data link changes the inode
    return (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns)


class ReloadingCertificate:
    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._loaded: tuple[tuple[int, int, int, int], tuple[int, int, int, int]] | None = None
        self.reloads = 0
        self.load()

    def load(self) -> None:
        """Load the pair; raises on a broken pair so start-up fails loudly."""
        signature = (_signature(self.cert_file), _signature(self.key_file))
        self.context.load_cert_chain(self.cert_file, self.key_file)
        self._loaded = signature
        self.reloads += 1

    def reload_if_changed(self) -> bool:
        try:
            signature = (_signature(self.cert_file), _signature(self.key_file))
        except OSError as exc:
            log.warning("certificate files unreadable, keeping the loaded pair: %s", exc)
            return False
        if signature == self._loaded:
            return False
        try:
            self.context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            # Half-written rotation (new cert, old key): keep serving the old pair, retry next poll.
            log.warning("certificate reload failed, keeping the loaded pair: %s", exc)
            return False
        self._loaded = signature
        self.reloads += 1
        log.info("reloaded TLS certificate from %s", self.cert_file)
        return True

    async def watch(self, interval: float = 1.0) -> None:
        while True:
            await asyncio.sleep(interval)
            with contextlib.suppress(Exception):
                self.reload_if_changed()
