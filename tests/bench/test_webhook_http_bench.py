"""bench/webhook_http.py end to end on a few reviews: every one answered 200, a figure per src/."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_webhook_bench_answers_every_review_and_prints_its_figure() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "webhook_http.py"), "--requests", "50", "--runs", "1"],
        capture_output=True, text=True, timeout=120, check=True,
    ).stdout
    assert re.fullmatch(r".*/src: server CPU per review \d+–\d+ µs \(\d+\)\n", out), out
