"""Our API client's CPU per watch event, over TLS on loopback.

    .venv/bin/python bench/watch_stream.py [--events 20000] [--runs 3] [--src DIR ...]

A child process serves one watch as kube-apiserver does over HTTP/1.1 (chunked, one event per
chunk, written as it happens: a pause every `--per-read` events so they arrive a few per read,
as in a burst), each event a real pod watch event (tests/fixtures/kube-1.36/api/watch-pods.stream.jsonl)
of ~3 KB. Another child reads it through `HttpTransport.stream` and the reflector's decode,
and reports its own CPU time (user + system) per event. `--src` runs the reader against other
exports of `src/` (e.g. `git archive <commit> src | tar -x -C /tmp/before`), alternating.
Figures only; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trustme

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "kube-1.36" / "api" / "watch-pods.stream.jsonl"

READER = """
import asyncio, os, ssl, sys, time
from vgpu_scheduler.cluster.transport import HttpTransport

async def main() -> None:
    ctx = ssl.create_default_context(cafile=sys.argv[2])
    transport = HttpTransport(sys.argv[1], ssl_context=ctx, qps=0)
    started, seen = os.times(), 0
    async for event in transport.stream("/watch", {"timeoutSeconds": "600"}):
        seen += 1 if event.get("type") else 0
    done = os.times()
    await transport.close()
    cpu = (done.user - started.user) + (done.system - started.system)
    print(f"{seen} {cpu:.4f}")

asyncio.run(main())
"""


def serve(port_file: str, cert_dir: str, events: int, per_read: int) -> None:
    from aiohttp import web

    lines = [line.encode() + b"\n" for line in FIXTURE.read_text().splitlines() if line.strip()]

    async def watch(request: web.Request) -> web.StreamResponse:
        answer = web.StreamResponse(headers={"Content-Type": "application/json"})
        answer.enable_chunked_encoding()
        await answer.prepare(request)
        for n in range(events):
            await answer.write(lines[n % len(lines)])
            if n % per_read == per_read - 1:
                await asyncio.sleep(0.0005)
        await answer.write_eof()
        return answer

    async def main() -> None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(os.path.join(cert_dir, "cert.pem"), os.path.join(cert_dir, "key.pem"))
        app = web.Application()
        app.router.add_get("/watch", watch)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        Path(port_file).write_text(str(runner.addresses[0][1]))
        await asyncio.Event().wait()

    asyncio.run(main())


def run_reader(src: str, url: str, ca: str) -> tuple[int, float]:
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run([sys.executable, "-c", READER, url, ca], env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return int(out[0]), float(out[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=20000)
    p.add_argument("--per-read", type=int, default=3, help="events written between pauses")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--src", nargs="*", default=[str(ROOT / "src")], help="src/ directories to compare")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ca = trustme.CA()
        cert = ca.issue_cert("127.0.0.1")
        cert.cert_chain_pems[0].write_to_path(os.path.join(tmp, "cert.pem"))
        cert.private_key_pem.write_to_path(os.path.join(tmp, "key.pem"))
        ca.cert_pem.write_to_path(os.path.join(tmp, "ca.pem"))
        port_file = os.path.join(tmp, "port")
        server = subprocess.Popen([sys.executable, __file__, "--serve", port_file, tmp, str(args.events),
                                   str(args.per_read)])
        try:
            while not os.path.exists(port_file) or not Path(port_file).read_text():
                time.sleep(0.05)
            url = f"https://127.0.0.1:{Path(port_file).read_text()}"
            figures: dict[str, list[float]] = {src: [] for src in args.src}
            for _ in range(args.runs):
                for src in args.src:
                    seen, cpu = run_reader(src, url, os.path.join(tmp, "ca.pem"))
                    if seen != args.events:
                        raise SystemExit(f"{src}: the reader saw {seen} of {args.events} events")
                    figures[src].append(cpu / seen * 1e6)
            for src, per_event in figures.items():
                shown = ", ".join(f"{v:.1f}" for v in per_event)
                low, high = min(per_event), max(per_event)
                print(f"{src}: reader CPU per watch event {low:.1f}–{high:.1f} µs ({shown})")
        finally:
            server.kill()
            server.wait()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    else:
        main()
