"""`Extender.filter_pod` (the simulator's in-process verb) answers what `Extender.filter` answers
for the body naming the same pod and nodes, and counts the same outcome, on every path."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.builders import gpu_pod
from tests.scheduler.conftest import Stack
from vgpu_scheduler.wire.extender import encode_filter_result

Obj = dict[str, Any]


async def both(stack: Stack, pod: Obj, names: list[str] | None) -> tuple[bytes, bytes]:
    """The in-process answer encoded, then the bytes answer, for the same arguments."""
    typed = await stack.extender.filter_pod(pod, names)
    body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode()
    return typed.encoded(), await stack.extender.filter(body)


async def test_a_pod_that_fits_gets_the_same_node(stack: Stack) -> None:
    p = await stack.create(gpu_pod("fits"))
    typed, raw = await both(stack, p, ["n1", "n2"])
    assert typed == raw
    assert json.loads(raw)["NodeNames"] in (["n1"], ["n2"])
    assert stack.decisions() == {("chosen", "fit"): 2}


async def test_a_pod_that_fits_nowhere_gets_the_same_failed_nodes(stack: Stack) -> None:
    p = await stack.create(gpu_pod("big", mem=1024 * 1024))
    answer = await stack.extender.filter_pod(p, ["n1", "n2"])
    assert answer.node_names is None and answer.error == ""
    failed = dict(answer.failed or {})
    body = json.dumps({"Pod": p, "NodeNames": ["n1", "n2"]}).encode()
    assert json.loads(await stack.extender.filter(body))["FailedNodes"] == failed
    assert sorted(failed) == ["n1", "n2"]
    assert stack.decisions() == {("nofit", "CardInsufficientMemory"): 2}


async def test_errors_and_echoes_match(stack: Stack) -> None:
    ghost = gpu_pod("ghost", uid="uid-ghost")  # never created: unknown to the informer
    stack.extender.pod_wait = 0.0
    typed, raw = await both(stack, ghost, ["n1"])
    assert typed == raw and json.loads(raw)["Error"] == 'pods "ghost" not found'
    plain = {"metadata": {"name": "c", "namespace": "default"}, "spec": {"containers": [{"name": "c"}]}}
    for names in (["n2", "n1"], None):
        typed, raw = await both(stack, plain, names)
        assert typed == raw and json.loads(raw)["NodeNames"] == names
    stack.extender.synced.clear()
    stack.extender.sync_wait = 0.01
    typed, raw = await both(stack, gpu_pod("early"), ["n1"])
    assert typed == raw and json.loads(raw)["Error"] == "context cancelled"
    assert stack.decisions() == {
        ("error", "pod_unknown"): 2,
        ("no_request", "no_device_request"): 4,
        ("error", "not_synced"): 2,
    }


async def test_the_names_given_are_not_changed(stack: Stack) -> None:
    p = await stack.create(gpu_pod("p"))
    names = ["n2", "n1"]
    await stack.extender.filter_pod(p, names)
    big = await stack.create(gpu_pod("big", mem=1024 * 1024))
    await stack.extender.filter_pod(big, names)
    assert names == ["n2", "n1"]


async def test_a_no_fit_answer_is_encoded_once(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its FailedNodes (one entry per node: thousands) serve the events' texts and the answer."""
    calls: list[object] = []
    real = encode_filter_result

    def counting(**kwargs: Any) -> bytes:
        calls.append(kwargs.get("failed"))
        return real(**kwargs)

    # Patched where encode_no_fit looks it up.
    monkeypatch.setattr("vgpu_scheduler.scheduler.filter.encode_filter_result", counting)
    p = await stack.create(gpu_pod("big", mem=1024 * 1024))
    answer = await stack.filter({"Pod": p, "NodeNames": ["n1", "n2"]})
    assert sorted(answer["FailedNodes"]) == ["n1", "n2"]
    assert len(calls) == 1 and calls[0]
