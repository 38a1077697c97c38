"""Our server's CPU per admission review over HTTPS, as kube-apiserver's webhook client calls it.

    .venv/bin/python bench/webhook_http.py [--requests 5000] [--runs 3] [--src DIR ...]

A child process runs the real main-port stack (make_app with the real webhook, TLS with ALPN,
server/http2.py's site) on loopback; the parent plays kube-apiserver's webhook client: HTTP/1.1
(it does not take h2), one kept connection, one AdmissionReview of a GPU pod at a time, as Go
writes the request. Reported: the child's CPU time (user + system, /proc) per review. `--src`
runs the server from other exports of `src/` (e.g. `git archive <commit> src | tar -x -C
/tmp/before`), alternating. Figures only; nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trustme

ROOT = Path(__file__).resolve().parent.parent

SERVER = """
import asyncio, dataclasses, sys
from aiohttp import web
from vgpu_scheduler.config import DeviceConfig, NvidiaConfig
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.server.app import make_app
from vgpu_scheduler.server.http2 import Http2Site
from vgpu_scheduler.server.tls import ReloadingCertificate
from vgpu_scheduler.server.webhook import webhook_handler

class NoExtender:
    async def filter(self, body: bytes) -> bytes:
        return b"{}"

    async def bind(self, body: bytes) -> bytes:
        return b"{}"

async def main() -> None:
    opts = dataclasses.replace(SchedulerOptions(), scheduler_name="hami-scheduler")
    app = make_app(NoExtender(), webhook_handler(opts, build(DeviceConfig(NvidiaConfig()))))
    runner = web.AppRunner(app, access_log=None, handle_signals=False, handler_cancellation=True)
    await runner.setup()
    cert = ReloadingCertificate(sys.argv[1], sys.argv[2])
    site = Http2Site(runner, "127.0.0.1", 0, ssl_context=cert.context)
    await site.start()
    print(site.port, flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""

REVIEW = {
    "apiVersion": "admission.k8s.io/v1",
    "kind": "AdmissionReview",
    "request": {
        "uid": "0b6c5a8e-1f5e-4d0b-9a43-5d0c6d6f0a11",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "operation": "CREATE",
        "namespace": "default",
        "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
        "object": {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"generateName": "gpu-job-", "namespace": "default", "labels": {"app": "gpu-job"}},
            "spec": {
                "containers": [{
                    "name": "cuda",
                    "image": "nvidia/cuda:12.4.0-base-ubuntu22.04",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}},
                }],
                "restartPolicy": "Never",
            },
        },
        "dryRun": False,
    },
}


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(src: str, cert: str, key: str, requests: int) -> float:
    """The server's CPU per review, in µs."""
    server = subprocess.Popen([sys.executable, "-c", SERVER, cert, key], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": src})
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        context.set_alpn_protocols(["http/1.1"])
        body = json.dumps(REVIEW).encode()
        head = (f"POST /webhook?timeout=10s HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "User-Agent: kube-apiserver-admission\r\nContent-Length: %d\r\n"
                "Accept: application/json, */*\r\nContent-Type: application/json\r\n"
                "Accept-Encoding: gzip\r\n\r\n" % len(body)).encode()
        with socket.create_connection(("127.0.0.1", port)) as raw, context.wrap_socket(raw) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for n in range(requests + 200):
                if n == 200:  # warmed up: imports, caches
                    started = cpu_seconds(server.pid)
                conn.sendall(head + body)
                answer = b""
                while not _complete(answer):
                    answer += conn.recv(65536)
                assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
            return (cpu_seconds(server.pid) - started) / requests * 1e6
    finally:
        server.kill()
        server.wait()


def _complete(answer: bytes) -> bool:
    """Does `answer` hold a whole answer (its head, and the body its Content-Length announces)?"""
    end = answer.find(b"\r\n\r\n")
    if end < 0:
        return False
    length = 0
    for line in answer[:end].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    return len(answer) >= end + 4 + length


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=5000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--src", nargs="*", default=[str(ROOT / "src")], help="src/ directories to compare")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        leaf = trustme.CA().issue_cert("127.0.0.1")
        cert, key = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "tls.key")
        leaf.cert_chain_pems[0].write_to_path(cert)
        leaf.private_key_pem.write_to_path(key)
        figures: dict[str, list[float]] = {src: [] for src in args.src}
        for _ in range(args.runs):
            for src in args.src:
                figures[src].append(measure(src, cert, key, args.requests))
                time.sleep(0.2)
        for src, per_review in figures.items():
            shown = ", ".join(f"{v:.0f}" for v in per_review)
            print(f"{src}: server CPU per review {min(per_review):.0f}–{max(per_review):.0f} µs ({shown})")


if __name__ == "__main__":
    main()
