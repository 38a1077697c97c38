"""Fixtures of the e2e tier: one real control plane (etcd, kube-apiserver, kube-scheduler v1.36 and our
server, see controlplane.py) per session, shared by every test marked `e2e`.

Without the pinned binaries (no Go toolchain, or scripts/control-plane-build failed) every test of
the tier is skipped with the same reason, which `-ra` prints as one line. When a test fails, the tail
of every component's log is attached to its report.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # conftest modules are not importable here

from controlplane import ControlPlane, ControlPlaneUnavailable, find_binaries_or_raise

from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.kubeconfig import make_client

_started: list[ControlPlane] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without the binaries, mark every e2e test skipped up front: a skip from a marker with one
    reason folds into one `-ra` line (a skip raised inside a fixture is listed per test)."""
    try:
        find_binaries_or_raise()
    except ControlPlaneUnavailable as exc:
        skip = pytest.mark.skip(reason=str(exc))
        for item in items:
            if item.get_closest_marker("e2e") is not None:
                item.add_marker(skip)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    try:
        bin_dir = find_binaries_or_raise()
    except ControlPlaneUnavailable as exc:
        pytest.skip(str(exc))
    cp = ControlPlane.start(bin_dir)
    _started.append(cp)
    try:
        yield cp
    finally:
        cp.stop()
        _started.remove(cp)


@pytest.fixture
async def client(control_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    c = await make_client(str(control_plane.kubeconfig), qps=200, burst=400)
    try:
        yield c
    finally:
        await c.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and _started and item.get_closest_marker("e2e") is not None:
        report.sections.append(("control-plane logs", _started[0].logs(lines=60)))
    if report.skipped and isinstance(report.longrepr, tuple) and _is_tier_skip(report.longrepr[2]):
        # `-ra` folds skips per file and line: give every missing-binaries skip this file's place,
        # so the whole tier is one line instead of one per test file.
        report.longrepr = (__file__, None, report.longrepr[2])
    return report


def _is_tier_skip(reason: str) -> bool:
    return "e2e tier skipped" in reason
