"""Mutating admission webhook (§7): every mutation and denial, both review versions,
the transport checks, and the captured kube-apiserver fixtures."""

from __future__ import annotations

import base64
import copy
import dataclasses
import io
import json
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp.test_utils as aiotest
import pytest
from aiohttp import web

from tests import builders
from tests.builders import container_requests
from tests.fixtures import KUBE_1_36
from vgpu_scheduler.config import DeviceConfig, NvidiaConfig
from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.model import ContainerRequests
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.server.webhook import MAX_REQUEST_BYTES, handle_admission_review, webhook_handler
from vgpu_scheduler.wire.jsonpatch import apply_patch

FIXTURES = KUBE_1_36 / "admission"
V1 = "admission.k8s.io/v1"
V1BETA1 = "admission.k8s.io/v1beta1"
UNTYPED = (None, None)
OPTS = dataclasses.replace(SchedulerOptions(), scheduler_name="hami-scheduler")
CFG = NvidiaConfig()


def vendors(cfg: NvidiaConfig = CFG) -> Vendors:
    return build(DeviceConfig(cfg))

GPU, MEM, PCT, CORES, PRIO = (
    "nvidia.com/gpu",
    "nvidia.com/gpumem",
    "nvidia.com/gpumem-percentage",
    "nvidia.com/gpucores",
    "nvidia.com/priority",
)


def container(name: str = "cuda", limits: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """A container running nvidia/cuda; other keywords as for the shared `container`."""
    return builders.container(name, image="nvidia/cuda", limits=limits, **extra)


def pod(*containers: dict[str, Any], init: Sequence[dict[str, Any]] = (), **spec: Any) -> dict[str, Any]:
    """Pod ns/p sent for admission (default-scheduler unless `spec` says otherwise); `spec`
    keywords are spec fields. The spec keys keep this order (containers, schedulerName, the
    keywords, initContainers): the expected patches list their operations in it."""
    body = {"containers": list(containers), "schedulerName": "default-scheduler", **spec}
    if init:
        body["initContainers"] = list(init)
    return builders.pod("p", namespace="ns", typed=True, spec=body, status={})


def review(obj: Any, api_version: str = V1, uid: str = "uid-1") -> bytes:
    return json.dumps(
        {"kind": "AdmissionReview", "apiVersion": api_version, "request": {"uid": uid, "object": obj}}
    ).encode()


def run(
    obj: Any,
    opts: SchedulerOptions = OPTS,
    cfg: NvidiaConfig = CFG,
    quota_fits: Callable[[str, Sequence[ContainerRequests], int], bool] | None = None,
) -> dict[str, Any]:
    status, body = handle_admission_review(review(obj), opts, vendors(cfg), quota_fits)
    assert status == 200
    assert body["apiVersion"] == V1 and body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == "uid-1"
    response: dict[str, Any] = body["response"]
    return response


def ops_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in response:
        assert "patchType" not in response
        return []
    assert response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return ops


SCHED = {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"}


def limit_op(name: str, value: str, index: int = 0, kind: str = "containers") -> dict[str, Any]:
    path = f"/spec/{kind}/{index}/resources/limits/{name.replace('/', '~1')}"
    return {"op": "add", "path": path, "value": value}


# --- NVIDIA mutations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "requests", "cfg", "ops"),
    [
        # count only: whole card => exclusive cores
        pytest.param({GPU: "1"}, None, CFG, [limit_op(CORES, "100"), SCHED],
                     id="count only: a whole card gets 100 cores"),
        pytest.param({GPU: "2", MEM: "4096"}, None, CFG, [SCHED], id="count and memory"),
        pytest.param({GPU: "1", PCT: "100"}, None, CFG, [limit_op(CORES, "100"), SCHED],
                     id="100 percent memory is exclusive"),
        pytest.param({GPU: "1", PCT: "50"}, None, CFG, [SCHED], id="50 percent memory"),
        pytest.param({GPU: "1", PCT: "0"}, None, CFG, [SCHED], id="0 percent memory"),
        pytest.param({GPU: "1", CORES: "30"}, None, CFG, [SCHED], id="count and cores"),
        pytest.param({GPU: "1", CORES: "0"}, None, CFG, [SCHED], id="count and 0 cores"),
        # cores/mem/pct without count: defaultGPUNum is added
        pytest.param({MEM: "1k"}, None, CFG, [limit_op(GPU, "1"), SCHED],
                     id="memory without count: default count added"),
        pytest.param({CORES: "50"}, None, CFG, [limit_op(GPU, "1"), SCHED], id="cores without count"),
        pytest.param({PCT: "100"}, None, CFG, [limit_op(GPU, "1"), limit_op(CORES, "100"), SCHED],
                     id="100 percent without count: count and cores"),
        pytest.param({PCT: "40"}, None, CFG, [limit_op(GPU, "1"), SCHED], id="40 percent without count"),
        pytest.param({MEM: "1k"}, None, NvidiaConfig(default_gpu_num=2), [limit_op(GPU, "2"), SCHED],
                     id="default count 2"),
        pytest.param({MEM: "1k"}, None, NvidiaConfig(default_gpu_num=1024), [limit_op(GPU, "1Ki"), SCHED],
                     id="default count 1024 written 1Ki"),
        pytest.param({MEM: "1k"}, None, NvidiaConfig(default_gpu_num=1536), [limit_op(GPU, "1536"), SCHED],
                     id="default count 1536"),
        pytest.param({MEM: "1k"}, None, NvidiaConfig(default_gpu_num=0), [],
                     id="default count 0: not a GPU pod"),
        # count only in requests: only the exclusive rule makes it a GPU pod
        pytest.param(
            None,
            {GPU: "1"},
            CFG,
            [{"op": "add", "path": "/spec/containers/0/resources/limits", "value": {CORES: "100"}}, SCHED],
            id="count only in requests: limits created",
        ),
        pytest.param(None, {GPU: "1", CORES: "20"}, CFG, [], id="requested count and cores"),
        pytest.param(None, {GPU: "1", MEM: "2000"}, CFG, [], id="requested count and memory"),
        pytest.param({}, {GPU: "1", CORES: "20"}, CFG, [], id="empty limits, requested count and cores"),
        # requests-only memory still decides exclusivity
        pytest.param({GPU: "1"}, {MEM: "1000"}, CFG, [SCHED], id="memory in requests: not exclusive"),
        pytest.param({GPU: "1"}, {PCT: "100"}, CFG, [limit_op(CORES, "100"), SCHED],
                     id="100 percent in requests: exclusive"),
        pytest.param({GPU: "1"}, {CORES: "10"}, CFG, [SCHED], id="cores in requests"),
        # empty memory resource name => a count alone is exclusive even with memory given
        pytest.param(
            {GPU: "1", MEM: "1k"},
            None,
            NvidiaConfig(resource_memory_name=""),
            [limit_op(CORES, "100"), SCHED],
            id="no memory resource name: a count alone is exclusive",
        ),
        # not an NVIDIA pod at all
        pytest.param({"cpu": "1"}, None, CFG, [], id="cpu only: not an NVIDIA pod"),
        pytest.param(None, None, CFG, [], id="no resources"),
    ],
)
def test_resource_mutations(
    limits: dict[str, Any] | None,
    requests: dict[str, Any] | None,
    cfg: NvidiaConfig,
    ops: list[dict[str, Any]],
) -> None:
    original = pod(container(limits=limits, requests=requests))
    response = run(original, cfg=cfg)
    assert response["allowed"] is True
    assert response["status"] == {"metadata": {}, "code": 200}
    assert ops_of(response) == ops
    # The patch applies, and the webhook leaves its own output alone (reinvocation is harmless),
    # except for a count given only in requests (see test_reinvocation_quirk_for_requests_only_count).
    if limits is not None:
        assert ops_of(run(apply_patch(original, ops), cfg=cfg)) == []


def test_reinvocation_quirk_for_requests_only_count() -> None:
    """As in HAMi: once gpucores=100 sits in limits, a second pass adds limits[gpu]=defaultGPUNum."""
    first = pod(container(resources={"requests": {GPU: "1"}}))
    second = apply_patch(first, ops_of(run(first)))
    assert second["spec"]["containers"][0]["resources"]["limits"] == {CORES: "100"}
    assert ops_of(run(second)) == [limit_op(GPU, "1")]


def env_ops(*values: tuple[str, str], index: int = 0, existing: bool = False) -> list[dict[str, Any]]:
    base = f"/spec/containers/{index}/env"
    if existing:
        return [{"op": "add", "path": f"{base}/-", "value": {"name": n, "value": v}} for n, v in values]
    return [{"op": "add", "path": base, "value": [{"name": n, "value": v} for n, v in values]}]


@pytest.mark.parametrize(
    ("ctr", "cfg", "ops"),
    [
        # CUDA_TASK_PRIORITY from limits[priority] (Quantity.Value(): rounded up)
        pytest.param(
            container(limits={GPU: "1", CORES: "10", PRIO: "1"}),
            CFG,
            [*env_ops(("CUDA_TASK_PRIORITY", "1")), SCHED],
            id="priority 1",
        ),
        pytest.param(
            container(limits={GPU: "1", CORES: "10", PRIO: "0"}),
            CFG,
            [*env_ops(("CUDA_TASK_PRIORITY", "0")), SCHED],
            id="priority 0",
        ),
        pytest.param(
            container(limits={GPU: "1", CORES: "10", PRIO: "1500m"}),
            CFG,
            [*env_ops(("CUDA_TASK_PRIORITY", "2")), SCHED],
            id="priority 1500m rounds up",
        ),
        pytest.param(
            container(limits={GPU: "1", CORES: "10", PRIO: "1"}, env=[{"name": "FOO", "value": "bar"}]),
            CFG,
            [*env_ops(("CUDA_TASK_PRIORITY", "1"), existing=True), SCHED],
            id="priority appended to existing env",
        ),
        pytest.param(
            container(resources={"limits": {GPU: "1", CORES: "10"}, "requests": {PRIO: "1"}}),
            CFG,
            [SCHED],
            id="priority in requests ignored",
        ),
        # gpuCorePolicy: injected unless default/empty, on GPU and non-GPU containers alike
        pytest.param(
            container(limits={GPU: "1", CORES: "10"}),
            NvidiaConfig(gpu_core_policy="force"),
            [*env_ops(("GPU_CORE_UTILIZATION_POLICY", "force")), SCHED],
            id="core policy force",
        ),
        pytest.param(
            container(limits={"cpu": "1"}),
            NvidiaConfig(gpu_core_policy="disable"),
            env_ops(("GPU_CORE_UTILIZATION_POLICY", "disable")),
            id="core policy on a CPU container",
        ),
        pytest.param(container(limits={GPU: "1", CORES: "10"}), NvidiaConfig(gpu_core_policy=""), [SCHED],
                     id="empty core policy"),
        pytest.param(
            container(limits={GPU: "1", CORES: "10", PRIO: "2"}),
            NvidiaConfig(gpu_core_policy="force"),
            [*env_ops(("CUDA_TASK_PRIORITY", "2"), ("GPU_CORE_UTILIZATION_POLICY", "force")), SCHED],
            id="priority and core policy",
        ),
        # overwriteEnv hides GPUs from containers that did not ask for them
        pytest.param(
            container(limits={"cpu": "1"}),
            NvidiaConfig(overwrite_env=True),
            env_ops(("NVIDIA_VISIBLE_DEVICES", "none")),
            id="overwriteEnv hides GPUs from a CPU container",
        ),
        pytest.param(container(limits={GPU: "1", CORES: "10"}), NvidiaConfig(overwrite_env=True), [SCHED],
                     id="overwriteEnv leaves a GPU container"),
        # runtimeClassName for GPU pods only, never overwriting the user's
        pytest.param(
            container(limits={GPU: "1", CORES: "10"}),
            NvidiaConfig(runtime_class_name="nvidia"),
            [SCHED, {"op": "add", "path": "/spec/runtimeClassName", "value": "nvidia"}],
            id="runtime class for a GPU pod",
        ),
        pytest.param(container(limits={"cpu": "1"}), NvidiaConfig(runtime_class_name="nvidia"), [],
                     id="no runtime class for a CPU pod"),
    ],
)
def test_env_and_runtime_class(ctr: dict[str, Any], cfg: NvidiaConfig, ops: list[dict[str, Any]]) -> None:
    response = run(pod(ctr), cfg=cfg)
    assert response["allowed"] is True
    assert ops_of(response) == ops


def test_runtime_class_kept_when_set() -> None:
    ctr = container(limits={GPU: "1", CORES: "10"})
    response = run(pod(ctr, runtimeClassName="custom"), cfg=NvidiaConfig(runtime_class_name="nvidia"))
    assert ops_of(response) == [SCHED]


def test_init_and_regular_containers_all_mutated() -> None:
    init = container("init", limits={GPU: "1"})
    app = container("app", limits={MEM: "2000"})
    plain = container("side", limits={"cpu": "1"})
    response = run(pod(app, plain, init=[init]), cfg=NvidiaConfig(overwrite_env=True))
    ops = ops_of(response)
    assert limit_op(CORES, "100", kind="initContainers") in ops
    assert limit_op(GPU, "1", index=0) in ops
    assert {
        "op": "add",
        "path": "/spec/containers/1/env",
        "value": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}],
    } in ops
    assert SCHED in ops
    assert len(ops) == 4


def test_init_container_alone_makes_a_gpu_pod() -> None:
    response = run(pod(container("app"), init=[container("init", limits={GPU: "1", CORES: "5"})]))
    assert ops_of(response) == [SCHED]


# --- denials and errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "shown"),
    [("150", "150"), ("101", "101"), ("-1", "-1"), ("1k", "1000")],
)
def test_invalid_memory_percentage_is_an_error(value: str, shown: str) -> None:
    response = run(pod(container("work", limits={GPU: "1", PCT: value})))
    assert response["allowed"] is False
    assert response["status"] == {
        "metadata": {},
        "code": 500,
        "message": f"invalid nvidia.com/gpumem-percentage value {shown} in container work: "
        "must be an integer between 0 and 100",
    }
    assert "patch" not in response


@pytest.mark.parametrize("value", ["0", "100", "50.5", "99"])
def test_valid_memory_percentage(value: str) -> None:
    assert run(pod(container(limits={GPU: "1", PCT: value})))["allowed"] is True


def test_invalid_percentage_in_requests_of_init_container() -> None:
    init = container("i", resources={"requests": {PCT: "200"}})
    response = run(pod(container(), init=[init]))
    assert response["status"]["code"] == 500
    assert "in container i:" in response["status"]["message"]


def deny(message: str) -> dict[str, Any]:
    return {"metadata": {}, "code": 403, "reason": "Forbidden", "message": message}


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        pytest.param(pod(), "pod has no containers", id="no containers"),
        pytest.param(
            {"kind": "Pod", "apiVersion": "v1", "metadata": {}, "spec": {"containers": None}},
            "pod has no containers",
            id="containers null",
        ),
        pytest.param({"metadata": {"name": "x"}}, "pod has no containers", id="no spec"),
        pytest.param(pod(init=[container("i", limits={GPU: "1"})]), "pod has no containers",
                     id="init containers only"),
        pytest.param(
            pod(container("a", limits={GPU: "1"}, securityContext={"privileged": True})),
            "container a is privileged",
            id="privileged GPU container",
        ),
        pytest.param(
            pod(
                container("a", limits={GPU: "1"}), init=[container("i", securityContext={"privileged": True})]
            ),
            "container i is privileged",
            id="privileged init container",
        ),
        pytest.param(
            pod(
                container("a", limits={GPU: "1"}),
                container("b", securityContext={"privileged": True}),
                container("c", securityContext={"privileged": True}),
            ),
            "container b is privileged",
            id="first privileged container named",
        ),
        pytest.param(pod(container(limits={GPU: "1"}), nodeName="gpu-node-1"), "pod has node assigned",
                     id="node already assigned"),
    ],
)
def test_denials(obj: dict[str, Any], message: str) -> None:
    response = run(obj)
    assert response["allowed"] is False
    assert response["status"] == deny(message)
    assert "patch" not in response


@pytest.mark.parametrize(
    ("obj", "opts", "ops"),
    [
        # privileged but no GPU: allowed
        pytest.param(pod(container(securityContext={"privileged": True})), OPTS, [],
                     id="privileged without GPU"),
        pytest.param(
            pod(container(limits={GPU: "1"}, securityContext={"privileged": False})),
            OPTS,
            [limit_op(CORES, "100"), SCHED],
            id="privileged false",
        ),
        # already bound, but not a GPU pod (or no scheduler name to set): allowed
        pytest.param(pod(container(), nodeName="n1"), OPTS, [], id="bound CPU pod"),
        pytest.param(pod(container(limits={GPU: "1", CORES: "1"}), nodeName="n1"), SchedulerOptions(), [],
                     id="bound GPU pod, no scheduler name configured"),
        # scheduler name gate
        pytest.param(pod(container(limits={GPU: "1", CORES: "1"}), schedulerName="hami-scheduler"), OPTS, [],
                     id="already our scheduler"),
        pytest.param(
            pod(container(limits={GPU: "1", CORES: "1"}), schedulerName=""),
            OPTS,
            [{"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"}],
            id="empty scheduler name replaced",
        ),
        pytest.param(pod(container(limits={GPU: "1", CORES: "1"}), schedulerName=None), OPTS, [SCHED],
                     id="null scheduler name replaced"),
        pytest.param(pod(container(limits={GPU: "1"})), SchedulerOptions(), [limit_op(CORES, "100")],
                     id="no scheduler name configured: limits only"),
    ],
)
def test_allowed_cases(obj: dict[str, Any], opts: SchedulerOptions, ops: list[dict[str, Any]]) -> None:
    response = run(obj, opts=opts)
    assert response["allowed"] is True
    assert ops_of(response) == ops


def test_missing_scheduler_name_is_added() -> None:
    obj = pod(container(limits={GPU: "1", CORES: "1"}))
    del obj["spec"]["schedulerName"]
    assert ops_of(run(obj)) == [{"op": "add", "path": "/spec/schedulerName", "value": "hami-scheduler"}]


@pytest.mark.parametrize(
    ("scheduler", "force", "processed"),
    [
        ("other-scheduler", True, False),
        ("other-scheduler", False, False),
        ("default-scheduler", True, True),
        ("default-scheduler", False, False),
        ("hami-scheduler", False, True),
        ("", False, True),
    ],
)
def test_scheduler_name_gate(scheduler: str, force: bool, processed: bool) -> None:
    opts = dataclasses.replace(OPTS, force_overwrite_default_scheduler=force)
    response = run(pod(container(limits={GPU: "1"}), schedulerName=scheduler), opts=opts)
    assert response["allowed"] is True
    if processed:
        assert limit_op(CORES, "100") in ops_of(response)
        assert response["status"] == {"metadata": {}, "code": 200}
    else:
        assert ops_of(response) == []
        assert response["status"] == {
            "metadata": {},
            "code": 200,
            "message": "pod already has different scheduler assigned",
        }


def test_gate_runs_before_container_checks() -> None:
    # A foreign pod is let through untouched even with an invalid percentage or privileged GPU container.
    obj = pod(
        container(limits={GPU: "1", PCT: "500"}, securityContext={"privileged": True}), schedulerName="x"
    )
    assert run(obj)["allowed"] is True


# --- quota --------------------------------------------------------------------------------------


def test_quota_denial_and_arguments() -> None:
    calls: list[tuple[str, list[ContainerRequests], int]] = []

    def no_room(ns: str, reqs: Sequence[ContainerRequests], n_init: int) -> bool:
        calls.append((ns, list(reqs), n_init))
        return False

    obj = pod(container("a", limits={MEM: "1000", CORES: "20"}), init=[container("i")])
    response = run(obj, quota_fits=no_room)
    assert response["allowed"] is False
    assert response["status"] == deny("exceeding resource quota")
    # Requests are computed on the mutated pod: the injected gpu=1 counts.
    assert calls == [
        (
            "ns",
            [
                {},
                container_requests(1, mem=1000, cores=20),
            ],
            1,
        )
    ]


def test_quota_allows() -> None:
    response = run(pod(container(limits={GPU: "1", CORES: "1"})), quota_fits=lambda ns, reqs, n: True)
    assert response["allowed"] is True and ops_of(response) == [SCHED]


def test_quota_not_consulted_for_foreign_pods() -> None:
    def fail(ns: str, reqs: Sequence[ContainerRequests], n_init: int) -> bool:
        raise AssertionError("must not be called")

    assert run(pod(container(limits={GPU: "1"}), schedulerName="other"), quota_fits=fail)["allowed"] is True


def test_quota_namespace_falls_back_to_request() -> None:
    seen: list[str] = []
    obj = pod(container(limits={GPU: "1", CORES: "1"}))
    del obj["metadata"]["namespace"]
    body = json.dumps(
        {
            "apiVersion": V1,
            "kind": "AdmissionReview",
            "request": {"uid": "u", "namespace": "team-a", "object": obj},
        }
    ).encode()

    def record(ns: str, reqs: Sequence[ContainerRequests], n_init: int) -> bool:
        seen.append(ns)
        return True

    handle_admission_review(body, OPTS, vendors(), record)
    assert seen == ["team-a"]


# --- envelope -----------------------------------------------------------------------------------


@pytest.mark.parametrize("api_version", [V1, V1BETA1])
def test_api_version_is_echoed(api_version: str) -> None:
    status, body = handle_admission_review(
        review(pod(container(limits={GPU: "1", CORES: "1"})), api_version, "abc"), OPTS, vendors()
    )
    assert status == 200
    assert body["apiVersion"] == api_version
    assert body["kind"] == "AdmissionReview"
    assert body["response"]["uid"] == "abc"
    assert body["response"]["allowed"] is True
    assert ops_of(body["response"]) == [SCHED]


@pytest.mark.parametrize(
    ("body", "typed", "uid", "message"),
    [
        # Never decoded: an untyped review (no apiVersion, no kind), as controller-runtime's writeResponse.
        pytest.param(b"", UNTYPED, "", "request body is empty", id="empty body"),
        pytest.param(b"{not json", UNTYPED, "", "couldn't decode AdmissionReview: ", id="not JSON"),
        pytest.param(b"[]", UNTYPED, "", "couldn't decode AdmissionReview: body is not a JSON object",
                     id="a JSON array"),
        pytest.param(b'{"apiVersion":1,"request":{}}', UNTYPED, "", "apiVersion must be a string",
                     id="apiVersion not a string"),
        pytest.param(b'{"request":"x"}', UNTYPED, "", "request is not a JSON object",
                     id="request not an object"),
        pytest.param(b'{"request":{"uid":5}}', UNTYPED, "", "request.uid is not a string",
                     id="uid not a string"),
        # Decoded: apiVersion and kind echoed as sent, unchecked (an unregistered decode target).
        pytest.param(
            b'{"apiVersion":"admission.k8s.io/v2","kind":"AdmissionReview","request":{"uid":"u"}}',
            ("admission.k8s.io/v2", "AdmissionReview"),
            "u",
            "there is no content to decode",
            id="unknown apiVersion echoed",
        ),
        pytest.param(
            b'{"apiVersion":"admission.k8s.io/v1","kind":"Pod"}',
            (V1, "Pod"),
            "",
            "there is no content to decode",
            id="kind Pod echoed, no request",
        ),
        pytest.param(
            b'{"kind":"AdmissionReview","request":{}}', (None, "AdmissionReview"), "", "there is no content",
            id="no apiVersion, no content",
        ),
        pytest.param(
            b'{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview"}',
            (V1BETA1, "AdmissionReview"),
            "",
            "there is no content to decode",
            id="v1beta1 without request",
        ),
        # No uid is no error: the review is handled and answered with an empty uid.
        pytest.param(
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"object":{"spec":{"containers":[{}]}}}}',
            (V1, "AdmissionReview"),
            "",
            "",
            id="no uid: answered with an empty uid",
        ),
        pytest.param(
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":""}}',
            (V1, "AdmissionReview"),
            "",
            "there is no content to decode",
            id="empty uid, no object",
        ),
        pytest.param(
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":null}}',
            (V1, "AdmissionReview"),
            "u",
            "there is no content to decode",
            id="object null",
        ),
        pytest.param(
            b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","object":"x"}}',
            (V1, "AdmissionReview"),
            "u",
            "request.object is not a JSON object",
            id="object a string",
        ),
        pytest.param(
            b'{"request":{"uid":"u","object":{"kind":"Deployment"}}}',
            (V1, "AdmissionReview"),
            "u",
            "expected a v1 Pod",
            id="object not a Pod",
        ),
        pytest.param(
            review({"spec": {"containers": "x"}}),
            (V1, "AdmissionReview"),
            "uid-1",
            "spec.containers must be an array",
            id="containers not an array",
        ),
        pytest.param(
            review({"spec": {"containers": ["x"]}}),
            (V1, "AdmissionReview"),
            "uid-1",
            "spec.containers[0] must be an object",
            id="container not an object",
        ),
        pytest.param(
            review({"spec": {"containers": [{"resources": {"limits": {GPU: "one"}}}]}}),
            (V1, "AdmissionReview"),
            "uid-1",
            "spec.containers[0].resources.limits[nvidia.com/gpu]: quantities must match",
            id="gpu limit not a quantity",
        ),
        pytest.param(
            review({"spec": {"containers": [{"resources": {"limits": {GPU: True}}}]}}),
            (V1, "AdmissionReview"),
            "uid-1",
            "a quantity must be a string or a number",
            id="gpu limit a boolean",
        ),
        pytest.param(
            review({"spec": {"containers": [{"env": {"a": 1}}]}}),
            (V1, "AdmissionReview"),
            "uid-1",
            "spec.containers[0].env must be an array",
            id="env not an array",
        ),
        pytest.param(
            review({"spec": {"containers": [{"securityContext": {"privileged": "yes"}}]}}),
            (V1, "AdmissionReview"),
            "uid-1",
            "securityContext.privileged must be a boolean",
            id="privileged not a boolean",
        ),
        pytest.param(
            review({"spec": {"schedulerName": 5, "containers": [{}]}}),
            (V1, "AdmissionReview"),
            "uid-1",
            "spec.schedulerName must be a string",
            id="schedulerName not a string",
        ),
        pytest.param(review({"spec": []}), (V1, "AdmissionReview"), "uid-1", "pod.spec must be an object",
                     id="spec not an object"),
        pytest.param(
            review({"spec": {"containers": [{}]}}, V1BETA1), (V1BETA1, "AdmissionReview"), "uid-1", "",
            id="v1beta1 minimal pod is fine",
        ),
    ],
)
def test_bad_requests(body: bytes, typed: tuple[str | None, str | None], uid: str, message: str) -> None:
    status, answer = handle_admission_review(body, OPTS, vendors())
    assert status == 200
    assert (answer.get("apiVersion"), answer.get("kind")) == typed
    response = answer["response"]
    assert response["uid"] == uid
    if not message:  # control row: a well-formed minimal pod is fine
        assert response["allowed"] is True
        return
    assert response["allowed"] is False
    assert response["status"]["code"] == 400
    assert message in response["status"]["message"]
    assert "reason" not in response["status"]


@pytest.mark.parametrize(
    ("obj", "where"),
    [
        pytest.param(
            pod(container(limits={GPU: 1, MEM: "12Gx"})),
            "spec.containers[0].resources.limits[nvidia.com/gpumem]",
            id="gpumem in limits",
        ),
        pytest.param(
            pod(container(limits={GPU: "abc"})),
            "spec.containers[0].resources.limits[nvidia.com/gpu]",
            id="gpu alone",
        ),
        pytest.param(
            pod(container(), init=[builders.container("i", limits={GPU: 1}, requests={CORES: "1.5.3"})]),
            "spec.initContainers[0].resources.requests[nvidia.com/gpucores]",
            id="gpucores in an init container's requests",
        ),
    ],
)
def test_a_pod_whose_quantity_does_not_parse_is_denied_400(obj: dict[str, Any], where: str) -> None:
    # Denied, not passed and not a crash: Go's decoder cannot decode such a Pod either (controller-
    # runtime answers 400), and the API server never sends one, since it refuses the pod at creation.
    # Passing it would only move the failure to the filter, which refuses it with the same reason.
    response = run(obj)
    assert response["allowed"] is False and "patch" not in response
    assert response["status"]["code"] == 400
    assert response["status"]["message"].startswith(f"{where}: quantities must match the regular expression")


def test_numbers_are_quantities() -> None:
    # Go's Quantity also decodes JSON numbers.
    response = run(pod(container(limits={GPU: 1, CORES: 30})))
    assert response["allowed"] is True and ops_of(response) == [SCHED]


def test_input_pod_is_not_modified() -> None:
    obj = pod(container(limits={PCT: "100", PRIO: "1"}))
    before = copy.deepcopy(obj)
    run(obj, cfg=NvidiaConfig(gpu_core_policy="force", runtime_class_name="nvidia"))
    assert obj == before


# --- captured kube-apiserver traffic ------------------------------------------------------------

FIXTURE_CASES = ["admission-review.v1", "admission-review.v1beta1", "admission-review.v1.generate-name"]

# The capture server was not HAMi: besides HAMi's schedulerName rewrite its answer carried two
# marker mutations of its own, which no HAMi version produces (no annotation, and the pod asks
# for gpucores so no env/limit is added). We must produce exactly the HAMi part.
CAPTURE_MARKERS = [
    {"op": "add", "path": "/metadata/annotations", "value": {"hami.io/webhook": "mutated"}},
    {
        "op": "add",
        "path": "/spec/containers/0/env/-",
        "value": {"name": "CUDA_DISABLE_CONTROL", "value": "false"},
    },
]


def load(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


@pytest.mark.parametrize("case", FIXTURE_CASES)
def test_captured_reviews(case: str) -> None:
    request_body = (FIXTURES / f"{case}.request.json").read_bytes()
    sent = load(f"{case}.response.sent.json")
    sent_ops = load(f"{case}.patch.decoded.json")
    assert json.loads(base64.b64decode(sent["response"]["patch"])) == sent_ops

    status, answer = handle_admission_review(request_body, OPTS, vendors())
    assert status == 200
    assert answer["apiVersion"] == sent["apiVersion"]
    assert answer["kind"] == sent["kind"]
    ours, theirs = answer["response"], sent["response"]
    for key in ("uid", "allowed", "patchType"):
        assert ours[key] == theirs[key]
    assert ours["status"] == {"metadata": {}, "code": 200}

    ops = ops_of(ours)
    assert ops == [op for op in sent_ops if op not in CAPTURE_MARKERS]
    assert [op for op in sent_ops if op not in ops] == CAPTURE_MARKERS

    # Both patches apply to the captured object; they differ exactly by the markers.
    obj = json.loads(request_body)["request"]["object"]
    assert apply_patch(apply_patch(obj, ops), CAPTURE_MARKERS) == apply_patch(obj, sent_ops)


def test_captured_patch_matches_stored_pod() -> None:
    """apply_patch reproduces what kube-apiserver stored after applying the captured patch."""
    obj = load("admission-review.v1beta1.request.json")["request"]["object"]
    stored = load("pod.after-mutation.v1beta1.kubectl.json")
    patched = apply_patch(obj, load("admission-review.v1beta1.patch.decoded.json"))
    assert patched["metadata"]["annotations"] == stored["metadata"]["annotations"]
    stored_spec = {k: v for k, v in stored["spec"].items() if k != "nodeName"}  # set later by the binding
    assert patched["spec"] == stored_spec


# --- HTTP handler -------------------------------------------------------------------------------


async def post(body: bytes, content_type: str | None = "application/json") -> dict[str, Any]:
    """POST to a real aiohttp server running the handler (the body streamed, as large ones are)."""
    app = web.Application()
    app.router.add_post("/webhook", webhook_handler(OPTS, vendors()).handle)
    async with aiotest.TestClient(aiotest.TestServer(app)) as client:
        headers = {"Content-Type": content_type} if content_type else {}
        resp = await client.post("/webhook?timeout=10s", data=io.BytesIO(body), headers=headers)
        assert resp.status == 200
        result: dict[str, Any] = await resp.json()
        return result


async def test_http_round_trip_with_captured_request() -> None:
    body = (FIXTURES / "admission-review.v1.request.json").read_bytes()
    answer = await post(body)
    assert answer["response"]["uid"] == "498fc7ae-dc16-4cbc-b0ee-067286d7935f"
    assert ops_of(answer["response"]) == [SCHED]


@pytest.mark.parametrize(
    ("content_type", "message"),
    [
        ("text/plain", "contentType=text/plain, expected application/json"),
        (
            "application/json; charset=utf-8",
            "contentType=application/json; charset=utf-8, expected application/json",
        ),
    ],
)
async def test_http_content_type_checked(content_type: str, message: str) -> None:
    answer = await post(review(pod(container())), content_type)
    assert set(answer) == {"response"}  # untyped: controller-runtime never decoded the review
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"] == {"metadata": {}, "code": 400, "message": message}


async def test_http_empty_body() -> None:
    answer = await post(b"", None)
    assert set(answer) == {"response"}
    assert answer["response"]["status"]["message"] == "request body is empty"


async def test_http_body_limit() -> None:
    answer = await post(b" " * (MAX_REQUEST_BYTES + 1))
    assert set(answer) == {"response"}
    assert answer["response"]["status"] == {
        "metadata": {},
        "code": 413,
        "message": f"request entity is too large; limit is {MAX_REQUEST_BYTES} bytes",
    }
