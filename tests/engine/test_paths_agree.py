"""Every path that decides gives one answer (issue 27): a differential property test.

A random pod (init and app containers, each asking up to two of NVIDIA, Hygon DCU, Metax GPU and
Mthreads; Metax GPU and Mthreads have rules over the pod's earlier containers) is decided on a
random small fleet, some of it already in use, through each path the engine has, forced:

* the first-fit walk (`decide` of a pod whose vendors do not score nodes), and the same walk in a
  namespace with a quota that never binds (its fits build the allocation list for the quota);
* the walk from a verdict snapshot: a twin of the pod takes its place, the pod's decision finds
  nothing (the snapshot), the twin leaves, and the decision starts from the snapshot;
* the every-node evaluation (`evaluate_all`), the reference;
* the bounded walk of the scoring vendors (`walk_bounded`, forced for any pod; no node here has
  a topology annotation, so every ScoreNode is 0 and the walk's answer is the reference's);
* the no-ledger path of template nodes (`decide_on_nodes`, when the fleet is not in use);
* explain (its verdict per node, and its per-device checks of the chosen node).

They must choose the same node, devices and annotations, or refuse with the same reasons.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from tests.builders import container, device, gpu_quota, node, pod
from vgpu_scheduler.configfile import default_device_config
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine import decide as decide_module
from vgpu_scheduler.engine.decide import Chosen, Decision, NoFit, NoRequest, decide, decide_on_nodes
from vgpu_scheduler.engine.explain import FITS, Explanation, explain_pod
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import encode_node_devices_json, encode_node_devices_legacy

VENDORS = build(default_device_config())
ASKED = ("NVIDIA", "DCU", "Metax-GPU", "Mthreads")
NS = "team"
NOW = 1700000000
ARGS: dict[str, Any] = {"default_node_policy": "binpack", "default_gpu_policy": "spread", "now": NOW}
GIB = 1024

Obj = dict[str, Any]

# --------------------------------------------------------------------------------------------
# Fleets: node objects, so the no-ledger path reads the same inventory as the ledger

plain_devices = st.lists(st.tuples(st.integers(1, 3), st.sampled_from([4, 8, 16])), max_size=3)
node_spec = st.fixed_dictionaries({
    "nvidia": plain_devices,  # (count, GiB) per device
    "dcu": plain_devices,
    "metax": st.integers(0, 3),  # count-1 GPUs
    "mthreads": st.integers(0, 2),  # GPUs of 16 cores and 48 GiB
}).map(lambda n: n if n["nvidia"] or n["dcu"] or n["metax"] or n["mthreads"] else {**n, "metax": 2})
fleet = st.lists(node_spec, min_size=1, max_size=4)


def node_object(name: str, spec: dict[str, Any]) -> Obj:
    annotations: dict[str, str] = {}
    capacity: dict[str, str] = {}
    if spec["nvidia"]:
        annotations[keys.NODE_NVIDIA_REGISTER] = encode_node_devices_json(
            device(f"{name}-nv-{i}", index=i, count=c, devmem=g * GIB, type="NVIDIA-A10")
            for i, (c, g) in enumerate(spec["nvidia"])
        )
    if spec["dcu"]:
        annotations["hami.io/node-dcu-register"] = encode_node_devices_legacy(
            device(f"{name}-dcu-{i}", index=i, count=c, devmem=g * GIB, type="DCU-Z100")
            for i, (c, g) in enumerate(spec["dcu"])
        )
    if spec["metax"]:
        capacity["metax-tech.com/gpu"] = str(spec["metax"])
    if spec["mthreads"]:
        capacity["mthreads.com/sgpu-core"] = str(16 * spec["mthreads"])
        capacity["mthreads.com/sgpu-memory"] = str(96 * spec["mthreads"])
    return node(name, annotations=annotations, capacity=capacity or None)


def nodes_of(specs: list[dict[str, Any]]) -> list[Obj]:
    return [node_object(f"n{i}", spec) for i, spec in enumerate(specs)]


# --------------------------------------------------------------------------------------------
# Pods

ask = st.fixed_dictionaries({
    "vendor": st.sampled_from(ASKED),
    "nums": st.sampled_from([1, 1, 2]),
    "gib": st.sampled_from([None, 1, 4, 8]),
    "cores": st.sampled_from([None, 0, 30, 100]),
})
asking = st.lists(ask, min_size=1, max_size=2, unique_by=lambda a: a["vendor"])
container_spec = st.one_of(asking, asking, asking, st.just([]))  # some containers ask nothing
pod_spec = st.fixed_dictionaries({
    "init": st.lists(container_spec, max_size=2),
    "app": st.lists(container_spec, min_size=1, max_size=3),
    "node_policy": st.sampled_from(["binpack", "spread"]),
    "gpu_policy": st.sampled_from(["spread", "binpack"]),
})
busy_spec = st.lists(pod_spec, max_size=2)


def limits_of(asks: list[dict[str, Any]]) -> dict[str, Any]:
    limits: dict[str, Any] = {}
    for a in asks:
        names = VENDORS[a["vendor"]].names
        limits[names.count] = str(a["nums"])
        if a["gib"] is not None and names.memory:
            # Mthreads counts memory in units of 512 MiB, the others in MiB.
            limits[names.memory] = str(a["gib"] * (2 if a["vendor"] == "Mthreads" else GIB))
        if a["cores"] is not None and names.cores:
            limits[names.cores] = str(a["cores"] * 16 // 100 if a["vendor"] == "Mthreads" else a["cores"])
    return limits


def pod_object(name: str, spec: dict[str, Any]) -> Obj:
    return pod(
        name, namespace=NS, uid=f"uid-{name}", phase="Pending",
        annotations={keys.NODE_SCHEDULER_POLICY: spec["node_policy"],
                     keys.GPU_SCHEDULER_POLICY: spec["gpu_policy"]},
        init_containers=[container(f"i{i}", limits=limits_of(a)) for i, a in enumerate(spec["init"])] or None,
        containers=[container(f"c{i}", limits=limits_of(a)) for i, a in enumerate(spec["app"])],
    )


# --------------------------------------------------------------------------------------------
# The paths


def state_of(nodes: list[Obj], busy: list[dict[str, Any]], *, quota: bool = False) -> SchedulerState:
    """The fleet registered, then the busy pods placed by the default decision (the same usage
    for every path)."""
    state = SchedulerState(VENDORS)
    for obj in nodes:
        view = decide_module.node_view_from_object(obj, VENDORS)
        assert view is not None
        state.set_node_devices(view.name, view.devices, annotations=view.annotations)
    if quota:  # limits no pod here reaches: only the fit's quota steps run
        state.on_quota(gpu_quota(mem=10**9, cores=10**9, namespace=NS))
    for i, spec in enumerate(busy):
        busy_pod = pod_object(f"busy{i}", spec)
        d = decide(busy_pod, names_of(nodes), state, **ARGS)
        if isinstance(d, Chosen):
            state.reserve(busy_pod, d)
    return state


def names_of(nodes: list[Obj]) -> list[str]:
    return [n["metadata"]["name"] for n in nodes]


@contextmanager
def scoring(forced: bool) -> Iterator[None]:
    """Send the decision down the bounded walk (True) or the first-fit walk (False), whatever the
    vendors asked."""
    forced_keys = ["forced"] if forced else []
    with mock.patch.object(decide_module, "_scoring_vendors", lambda requests, vendors: forced_keys):
        yield


def walk(p: Obj, state: SchedulerState, names: list[str], **more: Any) -> Decision:
    with scoring(False):
        return decide(p, names, state, **ARGS, **more)


def from_snapshot(spec: dict[str, Any], nodes: list[Obj], busy: list[dict[str, Any]]) -> Decision:
    """The walk from the pod's verdict snapshot, taken while a twin of the pod held its place."""
    state, names = state_of(nodes, busy), names_of(nodes)
    p, twin = pod_object("p", spec), pod_object("twin", spec)
    placed = walk(twin, state, names)
    if isinstance(placed, Chosen):
        state.reserve(twin, placed)
    walk(p, state, names)
    state.release("uid-twin")
    return walk(p, state, names, walk_failed=False)


def answers(spec: dict[str, Any], nodes: list[Obj], busy: list[dict[str, Any]]) -> dict[str, Decision]:
    p, names = pod_object("p", spec), names_of(nodes)
    out: dict[str, Decision] = {
        "walk": walk(p, state_of(nodes, busy), names),
        "walk, quota": walk(p, state_of(nodes, busy, quota=True), names),
        "snapshot": from_snapshot(spec, nodes, busy),
        "every node": decide(p, names, state_of(nodes, busy), evaluate_all=True, **ARGS),
    }
    with scoring(True):
        out["bounded"] = decide(p, names, state_of(nodes, busy), **ARGS)
    if not busy:
        out["no ledger"] = decide_on_nodes(p, nodes, VENDORS, **ARGS)
    return out


# --------------------------------------------------------------------------------------------
# The property


def assert_same(reference: Decision, got: Decision, path: str) -> None:
    assert type(got) is type(reference), (path, got, reference)
    if isinstance(reference, NoFit):
        assert isinstance(got, NoFit)
        assert dict(got.failed) == dict(reference.failed), path
    elif isinstance(reference, Chosen):
        assert isinstance(got, Chosen)
        assert (got.node, got.devices, got.mig, got.annotations) == (
            reference.node, reference.devices, reference.mig, reference.annotations), path
        # A walk lists only the nodes it passed: each with the reference's reason.
        assert {n: reference.failed[n] for n in got.failed} == got.failed, path


def assert_explained(exp: Explanation, reference: Decision, p: Obj) -> None:
    chosen = reference if isinstance(reference, Chosen) else None
    assert exp.node == (chosen.node if chosen else None)
    failed = reference.failed if isinstance(reference, (Chosen, NoFit)) else {}
    for report in exp.nodes:
        assert report.reason == failed.get(report.node, ""), report.node
        assert report.fits == (chosen is not None and report.node in chosen.scores), report.node
    if chosen is None:
        return
    # Each device a container got passes that container's own check (on the node before the pod,
    # with the earlier containers as the decision fitted them).
    names = [c["name"] for c in p["spec"].get("initContainers", []) + p["spec"]["containers"]]
    checks = {(d.uuid, c.container): c.verdict
              for r in exp.nodes if r.node == chosen.node for d in r.devices for c in d.checks}
    for per_container in chosen.devices.values():
        for i, entries in enumerate(per_container):
            for entry in entries:
                assert checks[(entry.uuid, names[i])] == FITS, (entry.uuid, names[i])


TWO_METAX = {"nvidia": [], "dcu": [], "metax": 2, "mthreads": 0}
ONE_METAX = [{"vendor": "Metax-GPU", "nums": 1, "gib": None, "cores": None}]


@settings(max_examples=150, deadline=None)
@given(specs=fleet, spec=pod_spec, busy=busy_spec)
@example(  # issue 27: two containers of one Metax GPU each on two count-1 GPUs
    specs=[TWO_METAX], spec={"init": [], "app": [ONE_METAX, ONE_METAX], "node_policy": "binpack",
                             "gpu_policy": "spread"}, busy=[],
)
def test_every_path_gives_one_answer(specs: list[dict[str, Any]], spec: dict[str, Any],
                                     busy: list[dict[str, Any]]) -> None:
    nodes = nodes_of(specs)
    got = answers(spec, nodes, busy)
    reference = got.pop("every node")
    event(f"reference: {type(reference).__name__}")
    asking = [c for c in spec["init"] + spec["app"] if c]
    event(f"containers asking: {min(len(asking), 3)}")
    if isinstance(reference, NoRequest):
        assert all(isinstance(d, NoRequest) for d in got.values())
        return
    for path, decision in got.items():
        assert_same(reference, decision, path)
    p = pod_object("p", spec)
    exp = explain_pod(p, names_of(nodes), state_of(nodes, busy), **ARGS)
    assert_explained(exp, reference, p)


# --------------------------------------------------------------------------------------------
# Structure: one way to call a vendor's fit


SRC = Path(__file__).resolve().parents[2] / "src" / "vgpu_scheduler"


def _fit_calls(path: Path) -> Iterator[int]:
    tree = ast.parse(path.read_text(), str(path))
    for call in ast.walk(tree):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "fit":
            yield call.lineno


def test_only_the_fit_module_calls_a_vendor_fit() -> None:
    """`engine/fit.py` hands every vendor fit the pod's earlier containers (`SoFar`); a call from
    elsewhere could leave them out (as explain's did, issue 27). Vendors may call their own."""
    callers: dict[str, list[int]] = {}
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative.startswith("devices/"):
            continue
        lines = list(_fit_calls(path))
        if lines:
            callers[relative] = lines
    assert list(callers) == ["engine/fit.py"], callers
    assert len(callers["engine/fit.py"]) == 2  # _fit_container and check_device
