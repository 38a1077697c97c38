"""bench/floor_extender.py, the protocol floor: the API writes it makes per pod (ours, docs/performance.md),
its lock-aware choice, and burst.py's figures built on it (ratios, histogram quantile).

The bench files are scripts, not package modules: they are loaded from their files.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, file: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


floor = _load("floor_extender_bench", "floor_extender.py")
burst = _load("burst_bench", "burst.py")


class FakeApi:
    """Records every call; answers 200 (201 for POST) unless `status` says otherwise per path."""

    def __init__(self) -> None:
        self.server = "https://api"
        self.calls: list[tuple[str, str, Any, str]] = []
        self.status: dict[str, int] = {}
        self.answers: dict[str, dict[str, Any]] = {}
        self.statuses: dict[str, list[int]] = {}  # per path: the next answers' statuses, in turn
        self.gates: dict[str, asyncio.Event] = {}  # per path: calls wait for it (a write in flight)

    async def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                   answer: bool = False) -> tuple[int, dict[str, Any]]:
        self.calls.append((method, path, body, content_type))
        gate = self.gates.get(path)
        if gate is not None:
            await gate.wait()
        queued = self.statuses.get(path)
        status = queued.pop(0) if queued else self.status.get(path, 201 if method == "POST" else 200)
        if not answer:
            return status, {}
        return status, self.answers.get(path, {"metadata": {"resourceVersion": "77"}})


class FakeRequest:
    def __init__(self, body: Any) -> None:
        self.body = json.dumps(body).encode()

    async def read(self) -> bytes:
        return self.body


def _node(name: str, rv: str = "5", locked: bool = False) -> dict[str, Any]:
    annotations = {floor.REGISTER: json.dumps([{"id": f"{name}-gpu-{i}"} for i in range(2)])}
    if locked:
        annotations[floor.NODE_LOCK] = "2026-01-01T00:00:00Z,ns,other"
    return {"metadata": {"name": name, "resourceVersion": rv, "annotations": annotations}}


def _pod(name: str, uid: str) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000"}
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid, "resourceVersion": "10"},
            "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]}}


def _floor(*nodes: dict[str, Any]) -> tuple[Any, FakeApi]:
    api = FakeApi()
    f = floor.Floor(api)
    for node in nodes:
        f.see_node(node)
    return f, api


async def _filter(f: Any, pod: dict[str, Any], names: list[str]) -> dict[str, Any]:
    answer = await f.filter(FakeRequest({"Pod": pod, "NodeNames": names}))
    out: dict[str, Any] = json.loads(answer.body)
    return out


async def _settle(f: Any) -> None:
    await asyncio.gather(*list(f.tasks))


async def test_bind_makes_our_writes_in_our_order() -> None:
    f, api = _floor(_node("n1"))
    answer = await _filter(f, _pod("p", "u1"), ["n1"])
    assert answer["NodeNames"] == ["n1"] and answer["Error"] == ""
    bound = await f.bind(FakeRequest({"PodName": "p", "PodNamespace": "ns", "PodUID": "u1", "Node": "n1"}))
    assert json.loads(bound.body) == {"Error": ""}
    await _settle(f)
    writes = [(method, path) for method, path, _, _ in api.calls if not path.endswith("/events")]
    assert writes == [
        ("PATCH", "/api/v1/nodes/n1"),
        ("PATCH", "/api/v1/namespaces/ns/pods/p"),
        ("POST", "/api/v1/namespaces/ns/pods/p/binding"),
    ]
    calls = [c for c in api.calls if not c[1].endswith("/events")]
    _, _, lock, _ = calls[0]
    assert lock["metadata"]["resourceVersion"] == "5"
    assert lock["metadata"]["annotations"][floor.NODE_LOCK].endswith(",ns,p")
    _, _, patch, _ = calls[1]
    annotations = patch["metadata"]["annotations"]
    assert annotations["hami.io/vgpu-devices-to-allocate"] == "n1-gpu-0,NVIDIA,4000,0:;"
    assert annotations["hami.io/bind-phase"] == "allocating"
    assert "resourceVersion" not in patch["metadata"]  # kube-scheduler's status patches move it
    _, _, binding, _ = calls[2]
    assert binding["metadata"]["resourceVersion"] == "77"  # the patched pod's version
    assert binding["target"]["name"] == "n1"
    reasons = sorted(body["reason"] for _, path, body, _ in api.calls if path.endswith("/events"))
    assert reasons == ["BindingSucceed", "FilteringSucceed"]


async def test_locked_and_about_to_lock_nodes_are_passed_over() -> None:
    f, _ = _floor(_node("n1", locked=True), _node("n2"), _node("n3"))
    first = await _filter(f, _pod("a", "ua"), ["n1", "n2", "n3"])
    second = await _filter(f, _pod("b", "ub"), ["n1", "n2", "n3"])
    third = await _filter(f, _pod("c", "uc"), ["n1", "n2", "n3"])
    assert first["NodeNames"] == ["n2"]
    assert second["NodeNames"] == ["n3"]  # n2 is about to be locked by a's bind
    assert third["NodeNames"] is None and "node lock contention" in third["Error"]
    await _settle(f)


async def test_a_refused_lock_fails_the_bind_and_writes_nothing_else() -> None:
    f, api = _floor(_node("n1"))
    await _filter(f, _pod("p", "u1"), ["n1"])
    api.status["/api/v1/nodes/n1"] = 409
    bound = await f.bind(FakeRequest({"PodName": "p", "PodNamespace": "ns", "PodUID": "u1", "Node": "n1"}))
    assert "node lock contention" in json.loads(bound.body)["Error"]
    await _settle(f)
    assert [c[1] for c in api.calls if c[0] == "PATCH"] == ["/api/v1/nodes/n1"]
    assert not any(path.endswith("/binding") for _, path, _, _ in api.calls)


async def test_a_node_whose_lock_write_is_in_flight_is_not_picked() -> None:
    f, api = _floor(_node("n1"))
    await _filter(f, _pod("a", "ua"), ["n1"])
    api.gates["/api/v1/nodes/n1"] = gate = asyncio.Event()
    bind = asyncio.create_task(
        f.bind(FakeRequest({"PodName": "a", "PodNamespace": "ns", "PodUID": "ua", "Node": "n1"})))
    while not any(path == "/api/v1/nodes/n1" for _, path, _, _ in api.calls):
        await asyncio.sleep(0)
    answer = await _filter(f, _pod("b", "ub"), ["n1"])
    assert "node lock contention" in answer["Error"]
    gate.set()
    assert json.loads((await bind).body) == {"Error": ""}
    await _settle(f)


async def test_a_caller_giving_up_does_not_cut_the_bind_between_lock_and_unlock() -> None:
    f, api = _floor(_node("n1"))
    await _filter(f, _pod("a", "ua"), ["n1"])
    api.gates["/api/v1/nodes/n1"] = gate = asyncio.Event()
    handler = asyncio.create_task(
        f.bind(FakeRequest({"PodName": "a", "PodNamespace": "ns", "PodUID": "ua", "Node": "n1"})))
    while not any(path == "/api/v1/nodes/n1" for _, path, _, _ in api.calls):
        await asyncio.sleep(0)
    handler.cancel()  # kube-scheduler's timeout: aiohttp cancels the handler
    gate.set()
    await _settle(f)
    assert handler.cancelled()
    assert any(path.endswith("/binding") for _, path, _, _ in api.calls)


async def test_a_stale_node_version_is_read_again_once() -> None:
    f, api = _floor(_node("n1", rv="5"))
    await _filter(f, _pod("p", "u1"), ["n1"])
    api.statuses["/api/v1/nodes/n1"] = [409, 200]
    api.answers["/api/v1/nodes/n1"] = _node("n1", rv="9")
    bound = await f.bind(FakeRequest({"PodName": "p", "PodNamespace": "ns", "PodUID": "u1", "Node": "n1"}))
    assert json.loads(bound.body) == {"Error": ""}
    await _settle(f)
    node_calls = [(method, body) for method, path, body, _ in api.calls if path == "/api/v1/nodes/n1"]
    assert [m for m, _ in node_calls] == ["PATCH", "GET", "PATCH"]
    assert node_calls[2][1]["metadata"]["resourceVersion"] == "9"


async def test_a_node_locked_meanwhile_is_contention() -> None:
    f, api = _floor(_node("n1", rv="5"))
    await _filter(f, _pod("p", "u1"), ["n1"])
    api.statuses["/api/v1/nodes/n1"] = [409, 200]
    api.answers["/api/v1/nodes/n1"] = _node("n1", rv="9", locked=True)
    bound = await f.bind(FakeRequest({"PodName": "p", "PodNamespace": "ns", "PodUID": "u1", "Node": "n1"}))
    assert "node lock contention" in json.loads(bound.body)["Error"]
    await _settle(f)
    assert [c[0] for c in api.calls if c[1] == "/api/v1/nodes/n1"] == ["PATCH", "GET"]


def test_a_watched_unlock_frees_the_node() -> None:
    f, _ = _floor(_node("n1", locked=True))
    assert f.pick(["n1"], "u") is None
    f.see_node(_node("n1", rv="6"))
    assert f.pick(["n1"], "u") == "n1"
    assert f.nodes["n1"].resource_version == "6"


async def test_webhook_sets_only_the_scheduler_name() -> None:
    f, _ = _floor()
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "r1"}}
    answer = json.loads((await f.webhook(FakeRequest(review))).body)
    assert answer["response"]["uid"] == "r1" and answer["response"]["allowed"] is True
    ops = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert ops == [{"op": "add", "path": "/spec/schedulerName", "value": floor.SCHEDULER_NAME}]


def test_ratios_compare_ours_with_the_floor_of_the_same_delay_and_with_alone() -> None:
    def result(name: str, *, extender: bool, floor_: bool = False, delay: float = 0.015,
               rate: float = 0.0) -> Any:
        r = burst.Result(burst.Scenario(name, extender, delay=delay, floor=floor_), 100)
        r.pods_per_s = rate
        return r

    results = [
        result("alone", extender=False, rate=200.0),
        result("floor", extender=True, floor_=True, rate=100.0),
        result("ours", extender=True, rate=90.0),
        result("ours slow", extender=True, delay=2.0, rate=50.0),
    ]
    lines = burst.ratios(results)
    assert lines[0].startswith("ours: 90.0 pods/s = 0.90x the floor (100.0 pods/s), "
                               "0.45x kube-scheduler alone")
    assert "the floor" not in lines[1] and "0.25x kube-scheduler alone" in lines[1]


def test_histogram_quantile_bounds_by_bucket() -> None:
    text = "\n".join([
        'm_bucket{le="0.001"} 50',
        'm_bucket{le="0.002"} 98',
        'm_bucket{le="0.004"} 100',
        'm_bucket{le="+Inf"} 100',
        'other_bucket{le="0.001"} 1',
    ])
    assert burst.histogram_quantile(text, "m", 0.5) == pytest.approx(0.001)
    assert burst.histogram_quantile(text, "m", 0.99) == pytest.approx(0.004)
    assert burst.histogram_quantile(text, "absent", 0.99) is None


async def test_events_past_the_queue_are_dropped_as_ours_are(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(floor, "EVENT_QUEUE", 2)
    f, api = _floor(_node("n1"))
    for i in range(5):  # no await in between: none has been sent yet
        f.event({"kind": "Pod", "namespace": "ns", "name": f"p{i}", "uid": f"u{i}"}, "Normal", "X", "m")
    await _settle(f)
    sent = sorted(b["involvedObject"]["name"] for _, path, b, _ in api.calls if path.endswith("/events"))
    assert sent == ["p0", "p1"] and f.events_waiting == 0
