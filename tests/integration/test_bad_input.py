"""Bad input over real HTTP gets the documented answer (§5.9, §7), and the server keeps
serving; a broken node or pod annotation takes only that node or pod out."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from tests.builders import gpu_container, gpu_node, gpu_pod, gpu_uuid, placed_pod, pod
from vgpu_scheduler.standin.memory import MemoryCluster

MIB = 1 << 20


def _pod(**spec: Any) -> dict[str, Any]:
    """Pod default/x (uid-x) with `spec`, by default one container asking for one GPU."""
    return pod("x", uid="uid-x", typed=True, spec=spec or {"containers": [gpu_container()]})


def _review(**request: Any) -> bytes:
    return json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    ).encode()


def _error_is(text: str) -> Callable[[Any], bool]:
    return lambda body: body == {"Error": text} or (isinstance(body, dict) and body.get("Error") == text)


def _review_error(code: int, message: str, uid: str = "", typed: bool = True) -> Callable[[Any], bool]:
    """typed=False: a body controller-runtime never decoded is answered without apiVersion/kind."""

    def check(body: Any) -> bool:
        response = body["response"]
        return bool(
            body.get("kind") == ("AdmissionReview" if typed else None)
            and ("apiVersion" in body) is typed
            and response["uid"] == uid
            and response["allowed"] is False
            and response["status"]["code"] == code
            and message in response["status"]["message"]
            and "patch" not in response
        )

    return check


@dataclass(frozen=True)
class Case:
    id: str
    path: str
    body: bytes
    status: int
    check: Callable[[Any], bool]  # on the decoded JSON answer (or the text for non-JSON answers)
    content_type: str = "application/json"
    reserves: bool = False  # a successful filter reserves devices; every other row must not


BIG = b'{"Pod": {"x": "' + b"a" * (MIB + 10) + b'"}}'

CASES = [
    Case("filter-empty-body", "/filter", b"", 400, lambda t: t == "Please send a request body\n"),
    Case("bind-empty-body", "/bind", b"", 400, lambda t: t == "Please send a request body\n"),
    Case(
        "filter-malformed-json",
        "/filter",
        b'{"Pod": {"metadata": ',
        200,
        _error_is("unexpected EOF"),
    ),
    Case(
        "filter-not-json",
        "/filter",
        b"{not json}",
        200,
        lambda b: b["Error"].startswith("invalid JSON") and b["NodeNames"] is None,
    ),
    Case(
        "filter-body-is-array",
        "/filter",
        b"[]",
        200,
        _error_is("json: cannot unmarshal array into Go value of type v1.ExtenderArgs"),
    ),
    Case(
        "filter-pod-wrong-type",
        "/filter",
        b'{"Pod": 5, "NodeNames": ["gpu-a"]}',
        200,
        _error_is("json: cannot unmarshal number into Go struct field ExtenderArgs.Pod of type v1.Pod"),
    ),
    Case(
        "filter-nodenames-wrong-type",
        "/filter",
        json.dumps({"Pod": _pod(), "NodeNames": "gpu-a"}).encode(),
        200,
        _error_is(
            "json: cannot unmarshal string into Go struct field ExtenderArgs.NodeNames of type []string"
        ),
    ),
    Case("filter-over-1MiB", "/filter", BIG, 200, _error_is("unexpected EOF")),
    Case(
        "filter-missing-pod",
        "/filter",
        b'{"NodeNames": ["gpu-a"]}',
        200,
        _error_is("extender args missing pod"),
    ),
    Case("filter-null-pod", "/filter", b'{"Pod": null}', 200, _error_is("extender args missing pod")),
    Case(
        "filter-unknown-node",
        "/filter",
        json.dumps({"Pod": _pod(), "NodeNames": ["ghost"]}).encode(),
        200,
        lambda b: b["FailedNodes"] == {"ghost": "node unregistered"} and b["NodeNames"] is None,
    ),
    Case(
        "filter-keys-any-case",
        "/filter",
        json.dumps({"pod": _pod(), "nodenames": ["gpu-a"]}).encode(),
        200,
        lambda b: b["NodeNames"] == ["gpu-a"] and b["Error"] == "",
        reserves=True,
    ),
    Case(
        # Not validated by an API server: non-string annotation values are ignored, not a crash (500).
        "filter-annotation-values-not-strings",
        "/filter",
        json.dumps(
            {
                "Pod": {
                    **_pod(),
                    "metadata": {
                        "name": "x",
                        "namespace": "default",
                        "uid": "uid-x",
                        "annotations": {
                            "hami.io/gpu-scheduler-policy": 5,
                            "nvidia.com/use-gputype": 3,
                            "nvidia.com/vgpu-mode": [],
                            "hami.io/device-scoring-weights": {"slot": 1},
                        },
                    },
                },
                "NodeNames": ["gpu-a"],
            }
        ).encode(),
        200,
        lambda b: b["NodeNames"] == ["gpu-a"] and b["Error"] == "",
        reserves=True,
    ),
    Case(
        "bind-wrong-type",
        "/bind",
        b'{"PodName": 1, "PodNamespace": "default", "Node": "gpu-a"}',
        200,
        _error_is(
            "json: cannot unmarshal number into Go struct field ExtenderBindingArgs.PodName of type string"
        ),
    ),
    Case(
        "bind-missing-pod",
        "/bind",
        b'{"PodName": "nope", "PodNamespace": "default", "PodUID": "u", "Node": "gpu-a"}',
        200,
        _error_is('pod "nope" not found'),
    ),
    Case(
        "bind-unknown-node",
        "/bind",
        b'{"PodName": "real", "PodNamespace": "default", "Node": "ghost"}',
        200,
        _error_is('node "ghost" not found'),
    ),
    Case("bind-over-1MiB", "/bind", BIG, 200, _error_is("unexpected EOF")),
    Case(
        "webhook-no-uid",
        "/webhook",
        _review(namespace="default", object=_pod()),
        200,
        # controller-runtime does not check the uid: the pod is reviewed and the uid echoed empty.
        lambda body: body["response"]["uid"] == "" and body["response"]["allowed"] is True,
    ),
    Case(
        "webhook-wrong-content-type",
        "/webhook",
        _review(uid="u1", object=_pod()),
        200,
        _review_error(400, "contentType=text/plain, expected application/json", typed=False),
        content_type="text/plain",
    ),
    Case(
        "webhook-malformed-json",
        "/webhook",
        b"{",
        200,
        _review_error(400, "couldn't decode AdmissionReview", typed=False),
    ),
    Case(
        "webhook-empty-body", "/webhook", b"", 200, _review_error(400, "request body is empty", typed=False)
    ),
    Case(
        "webhook-no-object",
        "/webhook",
        _review(uid="u2"),
        200,
        _review_error(400, "there is no content to decode", uid="u2"),
    ),
    Case(
        "webhook-containers-wrong-type",
        "/webhook",
        _review(uid="u3", object=_pod(containers="oops")),
        200,
        _review_error(400, "spec.containers must be an array", uid="u3"),
    ),
    Case(
        "webhook-bad-percentage",
        "/webhook",
        _review(
            uid="u4",
            object=_pod(
                containers=[{"name": "c", "resources": {"limits": {"nvidia.com/gpumem-percentage": "150"}}}]
            ),
        ),
        200,
        _review_error(500, "must be an integer between 0 and 100", uid="u4"),
    ),
    Case(
        "webhook-over-7MiB",
        "/webhook",
        b'{"request": {"uid": "u6", "object": {"x": "' + b"a" * (7 * MIB) + b'"}}}',
        200,
        _review_error(413, "request entity is too large; limit is 7340032 bytes", typed=False),
    ),
    Case(
        "webhook-no-containers",
        "/webhook",
        _review(uid="u5", object=_pod(containers=[])),
        200,
        _review_error(403, "pod has no containers", uid="u5"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_bad_request_gets_the_documented_answer(
    case: Case, it: Any, cluster: MemoryCluster, launch: Any
) -> None:
    cluster.create("nodes", gpu_node("gpu-a"))
    cluster.create("pods", gpu_pod("real", mem=1000), namespace="default")
    cluster.seed_from_list([_pod()])  # the pod the filter cases name, with its uid
    stack = await launch()
    # A file-like body: aiohttp streams it (raw bytes over 1 MiB would warn about blocking the loop).
    body = io.BytesIO(case.body)
    async with stack.session.post(
        stack.url + case.path, data=body, headers={"Content-Type": case.content_type}
    ) as resp:
        assert resp.status == case.status
        if resp.content_type == "application/json":
            answer: Any = await resp.json()
        else:
            assert case.status == 400 and resp.content_type == "text/plain"
            answer = await resp.text()
        assert case.check(answer), answer
    assert await stack.healthz() == 200
    # Nothing was reserved or written by a refused request.
    used = sum(u[0] for u in it.usage(stack.process)["gpu-a"])
    assert used == (1 if case.reserves else 0)
    assert "nodeName" not in cluster.get("pods", "real", "default")["spec"]


@pytest.mark.parametrize(
    "register",
    [
        "garbage-without-separator",  # legacy form without ':'
        "GPU-x,10,notanumber,100,NVIDIA-A10,0,true:",  # legacy form, bad memory field
        '[{"id": 5, "count": "ten"}]',  # JSON with wrong types
        "[]",  # no GPU found
        '[{"id": "GPU-broken"',  # truncated JSON
    ],
)
async def test_broken_node_annotation_only_takes_that_node_out(
    register: str, it: Any, cluster: MemoryCluster, launch: Any
) -> None:
    cluster.create("nodes", gpu_node("gpu-a"))
    broken = gpu_node("gpu-broken")
    broken["metadata"]["annotations"]["hami.io/node-nvidia-register"] = register
    cluster.create("nodes", broken)
    stack = await launch()
    assert set(it.usage(stack.process)) == {"gpu-a"}
    pod = cluster.create("pods", gpu_pod("p", mem=1000), namespace="default")
    result = await stack.filter(pod, ["gpu-broken", "gpu-a"])
    assert result["NodeNames"] == ["gpu-a"] and result["Error"] == ""
    assert await stack.bind(pod, "gpu-a") == ""
    # Asked for the broken node alone: it is simply not a candidate.
    other = cluster.create("pods", gpu_pod("q", mem=1000), namespace="default")
    assert (await stack.filter(other, ["gpu-broken"]))["FailedNodes"] == {"gpu-broken": "node unregistered"}
    assert await stack.healthz() == 200


@pytest.mark.parametrize(
    "allocated",
    [
        "GPU-gpu-a-0,NVIDIA,notanumber,10:;",  # MEM not an int32
        "GPU-gpu-a-0,NVIDIA:;",  # fewer than four fields
        "GPU-gpu-a-0,NVIDIA,99999999999,10:;",  # MEM out of int32
    ],
)
async def test_broken_pod_allocation_is_ignored_others_counted(
    allocated: str, it: Any, cluster: MemoryCluster, launch: Any
) -> None:
    cluster.create("nodes", gpu_node("gpu-a"))
    a0, a1 = gpu_uuid("gpu-a", 0), gpu_uuid("gpu-a", 1)
    cluster.create("pods", placed_pod("good", "gpu-a", f"{a0},NVIDIA,1000,10:;"), namespace="default")
    cluster.create("pods", placed_pod("bad", "gpu-a", allocated), namespace="default")
    cluster.create("pods", placed_pod("good2", "gpu-a", f"{a1},NVIDIA,2000,20:;"), namespace="default")
    stack = await launch()
    assert it.usage(stack.process) == {"gpu-a": [(1, 1000, 10), (1, 2000, 20)]}
    metrics = await stack.metrics()
    assert {labels["pod"] for labels, _ in metrics["hami_vgpu_memory_allocated_bytes"]} == {"good", "good2"}

    # The bad pod breaks later too (an update), without touching the others; a fix makes it count.
    cluster.patch(
        "pods",
        "good",
        {"metadata": {"annotations": {"hami.io/vgpu-devices-allocated": allocated}}},
        "default",
    )
    await it.eventually(
        lambda: it.usage(stack.process) == {"gpu-a": [(0, 0, 0), (1, 2000, 20)]}, "the broken update"
    )
    fixed = f"{a0},NVIDIA,3000,30:;"
    cluster.patch(
        "pods", "bad", {"metadata": {"annotations": {"hami.io/vgpu-devices-allocated": fixed}}}, "default"
    )
    await it.eventually(
        lambda: it.usage(stack.process) == {"gpu-a": [(1, 3000, 30), (1, 2000, 20)]}, "the repaired pod"
    )
    pod = cluster.create("pods", gpu_pod("new", mem=1000), namespace="default")
    assert (await stack.filter(pod, ["gpu-a"]))["NodeNames"] == ["gpu-a"]
    assert await stack.healthz() == 200
