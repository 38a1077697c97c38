"""SchedulerState: pods, reservations and quotas fed as plain watch objects."""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

from tests.builders import (
    assigned_annotations,
    container,
    device,
    gpu_quota,
    grant,
    init_statuses,
    pod,
    pod_devices,
)
from vgpu_scheduler.devices.nvidia import NvidiaVendor
from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, filter_annotations
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import NVIDIA, PodDevices
from vgpu_scheduler.wire import keys

MEM = "nvidia.com/gpumem"
VENDORS = build()


gpu = partial(device, devmem=8000)


def make_pod(name: str, annotations: dict[str, str] | None = None, phase: str = "Pending",
             n_init: int = 0, init_exit: list[int] | None = None) -> dict[str, Any]:
    inits = [container(f"init{i}") for i in range(n_init)]  # named as init_statuses names them
    statuses = None if init_exit is None else {"initContainerStatuses": init_statuses(*init_exit)}
    return pod(name, namespace="team", uid=f"uid-{name}", annotations=dict(annotations or {}),
               containers=[container("app")], init_containers=inits, phase=phase, status=statuses)


def scheduled(name: str, node: str, allocated: str, **kw: Any) -> dict[str, Any]:
    return make_pod(name, assigned_annotations(node, allocated, time="100"), **kw)


def state() -> SchedulerState:
    s = SchedulerState(VENDORS)
    s.set_node_devices("n1", [gpu("GPU-0"), gpu("GPU-1")])
    return s


def usage(s: SchedulerState, node: str = "n1") -> list[tuple[int, int, int]]:
    view = s.ledger.view(node)
    assert view is not None
    return [(u.used, u.usedmem, u.usedcores) for u in view.usage]


def chosen(node: str, devices: PodDevices, now: int = 200) -> Chosen:
    annotations = filter_annotations(node, devices, (), now, vendors=VENDORS)
    return Chosen(node, devices, (), annotations, {keys.VGPU_NODE: node}, 0.0)


def one_gpu(uuid: str, mem: int, cores: int = 0) -> PodDevices:
    return pod_devices([grant(uuid, usedmem=mem, usedcores=cores)])


def test_pod_lifecycle_add_update_terminal_delete() -> None:
    s = state()
    pod = scheduled("a", "n1", "GPU-0,NVIDIA,1000,10:;", phase="Running")
    s.on_pod(pod)
    assert usage(s) == [(1, 1000, 10), (0, 0, 0)]
    assert s.quota.used("team", MEM) == 1000
    s.on_pod(pod)  # a resync of the same object changes nothing
    assert usage(s) == [(1, 1000, 10), (0, 0, 0)]
    s.on_pod(scheduled("a", "n1", "GPU-1,NVIDIA,500,0:;", phase="Running"))
    assert usage(s) == [(0, 0, 0), (1, 500, 0)]
    terminating = scheduled("a", "n1", "GPU-1,NVIDIA,500,0:;", phase="Running")
    terminating["metadata"]["deletionTimestamp"] = "2026-11-29T00:00:00Z"
    s.on_pod(terminating)
    assert usage(s) == [(0, 0, 0), (1, 500, 0)]  # terminating pods keep their usage
    s.on_pod(scheduled("a", "n1", "GPU-1,NVIDIA,500,0:;", phase="Succeeded"))
    assert usage(s) == [(0, 0, 0), (0, 0, 0)]
    assert s.quota.used("team", MEM) == 0
    s.on_pod(pod)
    s.on_pod_deleted(pod)
    assert usage(s) == [(0, 0, 0), (0, 0, 0)]
    assert list(s.pods()) == []


def test_decode_error_affects_only_that_pod() -> None:
    s = state()
    s.on_pod(scheduled("good", "n1", "GPU-0,NVIDIA,1000,0:;"))
    s.on_pod(scheduled("bad", "n1", "GPU-0,NVIDIA,1000:;"))  # missing field
    assert usage(s) == [(1, 1000, 0), (0, 0, 0)]
    # A counted pod whose annotation turns unreadable stops counting; the other pod is untouched.
    s.on_pod(scheduled("was-good", "n1", "GPU-1,NVIDIA,700,0:;"))
    s.on_pod(scheduled("was-good", "n1", "GPU-1,NVIDIA,x,0:;"))
    assert usage(s) == [(1, 1000, 0), (0, 0, 0)]
    assert s.quota.used("team", MEM) == 1000


def test_pods_without_uid_or_annotation_are_ignored() -> None:
    s = state()
    anonymous = scheduled("x", "n1", "GPU-0,NVIDIA,1000,0:;")
    del anonymous["metadata"]["uid"]
    s.on_pod(anonymous)
    s.on_pod(make_pod("plain"))
    assert usage(s) == [(0, 0, 0), (0, 0, 0)]


def test_init_shrink_sticks_across_updates() -> None:
    s = state()
    allocated = "GPU-0,NVIDIA,6000,50:;GPU-0,NVIDIA,1000,10:;"
    s.on_pod(scheduled("p", "n1", allocated, n_init=1))
    assert usage(s)[0] == (1, 6000, 50)
    s.on_pod(scheduled("p", "n1", allocated, n_init=1, init_exit=[0], phase="Running"))
    assert usage(s)[0] == (1, 1000, 10)
    s.on_pod(scheduled("p", "n1", allocated, n_init=1, phase="Running"))  # statuses gone: stays shrunk
    assert usage(s)[0] == (1, 1000, 10)
    assert s.quota.used("team", MEM) == 1000


def test_reservation_is_counted_then_confirmed_once() -> None:
    s = state()
    pod = make_pod("p")
    decision = chosen("n1", one_gpu("GPU-1", 2000, 20))
    s.reserve(pod, decision)
    assert s.is_reserved("uid-p")
    assert usage(s) == [(0, 0, 0), (1, 2000, 20)]
    assert s.quota.used("team", MEM) == 2000
    s.on_pod(pod)  # an update before our patch landed keeps the reservation
    assert usage(s) == [(0, 0, 0), (1, 2000, 20)]
    patched = copy.deepcopy(pod)
    patched["metadata"]["annotations"].update(decision.annotations)
    s.on_pod(patched)
    assert not s.is_reserved("uid-p")
    assert usage(s) == [(0, 0, 0), (1, 2000, 20)]
    assert s.quota.used("team", MEM) == 2000


def test_older_annotations_do_not_override_a_reservation() -> None:
    s = state()
    old = scheduled("p", "n1", "GPU-0,NVIDIA,1000,0:;")  # vgpu-time 100
    s.on_pod(old)
    s.forget("uid-p")  # filtered again
    s.reserve(old, chosen("n1", one_gpu("GPU-1", 3000), now=200))
    s.on_pod(old)  # stale event from before the new patch
    assert usage(s) == [(0, 0, 0), (1, 3000, 0)]
    newer = scheduled("p", "n1", "GPU-0,NVIDIA,500,0:;")
    newer["metadata"]["annotations"][keys.VGPU_TIME] = "300"  # written after us (another replica)
    s.on_pod(newer)
    assert usage(s) == [(1, 500, 0), (0, 0, 0)]


def test_release_and_delete_drop_reservations() -> None:
    s = state()
    pod = make_pod("p")
    s.reserve(pod, chosen("n1", one_gpu("GPU-0", 1000)))
    s.release("uid-p")
    assert usage(s) == [(0, 0, 0), (0, 0, 0)] and not s.is_reserved("uid-p")
    s.reserve(pod, chosen("n1", one_gpu("GPU-0", 1000)))
    s.on_pod_deleted(pod)
    assert usage(s) == [(0, 0, 0), (0, 0, 0)] and not s.is_reserved("uid-p")
    assert s.quota.used("team", MEM) == 0


def test_reserving_again_replaces_the_reservation() -> None:
    s = state()
    pod = make_pod("p")
    s.reserve(pod, chosen("n1", one_gpu("GPU-0", 1000)))
    s.reserve(pod, chosen("n1", one_gpu("GPU-1", 1000)))
    assert usage(s) == [(0, 0, 0), (1, 1000, 0)]
    assert s.quota.used("team", MEM) == 1000


def test_quota_objects() -> None:
    s = state()
    q = gpu_quota(mem=1500)
    s.on_quota(q)
    s.on_pod(scheduled("a", "n1", "GPU-0,NVIDIA,1000,0:;"))
    assert not s.quota.fits("team", NVIDIA, 501, 0)
    s.on_quota_deleted(q)
    assert s.quota.fits("team", NVIDIA, 501, 0)


def test_pods_on_a_node_that_registers_later() -> None:
    s = state()
    s.on_pod(scheduled("a", "n2", "GPU-9,NVIDIA,1000,0:;"))
    s.set_node_devices("n2", [gpu("GPU-9")])
    assert usage(s, "n2") == [(1, 1000, 0)]
    s.remove_node("n2")
    assert s.ledger.view("n2") is None


def test_ledger_keeps_only_the_pod_annotations_a_vendor_reads() -> None:
    app_class = "metax-tech.com/sgpu-app-class"
    assert VENDORS.counted_pod_keys == {app_class}  # Metax sGPU's app-class rules
    s = state()
    annotations = assigned_annotations("n1", "GPU-0,NVIDIA,1000,0:;", note="x", **{app_class: "online"})
    classed = make_pod("a", annotations)
    plain = make_pod("b", assigned_annotations("n1", "GPU-0,NVIDIA,1000,0:;", note="y"))
    s.on_pod(classed)
    s.on_pod(plain)
    view = s.ledger.view("n1")
    assert view is not None
    assert list(view.usage[0].pod_infos) == [{app_class: "online"}, {}]
    s.on_pod_deleted(classed)
    assert list(view.usage[0].pod_infos) == [{}]
    only_nvidia = SchedulerState(Vendors([NvidiaVendor()]))
    only_nvidia.set_node_devices("n1", [gpu("GPU-0")])
    only_nvidia.on_pod(classed)
    only_view = only_nvidia.ledger.view("n1")
    assert only_view is not None and list(only_view.usage[0].pod_infos) == [{}]


def test_updates_with_the_same_allocation_inputs_reuse_the_decoded_allocation(monkeypatch: Any) -> None:
    from vgpu_scheduler.engine import state as state_module

    decoded: list[str] = []
    decode = state_module.allocation_from_annotations

    def counting(pod: dict[str, Any], *args: Any, **kw: Any) -> Any:
        decoded.append(pod["metadata"]["name"])
        return decode(pod, *args, **kw)

    monkeypatch.setattr(state_module, "allocation_from_annotations", counting)
    s = state()
    s.on_pod(scheduled("p", "n1", "GPU-0,NVIDIA,1000,10:;"))
    bound = scheduled("p", "n1", "GPU-0,NVIDIA,1000,10:;", phase="Running")
    bound["metadata"]["annotations"][keys.BIND_PHASE] = "success"
    s.on_pod(bound)  # phase and bind phase only: nothing the allocation is read from
    assert decoded == ["p"]
    s.on_pod(scheduled("p", "n1", "GPU-1,NVIDIA,1000,10:;", phase="Running"))
    assert decoded == ["p", "p"]
    assert usage(s) == [(0, 0, 0), (1, 1000, 10)]
    # Bounded: only the most recently decoded pods are kept.
    monkeypatch.setattr(state_module, "DECODED_KEPT", 2)
    for name in ("q", "r", "t"):
        s.on_pod(scheduled(name, "n1", "GPU-0,NVIDIA,100,0:;"))
    assert sorted(s._decoded) == ["uid-r", "uid-t"]
    s.on_pod(scheduled("t", "n1", "GPU-0,NVIDIA,100,0:;", phase="Succeeded"))
    assert sorted(s._decoded) == ["uid-r"]


def test_counted_pods_share_their_node_namespace_and_device_strings() -> None:
    # Each decoded pod object brings its own copies of these strings; 400,000 counted pods would
    # keep them all. Built by joining pieces so no two start out as one object.
    s = state()
    for name in ("a", "b"):
        pod = scheduled(name, "".join(["n", "1"]), "".join(["GPU-0", ",NVIDIA,100,0:;"]))
        pod["metadata"]["namespace"] = "".join(["te", "am"])
        s.on_pod(pod)
    a, b = sorted(s.pods(), key=lambda alloc: alloc.name)
    (dev_a,), (dev_b,) = a.devices[NVIDIA][0], b.devices[NVIDIA][0]
    assert a.node is b.node and a.namespace is b.namespace
    assert dev_a.uuid is dev_b.uuid and dev_a.type is dev_b.type
