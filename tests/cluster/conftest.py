"""Fixtures for the cluster layer: a MemoryCluster, and a KubeClient over either transport."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fixtures import KUBE_1_36
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.transport import HttpTransport
from vgpu_scheduler.standin.fakeapi import FakeApiServer, serve
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport

FIXTURES = KUBE_1_36


class Fx:
    """The captured fixtures, for tests (conftest modules cannot be imported under
    --import-mode=importlib); pods and nodes come from tests/builders.py."""

    root = FIXTURES

    @staticmethod
    def json(rel: str) -> Any:
        return json.loads((FIXTURES / rel).read_text())

    @staticmethod
    def text(rel: str) -> str:
        return (FIXTURES / rel).read_text()

    @staticmethod
    def pod_list() -> dict[str, Any]:
        """The five pods of api/list-pods.limit2.page{1,2,3}.json (with their real uids) as a PodList."""
        items: list[dict[str, Any]] = []
        for page in (1, 2, 3):
            items.extend(Fx.json(f"api/list-pods.limit2.page{page}.json")["items"])
        return {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}


@pytest.fixture
def fx() -> type[Fx]:
    return Fx


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster(seed=7)


@pytest.fixture
async def server(cluster: MemoryCluster) -> AsyncIterator[FakeApiServer]:
    srv = await serve(cluster)
    try:
        yield srv
    finally:
        await srv.close()


@pytest.fixture(params=["memory", "http"])
async def client(request: pytest.FixtureRequest, cluster: MemoryCluster) -> AsyncIterator[KubeClient]:
    """The same tests run over the in-process transport and over real HTTP to the fake API."""
    if request.param == "memory":
        kc = KubeClient(MemoryTransport(cluster))
        yield kc
        await kc.close()
        return
    srv = await serve(cluster)
    kc = KubeClient(HttpTransport(srv.url, qps=0))
    try:
        yield kc
    finally:
        await kc.close()
        await srv.close()
