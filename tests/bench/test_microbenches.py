"""The microbenchmarks of our server's per-request costs, end to end on a few requests: each
reads or answers everything it sends (else it exits non-zero) and prints its figure lines."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FIGURE = r"[\d.]+–[\d.]+ µs \([\d., ]+"
BENCHES = {
    "watch-stream": (["watch_stream.py", "--events", "300", "--runs", "1"],
                     [rf".*/src: reader CPU per watch event {FIGURE}\)"]),
    "webhook-http": (["webhook_http.py", "--requests", "50", "--runs", "1"],
                     [rf".*/src: server CPU per review {FIGURE}\)"]),
    "tls-echo": (["tls_echo.py", "--requests", "200", "--runs", "1"],
                 [rf"TLS: server CPU per exchange {FIGURE}; Python .*\)",
                  rf"plain TCP: server CPU per exchange {FIGURE}; Python .*\)"]),
}


@pytest.mark.parametrize("bench", BENCHES, ids=list(BENCHES))
def test_the_bench_runs_and_prints_its_figures(bench: str) -> None:
    args, expected = BENCHES[bench]
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / args[0]), *args[1:]],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    lines = out.splitlines()
    assert len(lines) == len(expected), out
    for line, pattern in zip(lines, expected, strict=True):
        assert re.fullmatch(pattern, line), line
