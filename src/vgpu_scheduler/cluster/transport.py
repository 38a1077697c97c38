"""How requests reach "the API server": over HTTP(S), or straight into a MemoryCluster.

Over HTTP(S), short requests go through our lean keep-alive client (cluster/http1.py) and watches
through its streaming twin (cluster/http1stream.py), each on a connection of its own.

Both transports speak the same tiny protocol, so `KubeClient` (and everything above it) runs the
same code against a real cluster, the fake API server, and the in-process cluster.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
import urllib.parse
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any, Protocol

import msgspec

from vgpu_scheduler.cluster.apistats import WATCH, ApiStats
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError
from vgpu_scheduler.cluster.http1 import Http1Pool, HttpProtocolError
from vgpu_scheduler.cluster.http1stream import open_line_stream
from vgpu_scheduler.cluster.writeguard import check_write
from vgpu_scheduler.gctuning import gc_paused

log = logging.getLogger(__name__)

encode_body = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class Transport(Protocol):
    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
        content_type: str | None = None,
        answer: bool = True,
    ) -> tuple[int, dict[str, Any]]:
        """One request; returns (HTTP status, decoded JSON body). Non-2xx statuses are returned,
        not raised; a request that got no answer raises ApiConnectionError.

        `answer=False`: the caller reads nothing of a 2xx body, so an empty dict may come back
        instead of it (a write's answer is the whole object: decoding it for nobody is most of
        what a small write costs the client). A non-2xx body is always decoded."""
        ...

    def stream(
        self, path: str, params: Mapping[str, str] | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        """A watch: yields each decoded line. Raises ApiError when the server answers non-200 and
        ApiConnectionError when the stream is cut; ends normally when the server ends it."""
        ...

    async def close(self) -> None: ...

    def with_own_rate_limit(self, qps: float | None = None, burst: int | None = None) -> Transport:
        """The same connection with a client-side rate limiter of its own (by default the same qps
        and burst)."""
        ...


class AuthProvider(Protocol):
    async def authorization(self) -> str | None:
        """The Authorization header value (e.g. "Bearer ..."), refreshed as the source requires."""
        ...

    async def invalidate(self) -> None:
        """Called after a 401: the next authorization() must re-read its source."""
        ...


class StaticAuth:
    def __init__(self, header: str | None) -> None:
        self._header = header

    async def authorization(self) -> str | None:
        return self._header

    async def invalidate(self) -> None:
        return None


def decode_json(raw: bytes) -> Any:
    """msgspec decode, with the cyclic GC paused for big bodies (see gc_paused)."""
    if len(raw) < 65536:
        return _decode(raw)
    with gc_paused():
        return _decode(raw)


def decode_body(raw: bytes) -> dict[str, Any]:
    """JSON object body, or {"message": text} for anything else (proxy pages, empty bodies)."""
    try:
        body = decode_json(raw) if raw else {}
    except msgspec.DecodeError:
        return {"message": raw[:512].decode("utf-8", "replace").strip()}
    return body if isinstance(body, dict) else {"message": str(body)}


class TokenBucket:
    """Client-side rate limiter like client-go's: `qps` tokens per second, at most `burst` saved.
    Waiters reserve a token first (the count may go negative), so they are served in order."""

    def __init__(
        self,
        qps: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self.qps = qps
        self.burst = max(burst, 1)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(self.burst)
        self._last = clock()

    async def acquire(self) -> None:
        if self.qps <= 0:
            return
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now
        self._tokens -= 1
        if self._tokens < 0:
            await self._sleep(-self._tokens / self.qps)


class HttpTransport:
    """Short requests over an Http1Pool's kept connections, each watch on a connection of its own
    to the same host (`cluster/http1stream.py`)."""

    def __init__(
        self,
        base_url: str,
        *,
        ssl_context: ssl.SSLContext | None = None,
        auth: AuthProvider | None = None,
        qps: float = 5.0,
        burst: int = 10,
        timeout: float = 0.0,
        server_hostname: str | None = None,
        user_agent: str = "vgpu-scheduler",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._auth = auth or StaticAuth(None)
        self.limiter = TokenBucket(qps, burst)
        self.timeout = timeout
        self._server_hostname = server_hostname
        self._user_agent = user_agent
        self._pool: Http1Pool | None = None
        self._prefix = ""
        self._owner: HttpTransport | None = None  # a sibling borrows its owner's session and pool
        self.stats = ApiStats()

    def with_own_rate_limit(self, qps: float | None = None, burst: int | None = None) -> HttpTransport:
        """A sibling sharing this transport's session and credentials but not its token bucket:
        what client-go gets from a second clientset, as kube-scheduler does for its events, so
        best-effort traffic never delays a bind's calls."""
        sibling = HttpTransport(
            self.base_url,
            auth=self._auth,
            qps=self.limiter.qps if qps is None else qps,
            burst=self.limiter.burst if burst is None else burst,
            timeout=self.timeout,
            server_hostname=self._server_hostname,
            user_agent=self._user_agent,
        )
        sibling._ssl = self._ssl
        sibling._owner = self._owner or self
        sibling.stats = self.stats  # one API, one set of metrics
        return sibling

    def _get_pool(self) -> tuple[Http1Pool, str]:
        """The pool and the base URL's path prefix (prepended to every request's path)."""
        if self._owner is not None:
            return self._owner._get_pool()
        if self._pool is None:
            url = urllib.parse.urlsplit(self.base_url)
            https = url.scheme == "https"
            context: ssl.SSLContext | None = None
            if https:
                context = self._ssl if isinstance(self._ssl, ssl.SSLContext) else ssl.create_default_context()
            self._pool = Http1Pool(
                url.hostname or "localhost",
                url.port or (443 if https else 80),
                ssl_context=context,
                server_hostname=self._server_hostname,
            )
            self._prefix = url.path.rstrip("/")
        return self._pool, self._prefix

    async def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self._user_agent}
        if content_type:
            headers["Content-Type"] = content_type
        token = await self._auth.authorization()
        if token:
            headers["Authorization"] = token
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        json_body: Any = None,
        content_type: str | None = None,
        answer: bool = True,
    ) -> tuple[int, dict[str, Any]]:
        data = None if json_body is None else encode_body(json_body)
        ctype = content_type or ("application/json" if data is not None else None)
        stats = self.stats
        for attempt in (1, 2):
            await self._acquire()
            headers = await self._headers(ctype)
            started = time.perf_counter()
            pool, prefix = self._get_pool()
            target = prefix + path if prefix else path
            if params:
                target += "?" + urllib.parse.urlencode(params)
            try:
                # The write guard runs after every wait, a new connection's handshake included,
                # in the same loop step as the write: a process paused before it (SIGSTOP past its
                # lease) checks again when it wakes.
                got = await pool.request(
                    method,
                    target,
                    headers.items(),
                    data,
                    timeout=self.timeout or None,
                    before_send=lambda: check_write(method),
                )
            except (HttpProtocolError, OSError, TimeoutError) as exc:
                stats.record(method, None, time.perf_counter() - started)
                raise ApiConnectionError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
            status, raw = got.status, got.body
            stats.record(method, status, time.perf_counter() - started)
            if status == 401 and attempt == 1:
                await self._auth.invalidate()  # expired token: re-read it once and retry
                continue
            if not answer and 200 <= status < 300:
                return status, {}  # the body was read (the connection is reused), not decoded
            return status, decode_body(raw)
        raise AssertionError("unreachable")

    async def stream(
        self, path: str, params: Mapping[str, str] | None = None
    ) -> AsyncGenerator[dict[str, Any], None]:
        params = dict(params or {})
        # Only the connection and the answer's head are bounded by `timeout`; the body lasts as
        # long as the server keeps the watch (timeoutSeconds), plus slack for a silent dead
        # connection.
        server_timeout = params.get("timeoutSeconds")
        read_timeout = float(server_timeout) + 30.0 if server_timeout else None
        for attempt in (1, 2):
            await self._acquire()
            headers = await self._headers(None)
            pool, prefix = self._get_pool()
            target = prefix + path if prefix else path
            if params:
                target += "?" + urllib.parse.urlencode(params)
            opened = False  # a stream cut after its answer is not a request without one
            try:
                lines = await open_line_stream(
                    pool, target, headers.items(), timeout=self.timeout or None, read_timeout=read_timeout
                )
                try:
                    opened = True
                    answer = lines.answer
                    status = 200 if answer is None else answer.status
                    self.stats.record(WATCH, status, None)
                    if status == 401 and attempt == 1:
                        await self._auth.invalidate()
                        continue
                    if answer is not None:
                        raise ApiError(status, decode_body(answer.body))
                    while batch := await lines.next_lines():
                        for line in batch:
                            yield decode_watch_line(line)
                    return
                finally:
                    lines.close()
            except (HttpProtocolError, OSError, TimeoutError) as exc:
                if not opened:
                    self.stats.record(WATCH, None, None)
                raise ApiConnectionError(f"watch {path}: {type(exc).__name__}: {exc}") from exc

    async def _acquire(self) -> None:
        """A rate-limiter token, the wait timed into `stats.rate_limiter_wait`."""
        started = time.perf_counter()
        await self.limiter.acquire()
        self.stats.rate_limiter_wait.observe(time.perf_counter() - started)

    async def close(self) -> None:
        if self._owner is not None:
            return  # the owner's session: closed with the owner
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()


def decode_watch_line(line: bytes) -> dict[str, Any]:
    try:
        event = decode_json(line)
    except msgspec.DecodeError as exc:
        raise ApiConnectionError(f"malformed watch event: {exc}") from exc
    if not isinstance(event, dict):
        raise ApiConnectionError("malformed watch event: not an object")
    return event
