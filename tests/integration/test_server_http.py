"""The whole life of GPU pods through the real server over HTTP, against the fake API over HTTP:
registration (handshake written) → webhook (v1 and v1beta1) → filter → bind → the device plugin's
part → deletion frees the devices, seen in /metrics and in the process state."""

from __future__ import annotations

import socket
from datetime import datetime
from typing import Any

from tests.builders import api_pod, container, gpu_node, gpu_pod, gpu_quota, gpu_uuid, node, pod
from vgpu_scheduler.standin.embedded.deviceplugin import BackgroundDevicePlugin
from vgpu_scheduler.standin.fakeapi import FakeApiServer
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.wire import keys

MIB = 1024 * 1024


def _series(metrics: dict[str, Any], name: str, **match: str) -> dict[str, float]:
    """device_uuid (or pod) → value of the series `name` whose labels contain `match`."""
    out: dict[str, float] = {}
    for labels, value in metrics.get(name, []):
        if all(labels.get(k) == v for k, v in match.items()):
            assert labels["zone"] == "vGPU"
            out[labels.get("pod") or labels["device_uuid"]] = value
    return out


async def test_pod_life_end_to_end(
    it: Any, cluster: MemoryCluster, api: FakeApiServer, launch: Any, plugin: BackgroundDevicePlugin
) -> None:
    cluster.create("nodes", gpu_node("gpu-a"))
    cluster.create("nodes", node("cpu-a", typed=True))
    stack = await launch()
    a0, a1 = gpu_uuid("gpu-a", 0), gpu_uuid("gpu-a", 1)

    # Registration: the inventory is in the ledger and the scheduler stamped the handshake.
    assert it.usage(stack.process) == {"gpu-a": [(0, 0, 0), (0, 0, 0)]}

    def handshake() -> str:
        return str(cluster.get("nodes", "gpu-a")["metadata"]["annotations"].get(keys.NODE_HANDSHAKE, ""))

    await it.eventually(lambda: handshake().startswith("Requesting_"), "the handshake write")
    stamp = datetime.strptime(handshake().removeprefix("Requesting_"), "%Y-%m-%d %H:%M:%S")
    assert abs((datetime.now() - stamp).total_seconds()) < 120  # local time, as HAMi writes it
    metrics = await stack.metrics()
    assert _series(metrics, "hami_gpu_memory_limit_bytes", node="gpu-a") == {
        a0: 24 * 1024 * MIB,
        a1: 24 * 1024 * MIB,
    }
    assert _series(metrics, "hami_gpu_memory_allocated_bytes", node="gpu-a") == {a0: 0, a1: 0}

    # Webhook, AdmissionReview v1: a shared GPU pod without a scheduler name is taken over.
    shared = gpu_pod("shared", mem=3000, cores=30)
    del shared["spec"]["schedulerName"]
    answer = await stack.post("/webhook", it.review(shared, "v1", uid="uid-v1"))
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["response"]["uid"] == "uid-v1" and answer["response"]["allowed"] is True
    shared = it.apply_review(shared, answer)
    assert shared["spec"]["schedulerName"] == "hami-scheduler"
    shared = cluster.create("pods", shared, namespace="default")

    # Webhook, AdmissionReview v1beta1 (what the chart registers): a whole-card pod gets gpucores=100.
    whole = gpu_pod("whole")
    answer = await stack.post("/webhook", it.review(whole, "v1beta1", uid="uid-v1beta1"))
    assert answer["apiVersion"] == "admission.k8s.io/v1beta1"
    assert answer["response"]["uid"] == "uid-v1beta1" and answer["response"]["allowed"] is True
    whole = it.apply_review(whole, answer)
    assert whole["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] == "100"
    whole = cluster.create("pods", whole, namespace="default")

    # Filter: one node, reserved at once (no API write yet), visible in the metrics.
    result = await stack.filter(shared, ["gpu-a", "cpu-a"])
    assert result == {
        "Nodes": None,
        "NodeNames": ["gpu-a"],
        "FailedNodes": None,
        "FailedAndUnresolvableNodes": None,
        "Error": "",
    }
    assert sorted(it.usage(stack.process)["gpu-a"]) == [(0, 0, 0), (1, 3000, 30)]
    metrics = await stack.metrics()
    assert sorted(_series(metrics, "hami_gpu_memory_allocated_bytes", node="gpu-a").values()) == [
        0,
        3000 * MIB,
    ]

    # Bind: lock, §4.1 annotations + bind phase in one patch, Binding; then the plugin's part.
    assert await stack.bind(shared, "gpu-a") == ""
    stored = cluster.get("pods", "shared", "default")
    annotations = stored["metadata"]["annotations"]
    assert stored["spec"]["nodeName"] == "gpu-a"
    assert stored["metadata"]["labels"][keys.VGPU_NODE] == "gpu-a"
    assert annotations[keys.VGPU_NODE] == "gpu-a"
    shared_uuid = annotations[keys.VGPU_ALLOCATED].split(",")[0]
    assert annotations[keys.VGPU_ALLOCATED] == f"{shared_uuid},NVIDIA,3000,30:;"
    assert annotations[keys.BIND_TIME].isdigit() and annotations[keys.VGPU_TIME].isdigit()

    def admitted(name: str) -> bool:
        pod = cluster.get("pods", name, "default")
        phase = pod["metadata"]["annotations"].get(keys.BIND_PHASE)
        return bool(phase == keys.BIND_PHASE_SUCCESS and pod["status"].get("phase") == "Running")

    def unlocked() -> bool:
        return keys.NODE_LOCK not in (cluster.get("nodes", "gpu-a")["metadata"].get("annotations") or {})

    await it.eventually(lambda: admitted("shared") and unlocked(), "the plugin to admit 'shared'")
    assert cluster.get("pods", "shared", "default")["metadata"]["annotations"][keys.VGPU_TO_ALLOCATE] == ";"

    # The whole-card pod cannot share the used GPU (spread would not pick it anyway): the other one.
    assert (await stack.filter(whole, ["gpu-a"]))["NodeNames"] == ["gpu-a"]
    assert await stack.bind(whole, "gpu-a") == ""
    await it.eventually(lambda: admitted("whole") and unlocked(), "the plugin to admit 'whole'")
    whole_uuid = cluster.get("pods", "whole", "default")["metadata"]["annotations"][
        keys.VGPU_ALLOCATED
    ].split(",")[0]
    assert {shared_uuid, whole_uuid} == {a0, a1}

    # The confirmed state is what a fresh ledger rebuilt from the API's pods says; metrics agree.
    await it.eventually(
        lambda: it.usage(stack.process) == it.rebuilt_usage(cluster, stack.process), "the watch to confirm"
    )
    expected = {shared_uuid: (1, 3000, 30), whole_uuid: (1, 24 * 1024, 100)}
    metrics = await stack.metrics()
    assert _series(metrics, "hami_gpu_memory_allocated_bytes", node="gpu-a") == {
        u: mem * MIB for u, (_, mem, _) in expected.items()
    }
    assert _series(metrics, "hami_gpu_shared_count", node="gpu-a") == {
        u: n for u, (n, _, _) in expected.items()
    }
    assert _series(metrics, "hami_gpu_core_allocated_ratio", node="gpu-a") == {
        u: c for u, (_, _, c) in expected.items()
    }
    assert _series(metrics, "hami_vgpu_memory_allocated_bytes") == {
        "shared": 3000 * MIB,
        "whole": 24 * 1024 * MIB,
    }

    # Events went to the API through the recorder.
    reasons = {(e["involvedObject"]["name"], e["reason"]) for e in cluster.objects("events")}
    assert {
        ("shared", "FilteringSucceed"),
        ("shared", "BindingSucceed"),
        ("whole", "BindingSucceed"),
    } <= reasons

    # Deletion: a graceful delete keeps the devices (Terminating), the final delete frees them.
    cluster.delete("pods", "shared", "default")
    await it.eventually(
        lambda: "deletionTimestamp" in stack.process.pods.store.get("default", "shared")["metadata"],
        "the Terminating update",
    )
    assert sorted(it.usage(stack.process)["gpu-a"]) == sorted(expected.values())
    cluster.delete("pods", "shared", "default", grace_period_seconds=0)
    cluster.delete("pods", "whole", "default", grace_period_seconds=0)
    await it.eventually(
        lambda: it.usage(stack.process) == {"gpu-a": [(0, 0, 0), (0, 0, 0)]},
        "the deletes to free the devices",
    )
    metrics = await stack.metrics()
    assert _series(metrics, "hami_gpu_memory_allocated_bytes", node="gpu-a") == {a0: 0, a1: 0}
    assert _series(metrics, "hami_gpu_shared_count", node="gpu-a") == {a0: 0, a1: 0}
    assert _series(metrics, "hami_vgpu_memory_allocated_bytes") == {}
    assert unlocked()

    # Every request the scheduler made carried the kubeconfig's token.
    assert api.auth_headers and set(api.auth_headers) == {f"Bearer {it.TOKEN}"}
    assert await stack.healthz() == 200


async def test_filter_without_devices_unregistered_and_unfit(
    it: Any, cluster: MemoryCluster, launch: Any
) -> None:
    cluster.create("nodes", gpu_node("gpu-a"))
    stack = await launch()
    plain = cluster.create(
        "pods",
        pod("plain", containers=[container("c")]),
        namespace="default",
    )
    result = await stack.filter(plain, ["gpu-a", "elsewhere"])
    assert result["NodeNames"] == ["gpu-a", "elsewhere"] and result["FailedNodes"] is None

    huge = cluster.create("pods", gpu_pod("huge", mem=99_999), namespace="default")
    result = await stack.filter(huge, ["gpu-a", "elsewhere"])
    assert result["NodeNames"] is None and result["Error"] == ""
    assert result["FailedNodes"] == {"gpu-a": "2/2 CardInsufficientMemory", "elsewhere": "node unregistered"}
    assert it.usage(stack.process) == {"gpu-a": [(0, 0, 0), (0, 0, 0)]}
    await it.eventually(
        lambda: any(
            "no available node, 2 nodes do not meet" in e["message"] for e in cluster.objects("events")
        ),
        "the FilteringFailed event",
    )


async def test_node_added_while_running_is_registered(it: Any, cluster: MemoryCluster, launch: Any) -> None:
    stack = await launch()
    assert it.usage(stack.process) == {}
    cluster.create("nodes", gpu_node("late", gpus=1))
    # A node add wakes the registration loop (no 15 s wait).
    await it.eventually(lambda: "late" in it.usage(stack.process), "the new node's registration")
    pod = cluster.create("pods", gpu_pod("p", mem=1000), namespace="default")
    assert (await stack.filter(pod, ["late"]))["NodeNames"] == ["late"]
    cluster.delete("nodes", "late")
    await it.eventually(lambda: "late" not in it.usage(stack.process), "the node's removal")
    assert (await stack.filter(pod, ["late"]))["FailedNodes"] == {"late": "node unregistered"}


async def test_filter_for_a_pod_already_deleted_reserves_nothing(
    it: Any, cluster: MemoryCluster, launch: Any
) -> None:
    """kube-scheduler's cache can lag ours: it may filter a pod whose deletion we have already seen.
    No pod event will ever come for it again, so a reservation made now would hold the devices
    forever (HAMi's filter-time patch fails with NotFound instead, and rolls back)."""
    cluster.create("nodes", gpu_node("gpu-a"))
    stack = await launch()
    pod = cluster.create("pods", gpu_pod("gone", mem=8000), namespace="default")
    store = stack.process.pods.store
    await it.eventually(lambda: store.get("default", "gone") is not None, "the pod in the informer")
    cluster.delete("pods", "gone", "default", grace_period_seconds=0)
    await it.eventually(lambda: store.get("default", "gone") is None, "the deletion in the informer")

    result = await stack.filter(pod, ["gpu-a"])
    assert result["NodeNames"] is None and result["Error"] == 'pods "gone" not found'
    assert it.usage(stack.process) == {"gpu-a": [(0, 0, 0), (0, 0, 0)]}
    # A new pod with the same name is another object (another uid): it schedules normally.
    again = cluster.create("pods", gpu_pod("gone", mem=8000), namespace="default")
    assert (await stack.filter(again, ["gpu-a"]))["NodeNames"] == ["gpu-a"]


def _lease(holder: str, duration: int = 15) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "hami-scheduler", "namespace": "hami-system"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration},
    }


def _scheduler_pod(name: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/component": "hami-scheduler", "hami.io/webhook": "ignore"}
    return api_pod(name, namespace="hami-system", labels=labels,
                   containers=[container("vgpu-scheduler-extender", image="x")])


async def test_leadership_follows_the_lease(
    it: Any, cluster: MemoryCluster, launch: Any, monkeypatch: Any
) -> None:
    """--leader-elect (§8.2): leader while kube-scheduler's Lease names our host; the leader labels
    the scheduler pods for the Service; a follower does not register, so its filter waits."""
    me = socket.gethostname()
    monkeypatch.setenv("POD_NAME", "sched-0")
    monkeypatch.setenv("POD_NAMESPACE", "hami-system")
    cluster.create("nodes", gpu_node("gpu-a"))
    cluster.create("leases", _lease(f"{me}_4b2c"), namespace="hami-system")
    for name in ("sched-0", "sched-1"):
        cluster.create("pods", _scheduler_pod(name), namespace="hami-system")
    stack = await launch(
        leader_elect=True,
        leader_elect_resource_name="hami-scheduler",
        leader_elect_resource_namespace="hami-system",
    )
    stack.process.extender.sync_wait = 0.2  # how long a filter waits for `synced` (30 s in production)
    pod = cluster.create("pods", gpu_pod("p", mem=1000), namespace="default")
    assert (await stack.filter(pod, ["gpu-a"]))["NodeNames"] == ["gpu-a"]

    def roles() -> dict[str, str]:
        pods = cluster.objects("pods", "hami-system")
        return {
            p["metadata"]["name"]: p["metadata"]["labels"].get("hami.io/scheduler-role", "") for p in pods
        }

    await it.eventually(lambda: roles() == {"sched-0": "leader", "sched-1": "follower"}, "the role labels")

    # Another replica's kube-scheduler takes the lease: we step down, filter waits and gives up.
    cluster.patch("leases", "hami-scheduler", {"spec": {"holderIdentity": "other-host_77"}}, "hami-system")
    await it.eventually(lambda: not stack.process.leader.is_leader(), "stepping down")
    assert (await stack.filter(pod, ["gpu-a"]))["Error"] == "context cancelled"

    # Back to us: a registration pass at once, and filter answers again.
    cluster.patch("leases", "hami-scheduler", {"spec": {"holderIdentity": f"{me}_9f1e"}}, "hami-system")
    await it.eventually(lambda: stack.process.synced.is_set(), "the pass on regaining leadership")
    assert (await stack.filter(pod, ["gpu-a"]))["NodeNames"] == ["gpu-a"]


async def test_resource_quota_from_the_api_limits_webhook_and_filter(
    it: Any, cluster: MemoryCluster, launch: Any, plugin: BackgroundDevicePlugin
) -> None:
    """§5.8 end to end: a ResourceQuota seen through the informer caps namespace GPU memory at
    admission and at filter time, and raising it through the API lifts the cap."""
    cluster.create("nodes", gpu_node("gpu-a"))
    quota = gpu_quota(mem=4000, name="gpu", namespace="default")
    cluster.create("resourcequotas", quota, namespace="default")
    stack = await launch()
    first = gpu_pod("first", mem=3000)
    assert (await stack.post("/webhook", it.review(first)))["response"]["allowed"] is True
    first = cluster.create("pods", first, namespace="default")
    assert (await stack.filter(first, ["gpu-a"]))["NodeNames"] == ["gpu-a"]
    assert await stack.bind(first, "gpu-a") == ""

    second = gpu_pod("second", mem=3000)
    answer = await stack.post("/webhook", it.review(second))
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"] == {
        "metadata": {},
        "code": 403,
        "reason": "Forbidden",
        "message": "exceeding resource quota",
    }
    second = cluster.create("pods", second, namespace="default")  # created anyway (failurePolicy Ignore)
    result = await stack.filter(second, ["gpu-a"])
    assert result["FailedNodes"] == {"gpu-a": "2/2 ResourceQuotaNotFit"}

    metrics = await stack.metrics()
    used = {(labels["quota_name"], labels["limit"]): v for labels, v in metrics["hami_resource_quota_used"]}
    assert used[("nvidia.com/gpumem", "4000")] == 3000

    cluster.patch(
        "resourcequotas", "gpu", {"spec": {"hard": {"limits.nvidia.com/gpumem": "8000"}}}, "default"
    )

    async def allowed() -> bool:
        answer = await stack.post("/webhook", it.review(gpu_pod("third", mem=3000)))
        return bool(answer["response"]["allowed"])

    await it.eventually(allowed, "the raised quota")
    assert (await stack.filter(second, ["gpu-a"]))["NodeNames"] == ["gpu-a"]


async def test_init_and_sidecar_containers_through_the_device_plugin(
    it: Any, cluster: MemoryCluster, launch: Any, plugin: BackgroundDevicePlugin
) -> None:
    """§4.5 padding end to end: one entry per container, init first, so the plugin's per-container
    Allocate calls consume exactly what kubelet asks for, and the bind phase ends `success`."""
    cluster.create("nodes", gpu_node("gpu-a"))
    stack = await launch()

    def gpu(name: str, mem: int) -> dict[str, Any]:
        limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem), "nvidia.com/gpucores": "10"}
        return {"name": name, "image": "cuda", "resources": {"limits": limits}}

    pod = gpu_pod("multi")
    pod["spec"]["initContainers"] = [gpu("warmup", 3000)]
    pod["spec"]["containers"] = [{"name": "sidecar", "image": "envoy"}, gpu("app", 2000), gpu("aux", 1000)]
    pod = cluster.create("pods", pod, namespace="default")
    assert (await stack.filter(pod, ["gpu-a"]))["NodeNames"] == ["gpu-a"]
    assert await stack.bind(pod, "gpu-a") == ""
    annotations = cluster.get("pods", "multi", "default")["metadata"]["annotations"]
    entries = annotations[keys.VGPU_ALLOCATED].split(";")
    assert len(entries) == 4 + 1  # warmup, sidecar, app, aux; then the empty tail after the last ';'
    assert [e.count(",NVIDIA,") for e in entries] == [1, 0, 1, 1, 0]
    assert entries[0].endswith(",NVIDIA,3000,10:") and entries[2].endswith(",NVIDIA,2000,10:")

    await it.eventually(
        lambda: (
            cluster.get("pods", "multi", "default")["metadata"]["annotations"].get(keys.BIND_PHASE)
            == keys.BIND_PHASE_SUCCESS
        ),
        "the plugin's Allocate calls",
    )
    assert cluster.get("pods", "multi", "default")["metadata"]["annotations"][keys.VGPU_TO_ALLOCATE] == ";;;;"
    # Usage: the init container's peak and the app containers' sum are not added up (§5.2 collapse).
    await it.eventually(
        lambda: it.usage(stack.process) == it.rebuilt_usage(cluster, stack.process), "the ledgers to agree"
    )
    assert sum(u[1] for u in it.usage(stack.process)["gpu-a"]) <= 3000 + 2000 + 1000


async def test_node_label_selector_limits_registration(it: Any, cluster: MemoryCluster, launch: Any) -> None:
    """--node-label-selector: only matching nodes are registered; a node labelled later joins, one
    unlabelled leaves."""
    selected = gpu_node("gpu-a")
    selected["metadata"]["labels"]["gpu"] = "on"
    cluster.create("nodes", selected)
    cluster.create("nodes", gpu_node("gpu-b"))
    stack = await launch(node_label_selector={"gpu": "on"})
    assert set(it.usage(stack.process)) == {"gpu-a"}
    pod = cluster.create("pods", gpu_pod("p", mem=1000), namespace="default")
    result = await stack.filter(pod, ["gpu-b"])
    assert result["FailedNodes"] == {"gpu-b": "node unregistered"}
    cluster.patch("nodes", "gpu-b", {"metadata": {"labels": {"gpu": "on"}}})
    await it.eventually(lambda: "gpu-b" in it.usage(stack.process), "the newly selected node")
    assert (await stack.filter(pod, ["gpu-b"]))["NodeNames"] == ["gpu-b"]
    # Leaving the selection (the watch says DELETED) unregisters it.
    cluster.patch("nodes", "gpu-a", {"metadata": {"labels": {"gpu": None}}})
    await it.eventually(lambda: "gpu-a" not in it.usage(stack.process), "the unselected node to leave")


async def test_legacy_metrics_names(it: Any, cluster: MemoryCluster, launch: Any) -> None:
    cluster.create("nodes", gpu_node("gpu-a"))
    stack = await launch(legacy_metrics=True)
    metrics = await stack.metrics()
    assert "hami_gpu_memory_limit_bytes" in metrics and "hami_build_info" in metrics
    legacy = {labels["deviceuuid"]: v for labels, v in metrics["GPUDeviceMemoryLimit"]}
    assert legacy == {gpu_uuid("gpu-a", 0): 24 * 1024 * MIB, gpu_uuid("gpu-a", 1): 24 * 1024 * MIB}
