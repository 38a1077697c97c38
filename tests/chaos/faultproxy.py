"""A TLS-terminating HTTP/1.1 proxy between one replica of our server and kube-apiserver, with faults.

The replica's kubeconfig names the proxy; the proxy presents the control plane's serving
certificate and calls kube-apiserver with the admin client certificate. Each request is read whole
(head and Content-Length body), sent upstream on a fresh connection with `Connection: close`, and
the answer relayed until upstream closes it: one request per connection, so the proxy never has
to find where a response (a watch stream included) ends, and the client opens a new connection for
its next request as the answer told it to.

Faults (`ProxyFaults`, changed at any time by the nemesis): a request delayed, a connection cut
before or after its request reached kube-apiserver (the client cannot tell whether a write
happened), a write answered with 409 / 429 / 500 / 503 without reaching it, and `drop_all()`, which
cuts every open connection, watches included. Every write is recorded (`WriteSeen`) with the status
the replica got.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass

from history import WriteSeen

HOP_BY_HOP = ("connection", "keep-alive")
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
REASONS = {409: "Conflict", 429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}


@dataclass
class ProxyFaults:
    delay: float = 0.0  # s before each request goes upstream
    drop: float = 0.0  # chance a connection is cut (half before, half after the request went up)
    error: float = 0.0  # chance a write is answered with one of `codes` instead of going up
    codes: tuple[int, ...] = (409, 429, 500, 503)

    def quiet(self) -> bool:
        return not (self.delay or self.drop or self.error)


class FaultProxy:
    def __init__(
        self, *, replica: str, upstream: tuple[str, int], server_ssl: ssl.SSLContext,
        client_ssl: ssl.SSLContext, rng: random.Random, record: Callable[[WriteSeen], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.replica = replica
        self.upstream = upstream
        self.server_ssl = server_ssl
        self.client_ssl = client_ssl
        self.rng = rng
        self.record = record
        self.clock = clock
        self.faults = ProxyFaults()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._open: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.server_ssl)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        self.drop_all()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)

    def drop_all(self) -> int:
        """Cut every open connection (both sides); returns how many."""
        n = len(self._open)
        for w in list(self._open):
            w.transport.abort()
        self._open.clear()
        return n

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        up_writer: asyncio.StreamWriter | None = None
        method, path, status = "", "", 0
        clean = False  # ended as HTTP says (closed after the answer), not cut
        arrived = 0.0
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = [h for h in lines[1:] if h]
            length = next(
                (int(h.split(":", 1)[1]) for h in headers if h.lower().startswith("content-length:")), 0
            )
            body = await reader.readexactly(length) if length else b""
            arrived = self.clock()  # when the replica sent it (it cannot send while stopped)
            f = self.faults
            if f.delay:
                await asyncio.sleep(self.rng.uniform(0, f.delay))
            drop = f.drop and self.rng.random() < f.drop
            if drop and self.rng.random() < 0.5:
                return  # cut before kube-apiserver saw it
            if method in WRITES and f.error and self.rng.random() < f.error:
                status = self.rng.choice(f.codes)
                writer.write(_status_response(status))
                await writer.drain()
                clean = True
                return
            up_reader, up_writer = await asyncio.open_connection(
                *self.upstream, ssl=self.client_ssl, server_hostname=self.upstream[0]
            )
            self._open.add(up_writer)
            kept = [h for h in headers if h.split(":", 1)[0].strip().lower() not in HOP_BY_HOP]
            head = "\r\n".join([lines[0], *kept, "Connection: close"]) + "\r\n\r\n"
            up_writer.write(head.encode("latin-1"))
            up_writer.write(body)
            await up_writer.drain()
            first = True
            while chunk := await up_reader.read(65536):
                if first:
                    first = False
                    with contextlib.suppress(ValueError, IndexError):
                        status = int(chunk.split(b" ", 2)[1])
                    if drop:
                        status = 0
                        return  # cut after kube-apiserver acted on it
                writer.write(chunk)
                await writer.drain()
            clean = True
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError, ssl.SSLError):
            status = status or 0
        finally:
            if method in WRITES:
                self.record(WriteSeen(arrived, self.replica, method, path.split("?", 1)[0], status))
            for w in (writer, up_writer):
                if w is not None:
                    self._open.discard(w)
                    if clean:
                        w.close()
                    else:
                        w.transport.abort()


def _status_response(code: int) -> bytes:
    body = json.dumps({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": f"chaos: injected {code}", "reason": REASONS.get(code, "InternalError"), "code": code,
    }).encode()
    head = (f"HTTP/1.1 {code} {REASONS.get(code, 'Error')}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n")
    if code == 429:
        head += "Retry-After: 1\r\n"
    return (head + "\r\n").encode() + body
