"""Module paths named in the docs exist: a move must update docs/compatibility.md."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "vgpu_scheduler"


def test_every_module_path_in_the_compatibility_doc_exists() -> None:
    text = (ROOT / "docs" / "compatibility.md").read_text()
    named = set(re.findall(r"`((?:[a-z_]+/)+[a-z_]+\.py)`", text))
    assert named, "the doc names no module"
    missing = sorted(p for p in named if not (PACKAGE / p).exists() and not (ROOT / p).exists())
    assert not missing, missing
