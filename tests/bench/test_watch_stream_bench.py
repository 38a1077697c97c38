"""bench/watch_stream.py end to end on a short stream: every event read, a figure per src/."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_watch_bench_reads_every_event_and_prints_its_figure() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "watch_stream.py"), "--events", "300", "--runs", "1"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    assert re.fullmatch(r".*/src: reader CPU per watch event [\d.]+–[\d.]+ µs \([\d.]+\)\n", out), out
