"""A pod whose device quantity does not parse stays pending with a reason naming the quantity: the
filter answers an extender Error (both argument shapes) and records it as FilteringFailed, instead
of placing the pod with the value read as absent (a whole GPU's memory, or no GPU at all)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any, cast

import pytest

from tests.builders import container, device, gpu_node, pod
from vgpu_scheduler.configfile import default_device_config
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.requests import PodRequestsMemo, invalid_quantity
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.scheduler.extender import Extender, Policies

VENDORS = build(default_device_config())  # every vendor of the chart, so every vendor's names
MANAGED = VENDORS.managed_resources()
REGEX = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
LIMIT = "pod default/p: container c: invalid quantity"


def bad_pod(
    *, limits: Mapping[str, Any] | None = None, requests: Mapping[str, Any] | None = None, init: bool = False
) -> dict[str, Any]:
    """default/p (uid-p) whose container c (init container i with `init`) asks `limits`/`requests`."""
    ctr = container("i" if init else "c", limits=limits, requests=requests)
    app = [ctr] if not init else [container("c")]
    inits = [ctr] if init else None
    return pod("p", uid="uid-p", resource_version="1", containers=app, init_containers=inits)


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        pytest.param(
            bad_pod(limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": "12Gx"}),
            f'{LIMIT} nvidia.com/gpumem="12Gx" in limits: {REGEX}: \'12Gx\'',
            id="gpumem in limits",
        ),
        pytest.param(
            bad_pod(limits={"nvidia.com/gpu": "abc"}),
            f'{LIMIT} nvidia.com/gpu="abc" in limits: {REGEX}: \'abc\'',
            id="gpu count alone",
        ),
        pytest.param(
            bad_pod(limits={"nvidia.com/gpu": 1}, requests={"nvidia.com/gpucores": "1.5.3"}, init=True),
            "pod default/p: init container i: invalid quantity nvidia.com/gpucores=\"1.5.3\" in requests: "
            f"{REGEX}: '1.5.3'",
            id="gpucores in an init container's requests",
        ),
        pytest.param(
            bad_pod(limits={"hygon.com/dcunum": 1, "hygon.com/dcumem": "2Gx"}),
            f'{LIMIT} hygon.com/dcumem="2Gx" in limits: {REGEX}: \'2Gx\'',
            id="another vendor's resource",
        ),
        pytest.param(
            bad_pod(limits={"nvidia.com/gpu": True}),
            "pod default/p: container c: invalid quantity nvidia.com/gpu=true in limits: "
            "a quantity must be a string or a number, not bool",
            id="a boolean",
        ),
        pytest.param(
            bad_pod(limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": ""}),
            'pod default/p: container c: invalid quantity nvidia.com/gpumem="" in limits: '
            "quantities must not be empty",
            id="empty",
        ),
    ],
)
def test_invalid_quantity_names_pod_container_and_quantity(p: dict[str, Any], expected: str) -> None:
    assert invalid_quantity(p, MANAGED) == expected


@pytest.mark.parametrize(
    "limits",
    [
        pytest.param(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "12Gi", "nvidia.com/gpucores": 30}, id="valid"
        ),
        pytest.param({"nvidia.com/gpu": "0.5"}, id="a fraction parses (HAMi reads it as no request)"),
        pytest.param({"nvidia.com/gpu": None}, id="null is Go's zero quantity"),
        pytest.param({"nvidia.com/gpu": 1, "cpu": "abc"}, id="not a device resource: kube-scheduler's"),
    ],
)
def test_quantities_that_parse_or_are_not_ours_pass(limits: dict[str, Any]) -> None:
    assert invalid_quantity(bad_pod(limits=limits), MANAGED) == ""


def test_the_memo_answers_per_pod_version() -> None:
    memo = PodRequestsMemo(VENDORS)
    bad = bad_pod(limits={"nvidia.com/gpu": "abc"})
    assert memo.invalid(bad).startswith("pod default/p: container c: invalid quantity nvidia.com/gpu=")
    fixed = bad_pod(limits={"nvidia.com/gpu": 1})
    assert memo.invalid(fixed) != ""  # same uid and resourceVersion: the same pod, as the API says
    fixed["metadata"]["resourceVersion"] = "2"
    assert memo.invalid(fixed) == ""


# --- the filter -----------------------------------------------------------------------------------


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str]] = []

    def record(self, pod: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.recorded.append((type_, reason, message))


def extender(p: dict[str, Any], events: Events) -> Extender:
    state = SchedulerState(VENDORS)
    state.set_node_devices("n1", [device(f"GPU-{i}", index=i, devmem=16000) for i in range(2)])
    synced = asyncio.Event()
    synced.set()
    return Extender(
        state=state, api=cast(Any, None), locker=cast(Any, None), events=events, policies=Policies(),
        synced=synced, cached_pod=lambda namespace, name: p, cached_node=lambda name: None,
        lock_aware=False, requeue_nudges=False,
    )


async def _filter(ext: Extender, body: dict[str, Any]) -> dict[str, Any]:
    answer: dict[str, Any] = json.loads(await ext.filter(json.dumps(body).encode()))
    return answer


BAD = [
    pytest.param({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "12Gx"}, 'nvidia.com/gpumem="12Gx"', id="gpumem"),
    # Without the check this pod asks for nothing and its nodes are echoed: placed with no GPU.
    pytest.param({"nvidia.com/gpu": "abc"}, "nvidia.com/gpu=\"abc\"", id="gpu"),
]


@pytest.mark.parametrize(("limits", "named"), BAD)
async def test_filter_answers_an_error_naming_the_quantity(limits: dict[str, Any], named: str) -> None:
    p = bad_pod(limits=limits)
    events = Events()
    ext = extender(p, events)
    answer = await _filter(ext, {"Pod": p, "NodeNames": ["n1"]})
    assert answer["Error"] == invalid_quantity(p, MANAGED)
    assert answer["Error"].startswith(f"pod default/p: container c: invalid quantity {named} in limits: ")
    assert not answer.get("NodeNames") and not answer.get("FailedNodes")
    assert ext.state.reserved_node("uid-p") is None
    assert events.recorded == [("Warning", "FilteringFailed", answer["Error"])]
    assert {k: v for k, v in ext.stats.decisions.series() if v} == {("error", "invalid_quantity"): 1}


@pytest.mark.parametrize(("limits", "named"), BAD)
async def test_filter_on_node_objects_answers_the_same_error(limits: dict[str, Any], named: str) -> None:
    p = bad_pod(limits=limits)
    answer = await _filter(extender(p, Events()), {"Pod": p, "Nodes": {"items": [gpu_node("t1")]}})
    assert answer["Error"] == invalid_quantity(p, MANAGED)
    assert named in answer["Error"] and not answer.get("Nodes")


async def test_filter_places_the_same_pod_with_a_valid_quantity() -> None:
    """Control: only the quantity differs."""
    p = bad_pod(limits={"nvidia.com/gpu": 1, "nvidia.com/gpumem": "12000"})
    events = Events()
    answer = await _filter(extender(p, events), {"Pod": p, "NodeNames": ["n1"]})
    assert answer["NodeNames"] == ["n1"] and not answer["Error"]
