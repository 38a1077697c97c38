"""The simulated scheduling loop over the real scheduler process, in simulated time."""

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests import builders
from vgpu_scheduler.configfile import default_device_config
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.decide import Chosen, decide
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.server.app import make_app
from vgpu_scheduler.simulate import settle as settle_module
from vgpu_scheduler.simulate.extenderio import HttpExtender
from vgpu_scheduler.simulate.loop import Simulation, simulate
from vgpu_scheduler.simulate.options import ARRIVAL_ANNOTATION, SimulationOptions
from vgpu_scheduler.simulate.providers import CLUSTER_AUTOSCALER_PROVIDER, DEFAULT_PROVIDER
from vgpu_scheduler.simulate.report import dumps_report
from vgpu_scheduler.simulate.workload import demo_workload
from vgpu_scheduler.standin.embedded.fleet import V100_32GB, demo_fleet, fleet
from vgpu_scheduler.standin.embedded.runtime import DURATION_ANNOTATION
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import decode_node_devices

CFG = default_device_config()


def pod(
    name: str,
    *,
    gpus: int = 0,
    mem: int | None = None,
    cores: int | None = None,
    cpu: str = "1",
    memory: str = "1Gi",
    duration: float | None = None,
    annotations: dict[str, str] | None = None,
    tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    if mem is not None:
        limits["nvidia.com/gpumem"] = mem
    if cores is not None:
        limits["nvidia.com/gpucores"] = cores
    annotations = dict(annotations or {})
    if duration is not None:
        annotations[DURATION_ANNOTATION] = str(duration)
    return builders.pod(name, typed=True, annotations=annotations,
                        containers=[builders.container("c", image="x", limits=limits)],
                        spec={"tolerations": tolerations} if tolerations else None)


def by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in report["pods"]}


async def test_decisions_match_the_engine_called_directly() -> None:
    nodes = fleet(4, 2)
    pods = [pod(f"p{i}", gpus=1 + i % 2, mem=4096 * (1 + i % 3), cores=10 * (1 + i % 4)) for i in range(12)]
    result = await simulate(nodes, pods)
    # Reference: the engine alone, one decision after the other, on a state built from the inventory.
    state = SchedulerState(build(CFG))
    for n in nodes:
        inventory = n["metadata"]["annotations"][keys.NODE_NVIDIA_REGISTER]
        state.set_node_devices(n["metadata"]["name"], decode_node_devices(inventory))
    names = sorted(n["metadata"]["name"] for n in nodes)
    got = by_name(result.report)
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"uid-{i}"
        d = decide(
            p, names, state, default_node_policy="binpack", default_gpu_policy="spread", now=0
        )
        assert isinstance(d, Chosen)
        state.reserve(p, d)
        entry = got[p["metadata"]["name"]]
        assert entry["node"] == d.node
        assert entry["annotations"][keys.VGPU_ALLOCATED] == d.annotations[keys.VGPU_ALLOCATED]
        assert entry["annotations"][keys.BIND_PHASE] == keys.BIND_PHASE_SUCCESS
        assert entry["annotations"][keys.VGPU_TO_ALLOCATE].strip(";") == ""
    # Input order is kept in the report.
    assert [p["name"] for p in result.report["pods"]] == [p["metadata"]["name"] for p in pods]


async def test_backoff_and_retry_when_a_pod_finishes_in_simulated_time() -> None:
    nodes = fleet(1, 1)
    first = pod("first", gpus=1, cores=100, duration=300)
    second = pod("second", gpus=1, cores=100, duration=60)
    result = await simulate(nodes, [first, second])
    got = by_name(result.report)
    assert got["first"]["node"] == got["second"]["node"] == "gpu-node-00"
    assert got["second"]["reasons"] == {}
    # second waited for first: bound at t=300 (bind-time is the simulated Unix time), done at 360.
    bind_times = {n: int(got[n]["annotations"][keys.BIND_TIME]) for n in got}
    assert bind_times["second"] - bind_times["first"] == 300
    assert result.report["summary"]["makespan_seconds"] == 360.0
    assert result.cycles == 3  # first, second (unschedulable), second again after the finish event
    times = [(p["time"], p["running"]) for p in result.report["timeline"]]
    assert times == [(0.0, 1), (300.0, 1), (360.0, 0)]


async def test_pending_pod_reports_the_extender_reasons() -> None:
    result = await simulate(fleet(2, 1), [pod("huge", gpus=1, mem=10**6)])
    entry = result.report["pods"][0]
    assert entry["node"] is None
    assert set(entry["reasons"]) == {"gpu-node-00", "gpu-node-01"}
    assert all(entry["reasons"].values())
    assert result.report["summary"]["pods"] == {"total": 1, "scheduled": 0, "pending": 1, "pending_error": 0}


async def test_tainted_node_is_excluded_by_the_predicates() -> None:
    nodes = fleet(2, 1)
    nodes[0]["spec"]["taints"] = [{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]
    nodes[1]["spec"]["unschedulable"] = True
    tolerating = pod(
        "tolerating", gpus=1, mem=1024, tolerations=[{"key": "dedicated", "operator": "Exists"}]
    )
    result = await simulate(nodes, [pod("plain", gpus=1, mem=1024), tolerating])
    got = by_name(result.report)
    assert got["plain"]["node"] is None
    assert got["plain"]["reasons"] == {
        "gpu-node-00": "node(s) had untolerated taint {dedicated: infer}",
        "gpu-node-01": "node(s) were unschedulable",
    }
    assert got["tolerating"]["node"] == "gpu-node-00"


async def test_providers_change_the_choice_for_gpu_free_pods() -> None:
    # Same-size nodes and pods using cpu and memory in the same proportion, so that
    # BalancedResourceAllocation is flat and only Least/MostRequested decide.
    pods = [pod("a", cpu="8", memory="64Gi"), pod("b", cpu="8", memory="64Gi")]

    async def run(provider: str) -> dict[str, dict[str, Any]]:
        nodes = fleet(3, 1, models=(V100_32GB,))
        return by_name((await simulate(nodes, pods, options=SimulationOptions(provider=provider))).report)

    spread = await run(DEFAULT_PROVIDER)
    packed = await run(CLUSTER_AUTOSCALER_PROVIDER)
    assert spread["a"]["node"] != spread["b"]["node"]  # LeastRequested spreads
    assert packed["a"]["node"] == packed["b"]["node"]  # MostRequested packs
    assert keys.VGPU_NODE not in spread["a"]["annotations"]  # GPU-free: the extender only echoes


async def test_node_added_later_is_a_cluster_event() -> None:
    extra = fleet(2, 1)[1]
    extra["metadata"]["annotations"][ARRIVAL_ANNOTATION] = "50"
    sim = Simulation(
        fleet(2, 1)[:1], [pod("a", gpus=1, cores=100), pod("b", gpus=1, cores=100)], added_nodes=[extra]
    )
    try:
        result = await sim.run()
    finally:
        await sim.close()
    got = by_name(result.report)
    assert got["a"]["node"] == "gpu-node-00"
    assert got["b"]["node"] == "gpu-node-01"
    assert int(got["b"]["annotations"][keys.BIND_TIME]) - int(got["a"]["annotations"][keys.BIND_TIME]) == 50


async def test_same_inputs_give_byte_identical_reports() -> None:
    runs = [dumps_report((await simulate(demo_fleet(), demo_workload(40, 7))).report) for _ in range(2)]
    assert runs[0] == runs[1]
    assert '"node": "gpu-node-' in runs[0]


async def test_informers_waited_for_in_wall_time_give_the_same_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    want = dumps_report((await simulate(demo_fleet(), demo_workload(40, 7))).report)
    # No event-loop spins: every settle waits in wall time (a reflector between two watches).
    monkeypatch.setattr(settle_module, "SETTLE_SPINS", 0)
    assert dumps_report((await simulate(demo_fleet(), demo_workload(40, 7))).report) == want


async def test_an_informer_that_never_catches_up_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    sim = Simulation(demo_fleet(), demo_workload(3, 1))
    await sim.start()
    try:
        monkeypatch.setattr(settle_module, "SETTLE_SPINS", 0)
        monkeypatch.setattr(settle_module, "SETTLE_WAIT_SECONDS", 0.05)
        monkeypatch.setattr(settle_module, "_rv", lambda _value: 0)  # informers frozen behind every write
        sim._settler.settled_at = -1
        with pytest.raises(RuntimeError, match="did not catch up"):
            await sim.settle()
    finally:
        await sim.close()


async def _noop_webhook(_request: web.Request) -> web.StreamResponse:
    return web.Response(status=500)


async def test_simulate_and_the_http_server_make_the_same_decisions() -> None:
    nodes = fleet(3, 2)
    pods = [pod(f"p{i}", gpus=1, mem=2048 * (i + 1), cores=20) for i in range(5)] + [pod("cpu", cpu="2")]
    in_process = (await simulate(nodes, pods)).report

    sim = Simulation(nodes, pods)
    await sim.start()
    server = TestServer(make_app(sim.process.extender, _noop_webhook))
    await server.start_server()
    remote = HttpExtender(str(server.make_url("")))
    sim.endpoint = remote
    try:
        over_http = (await sim.run()).report
    finally:
        await remote.close()
        await server.close()
        await sim.close()
    # Every filter of a GPU pod really went through the server; the GPU-free pod never reaches it.
    assert sim.process.extender.stats.filters == 5
    for a, b in zip(in_process["pods"], over_http["pods"], strict=True):
        assert (a["name"], a["node"], a["annotations"]) == (b["name"], b["node"], b["annotations"])
    assert dumps_report(in_process) == dumps_report(over_http)


async def test_settle_asks_for_bookmarks_only_when_an_informer_cannot_see_the_last_write() -> None:
    sim = Simulation(demo_fleet(), demo_workload(20, 3))
    await sim.start()
    try:
        bookmarks = [r.stats.bookmarks for r in sim.process.reflectors]
        await sim.run()
        # Each informer followed its own resource's writes: no bookmark was needed.
        assert [r.stats.bookmarks for r in sim.process.reflectors] == bookmarks
        # An informer that must reach a version its watch never delivers (as a filtered watch
        # would) is moved there by a bookmark.
        sim.cluster.create("pods", pod("late", cpu="1"))
        target = sim.cluster.resource_version
        sim.cluster.last_write = lambda _resource: target  # type: ignore[method-assign]
        await sim.settle()
        assert all(int(r.resource_version) >= target for r in sim.process.reflectors)
        assert sim.process.quotas.stats.bookmarks > bookmarks[2]
    finally:
        await sim.close()


def test_run_to_result_hands_back_the_result_and_the_error() -> None:
    from vgpu_scheduler.simulate.loop import run_to_result

    async def answer() -> dict[str, int]:
        return {"pods": 3}

    async def fail() -> None:
        raise ValueError("no fleet")

    assert run_to_result(answer()) == {"pods": 3}
    with pytest.raises(ValueError, match="no fleet"):
        run_to_result(fail())
