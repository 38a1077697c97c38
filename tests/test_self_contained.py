"""The repository stands alone: a fresh clone needs nothing beside it to build, test and read.

Also: every `§x.y` reference in the code names a heading of docs/compatibility.md.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from tests.fixtures import KUBE_1_36

ROOT = Path(__file__).resolve().parents[1]
CHECKED = [ROOT / "src", ROOT / "tests", ROOT / "bench", ROOT / "docs", ROOT / "README.md"]
# Built in two pieces so that this file does not match itself.
OUTSIDE = ("../" + "shared", "/" + "work/")
SECTION_REF = re.compile(r"§(\d+(?:\.\d+)*)")
HEADING = re.compile(r"^#{2,4} §(\d+(?:\.\d+)*) ", re.MULTILINE)


def _text_files(*roots: Path) -> Iterator[Path]:
    for root in roots:
        paths = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in paths:
            rel = path.relative_to(ROOT).parts
            # Local build and tool output, not part of the repository.
            if any(p.startswith(".") or p == "__pycache__" or p.endswith(".egg-info") for p in rel):
                continue
            if path.is_file() and path.suffix not in {".png", ".pyc"}:
                yield path


def test_nothing_points_outside_the_repository() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}: {needle}"
        for path in _text_files(*CHECKED)
        if path != Path(__file__).resolve()
        for needle in OUTSIDE
        if needle in path.read_text(errors="replace")
    ]
    assert offenders == []


def test_no_test_is_skipped_for_a_missing_file() -> None:
    # A skip guarded by a file check hides a missing fixture instead of failing on it.
    guard = re.compile(r"(exists|is_file|is_dir)\(")
    offenders = []
    for path in _text_files(ROOT / "tests"):
        if path.suffix != ".py" or path == Path(__file__).resolve():
            continue
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if "skip" in line and any(guard.search(near) for near in lines[max(0, i - 2) : i + 1]):
                offenders.append(f"{path.relative_to(ROOT)}:{i + 1}")
    assert offenders == []


def test_captured_fixtures_are_in_the_repository() -> None:
    assert (KUBE_1_36 / "README.md").is_file()
    assert KUBE_1_36.is_relative_to(ROOT)


def test_every_section_reference_is_a_heading_of_the_compatibility_doc() -> None:
    headings = set(HEADING.findall((ROOT / "docs" / "compatibility.md").read_text()))
    referenced = {
        (ref, str(path.relative_to(ROOT)))
        for path in _text_files(ROOT / "src", ROOT / "tests", ROOT / "bench", ROOT / "README.md")
        if path != Path(__file__).resolve()
        for ref in SECTION_REF.findall(path.read_text(errors="replace"))
    }
    assert referenced, "the code is expected to cite the compatibility doc"
    assert sorted((ref, where) for ref, where in referenced if ref not in headings) == []
