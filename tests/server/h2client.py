"""A small HTTP/2 client for the tests, on the `h2` library (a reference implementation that is not
ours): many concurrent requests on one TLS connection."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import h2.settings


@dataclass
class H2Answer:
    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytearray = field(default_factory=bytearray)
    reset: int | None = None
    done: asyncio.Future[None] | None = None


class H2Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, window: int) -> None:
        self.reader = reader
        self.writer = writer
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding=None)
        )
        self.window = window
        self.answers: dict[int, H2Answer] = {}
        self.goaway_code: int | None = None
        self._pending = bytearray()
        self._senders: set[asyncio.Task[None]] = set()
        self.closed = asyncio.get_running_loop().create_future()
        self.conn.local_settings = h2.settings.Settings(
            client=True, initial_values={h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window}
        )
        self.conn.initiate_connection()
        self.flush()
        self._reading = asyncio.create_task(self._read())

    @classmethod
    async def connect(cls, port: int, *, window: int = 65_535) -> H2Client:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["h2"])
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
        assert writer.get_extra_info("ssl_object").selected_alpn_protocol() == "h2"
        return cls(reader, writer, window)

    def flush(self) -> None:
        data = self.conn.data_to_send()
        if data and not self.writer.is_closing():
            self.writer.write(data)

    def start(
        self, method: str, path: str, body: bytes = b"", headers: Sequence[tuple[str, str]] = ()
    ) -> tuple[int, H2Answer]:
        stream_id = self.conn.get_next_available_stream_id()
        head = [(":method", method), (":path", path), (":scheme", "https"), (":authority", "127.0.0.1")]
        self.conn.send_headers(stream_id, [*head, *headers], end_stream=not body)
        answer = H2Answer(done=asyncio.get_running_loop().create_future())
        self.answers[stream_id] = answer
        self.flush()
        if body:
            self._senders.add(asyncio.create_task(self._send_body(stream_id, body)))
        return stream_id, answer

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: Sequence[tuple[str, str]] = ()
    ) -> H2Answer:
        _stream_id, answer = self.start(method, path, body, headers)
        assert answer.done is not None
        await asyncio.wait_for(answer.done, 20)
        return answer

    def reset(self, stream_id: int) -> None:
        self.conn.reset_stream(stream_id)
        self.flush()

    async def _send_body(self, stream_id: int, body: bytes) -> None:
        sent = 0
        while sent < len(body):
            if self.answers[stream_id].reset is not None:
                return  # refused or reset: nothing more to send
            size = min(self.conn.local_flow_control_window(stream_id), 16_384, len(body) - sent)
            if size <= 0:
                await asyncio.sleep(0.001)
                continue
            self.conn.send_data(stream_id, body[sent : sent + size], end_stream=sent + size == len(body))
            sent += size
            self.flush()

    async def _read(self) -> None:
        try:
            while data := await self.reader.read(65_536):
                for event in self.conn.receive_data(self._hold_goaway(data)):
                    self._on_event(event)
                self.flush()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            for answer in self.answers.values():
                if answer.done is not None and not answer.done.done():
                    answer.done.set_exception(ConnectionResetError("connection closed"))
            if not self.closed.done():
                self.closed.set_result(None)

    def _hold_goaway(self, data: bytes) -> bytes:
        """The frames but GOAWAY, which is only recorded: h2 takes a GOAWAY as the end of the
        connection, while a server's graceful GOAWAY still answers the streams it names."""
        self._pending += data
        passed = bytearray()
        while len(self._pending) >= 9:
            size = int.from_bytes(self._pending[:3], "big")
            if len(self._pending) < 9 + size:
                break
            raw = bytes(self._pending[: 9 + size])
            del self._pending[: 9 + size]
            if raw[3] == 7:  # GOAWAY
                self.goaway_code = int.from_bytes(raw[13:17], "big")
            else:
                passed += raw
        return bytes(passed)

    def _on_event(self, event: h2.events.Event) -> None:
        if isinstance(event, h2.events.ResponseReceived):
            answer = self.answers[event.stream_id]
            for name, value in event.headers:
                if name == b":status":
                    answer.status = int(value)
                else:
                    answer.headers.append((bytes(name), bytes(value)))
        elif isinstance(event, h2.events.DataReceived):
            self.answers[event.stream_id].body += event.data
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded):
            self._finish(event.stream_id)
        elif isinstance(event, h2.events.StreamReset):
            self.answers[event.stream_id].reset = event.error_code
            self._finish(event.stream_id)

    def _finish(self, stream_id: int) -> None:
        done = self.answers[stream_id].done
        if done is not None and not done.done():
            done.set_result(None)

    async def close(self) -> None:
        self.conn.close_connection()
        self.flush()
        self.writer.close()
        with contextlib.suppress(ConnectionError, ssl.SSLError):
            await self.writer.wait_closed()
        self._reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reading
