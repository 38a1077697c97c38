"""Module paths named in the docs exist: a move must update docs/compatibility.md and docs/architecture.md."""

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


def test_every_module_named_in_the_architecture_picture_exists() -> None:
    """docs/architecture.md is drawn from the code: each module it names (a path, or a file name
    under its package in the picture) must exist."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    paths = set(re.findall(r"\b((?:[a-z_]+/)+[a-z_]+\.py)\b", text))
    names = set(re.findall(r"(?<![/\w])([a-z_]+\.py)\b", text))
    assert paths and names, "the picture names no module"
    missing = sorted(p for p in paths if not (PACKAGE / p).exists())
    every_file = {p.name for p in PACKAGE.rglob("*.py")}
    missing += sorted(n for n in names if n not in every_file)
    assert not missing, missing
