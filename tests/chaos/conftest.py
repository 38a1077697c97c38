"""The chaos tier (issue 31): opt-in, never part of the default `pytest -q`.

Tests marked `chaos` run a control plane under randomized faults for minutes; they are deselected
unless `VGPU_CHAOS=1` is set (`VGPU_CHAOS=1 pytest -m chaos tests/chaos`, see docs/faults.md).
`VGPU_CHAOS_SEED`, `VGPU_CHAOS_NODES`, `VGPU_CHAOS_SECONDS` size the run. The checker's unit tests
(test_checker.py) carry no marker and run in the default suite.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
# conftest modules are not importable here; the chaos modules import the e2e tier's helpers.
for folder in (HERE, HERE.parent / "e2e"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))


def enabled() -> bool:
    return os.environ.get("VGPU_CHAOS", "") not in ("", "0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if enabled():
        return
    chaos = [item for item in items if item.get_closest_marker("chaos") is not None]
    if chaos:
        config.hook.pytest_deselected(items=chaos)
        items[:] = [item for item in items if item.get_closest_marker("chaos") is None]
