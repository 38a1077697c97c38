"""What one request and answer costs an asyncio server before any of its own code runs.

    .venv/bin/python bench/tls_echo.py [--requests 20000] [--runs 2]

A child process runs an asyncio protocol that answers every read with 2,000 bytes, over TLS and
over plain TCP on loopback; the parent sends 300-byte requests one at a time on one kept
connection and reads each answer. Reported: the child's CPU time (user + system, /proc) per
exchange. It is the floor under each of the ~13 exchanges a bound pod costs our server (requests
served, writes made, watch events read). Figures only; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import ssl
import sys

import trustme

REQUEST, ANSWER = b"x" * 300, b"y" * 2000


class Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(ANSWER)  # type: ignore[attr-defined]


def serve(context: ssl.SSLContext | None, write_port: int) -> None:
    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0, ssl=context)
        os.write(write_port, b"%d\n" % server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(main())


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(tls: bool, requests: int) -> float:
    ca = trustme.CA()
    server_context = client_context = None
    if tls:
        server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert("127.0.0.1").configure_cert(server_context)
        client_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ca.configure_trust(client_context)
    read_port, write_port = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            serve(server_context, write_port)
        finally:
            os._exit(0)
    try:
        port = int(os.read(read_port, 64))
        raw = socket.create_connection(("127.0.0.1", port))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = client_context.wrap_socket(raw, server_hostname="127.0.0.1") if client_context else raw
        with conn:
            started = cpu_seconds(pid)
            for _ in range(requests):
                conn.sendall(REQUEST)
                got = 0
                while got < len(ANSWER):
                    got += len(conn.recv(65536))
            return (cpu_seconds(pid) - started) / requests * 1e6
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--runs", type=int, default=2)
    args = p.parse_args()
    for tls in (True, False):
        figures = [measure(tls, args.requests) for _ in range(args.runs)]
        shown = ", ".join(f"{v:.1f}" for v in figures)
        low, high, kind = min(figures), max(figures), "TLS" if tls else "plain TCP"
        python = sys.version.split()[0]
        print(f"{kind}: server CPU per exchange {low:.1f}–{high:.1f} µs ({shown}; Python {python})")


if __name__ == "__main__":
    main()
