"""The registration loop against the in-memory API server: inventories, handshake, cleanup, wake-ups."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.builders import assigned_annotations, container, node, pod
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.reflector import Reflector
from vgpu_scheduler.cluster.registration import NodeAnnotationWriter, RegistrationLoop, stamp_keys
from vgpu_scheduler.cluster.store import Store
from vgpu_scheduler.devices.handshake import allocatable_count, format_requesting
from vgpu_scheduler.devices.nvidia import NvidiaVendor
from vgpu_scheduler.devices.nvidia.health import NodeCounters
from vgpu_scheduler.devices.protocol import Vendors
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.model import NVIDIA
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire import keys
from vgpu_scheduler.wire.inventory import InventoryError, decode_nvidia_inventory

Obj = dict[str, Any]

T0 = datetime(2026, 11, 29, 21, 3, 30, tzinfo=UTC)
INV_2 = (
    '[{"id":"GPU-0","count":10,"devmem":8192,"devcore":100,"type":"NVIDIA-A100","numa":0,'
    '"health":true,"index":0,"mode":"hami-core"},'
    '{"id":"GPU-1","count":10,"devmem":8192,"devcore":100,"type":"NVIDIA-A100","numa":1,'
    '"health":true,"index":1,"mode":"hami-core"}]'
)
INV_1 = '[{"id":"GPU-9","count":4,"devmem":16000,"devcore":100,"type":"NVIDIA-T4","health":true}]'
LEGACY = (
    "GPU-ebe7,10,7680,100,NVIDIA-Tesla P4,0,true,0,hami-core:GPU-aaaa,10,7680,100,NVIDIA-Tesla P4,0,true:"
)
SCORES = '[{"uuid":"GPU-0","score":{"GPU-1":50}},{"uuid":"GPU-1","score":{"GPU-0":50}}]'


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


def make_node(name: str, annotations: dict[str, str] | None = None, gpus: str | None = "2") -> Obj:
    """A node with `gpus` allocatable nvidia.com/gpu (None: no status)."""
    allocatable = None if gpus is None else {"cpu": "16", "nvidia.com/gpu": gpus}
    return node(name, typed=True, annotations=annotations or None, allocatable=allocatable)


@dataclass
class Env:
    cluster: MemoryCluster
    client: KubeClient
    store: Store
    state: SchedulerState
    clock: Clock
    loop: RegistrationLoop
    deleted: list[str] = field(default_factory=list)

    def add(self, node: Obj) -> None:
        """Create the node in the API and put the stored version in the informer Store."""
        self.store.upsert(self.cluster.create("nodes", node))

    def patch(
        self, name: str, annotations: dict[str, str | None] | None = None, gpus: str | None = None
    ) -> None:
        if annotations is not None:
            self.cluster.patch("nodes", name, {"metadata": {"annotations": annotations}})
        if gpus is not None:
            self.cluster.patch(
                "nodes", name, {"status": {"allocatable": {"nvidia.com/gpu": gpus}}}, subresource="status"
            )
        self.sync()

    def sync(self) -> None:
        """Informer catches up with the API (what the node watch would deliver)."""
        for obj in self.cluster.objects("nodes"):
            self.store.upsert(obj)

    def annotation(self, name: str, key: str = keys.NODE_HANDSHAKE) -> str | None:
        value: str | None = (self.cluster.get("nodes", name)["metadata"].get("annotations") or {}).get(key)
        return value

    def devices(self, name: str) -> list[str] | None:
        view = self.state.ledger.view(name)
        return None if view is None else [d.id for d in view.devices]

    async def run(self) -> None:
        await self.loop.run_pass()
        await self.loop.flush_writes()
        self.sync()


def nvidia(env: Env) -> NvidiaVendor:
    """The registered NVIDIA vendor (it keeps the health counters)."""
    vendor = env.state.vendors[NVIDIA]
    assert isinstance(vendor, NvidiaVendor)
    return vendor


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    cluster = MemoryCluster(seed=1)
    client = KubeClient(MemoryTransport(cluster))
    store = Store()
    state = SchedulerState(Vendors([NvidiaVendor()]))  # NVIDIA's registration; DCU's: tests/devices
    clock = Clock()
    deleted: list[str] = []
    loop = RegistrationLoop(client, state, store, now=clock, tz=UTC, on_node_deleted=deleted.append)
    e = Env(cluster, client, store, state, clock, loop, deleted)
    yield e
    await loop.stop()
    await client.close()


# ------------------------------------------------------------------ node reading


@pytest.mark.parametrize(
    ("allocatable", "expected"),
    [
        pytest.param({"nvidia.com/gpu": "4"}, 4, id="4"),
        pytest.param({"nvidia.com/gpu": "2k"}, 2000, id="2k"),
        pytest.param({"nvidia.com/gpu": "0"}, 0, id="0"),
        pytest.param({"nvidia.com/gpu": "500m"}, 0, id="500m rounds down"),
        pytest.param({"nvidia.com/gpu": "junk"}, 0, id="junk"),
        pytest.param({}, 0, id="absent"),
        pytest.param(None, 0, id="no allocatable"),
        pytest.param({"nvidia.com/gpu": 3}, 3, id="JSON number"),
        pytest.param({"nvidia.com/gpu": None}, 0, id="null"),
    ],
)
def test_allocatable_count(allocatable: Any, expected: int) -> None:
    node: Obj = {"metadata": {"name": "n"}, "status": {"allocatable": allocatable}}
    assert allocatable_count(node, "nvidia.com/gpu") == expected


def test_decode_inventory_errors() -> None:
    with pytest.raises(InventoryError, match=r"annos not found hami\.io/node-nvidia-register"):
        decode_nvidia_inventory(None, None)
    # Zero devices is an error for NVIDIA in either dialect (HAMi's GetNodeDevices checks the
    # decoded list, whatever the dialect).
    for empty in ("[]", "[ ]", ":", "::"):
        with pytest.raises(InventoryError, match=r"^no gpu found on node$"):
            decode_nvidia_inventory(empty, None)
    with pytest.raises(InventoryError, match="pair score"):
        decode_nvidia_inventory(INV_2, "{not json")
    devices = decode_nvidia_inventory(INV_2, SCORES)
    assert [d.pair_scores for d in devices] == [{"GPU-1": 50}, {"GPU-0": 50}]


# ------------------------------------------------------------------ passes


async def test_first_pass_registers_and_stamps_handshake(env: Env) -> None:
    env.add(make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2, keys.NODE_NVIDIA_SCORE: SCORES}))
    env.add(make_node("cpu-1", gpus=None))
    assert not env.loop.synced.is_set()
    report = await env.loop.run_pass()
    assert env.loop.synced.is_set()
    assert report.nodes == 2 and report.updated == ["gpu-1"]
    assert sorted(report.requested) == ["cpu-1", "gpu-1"]  # HAMi stamps every listed node
    assert report.errors == {"cpu-1": "annos not found hami.io/node-nvidia-register"}
    view = env.state.ledger.view("gpu-1")
    assert view is not None
    assert [(d.id, d.numa, d.pair_scores) for d in view.devices] == [
        ("GPU-0", 0, {"GPU-1": 50}),
        ("GPU-1", 1, {"GPU-0": 50}),
    ]
    assert env.devices("cpu-1") is None
    await env.loop.flush_writes()
    assert env.annotation("gpu-1") == "Requesting_2026-11-29 21:03:30"
    assert env.annotation("cpu-1") == "Requesting_2026-11-29 21:03:30"
    assert nvidia(env).counters("gpu-1") == NodeCounters(2, INV_2)


async def test_handshake_stamp_uses_local_zone_by_default(env: Env) -> None:
    loop = RegistrationLoop(env.client, env.state, env.store, now=env.clock)
    env.add(make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2}))
    await loop.run_pass()
    await loop.flush_writes()
    assert env.annotation("gpu-1") == format_requesting(T0.astimezone())


async def test_legacy_inventory_and_cordon(env: Env) -> None:
    env.add(make_node("old", {keys.NODE_NVIDIA_REGISTER: LEGACY, keys.DEVICE_CORDON: " GPU-aaaa , ,x"}))
    await env.run()
    view = env.state.ledger.view("old")
    assert view is not None
    assert [(d.id, d.devmem, d.type) for d in view.devices] == [
        ("GPU-ebe7", 7680, "NVIDIA-Tesla P4"),
        ("GPU-aaaa", 7680, "NVIDIA-Tesla P4"),
    ]
    assert view.cordoned == frozenset({"GPU-aaaa", "x"})
    assert view.annotations[keys.NODE_NVIDIA_REGISTER] == LEGACY


async def test_steady_state_makes_no_writes_and_no_updates(env: Env) -> None:
    env.add(make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2}))
    await env.run()
    patches_before = sum(1 for verb, *_ in env.cluster.request_log if verb == "patch")
    for _ in range(3):
        env.clock.advance(15)
        report = await env.loop.run_pass()
        assert report.updated == [] and report.requested == [] and report.unhealthy == []
    await env.loop.flush_writes()
    assert sum(1 for verb, *_ in env.cluster.request_log if verb == "patch") == patches_before
    # Long after the 60 s window the node stays healthy: it still advertises GPUs.
    env.clock.advance(3600)
    report = await env.loop.run_pass()
    assert report.unhealthy == [] and env.devices("gpu-1") == ["GPU-0", "GPU-1"]


async def test_register_change_is_picked_up(env: Env) -> None:
    env.add(make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2}))
    await env.run()
    env.patch("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_1})
    report = await env.loop.run_pass()
    assert report.updated == ["gpu-1"] and env.devices("gpu-1") == ["GPU-9"]


async def test_allocatable_change_is_picked_up(env: Env) -> None:
    env.add(make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2}))
    await env.run()
    env.patch("gpu-1", gpus="1")
    report = await env.loop.run_pass()
    assert report.updated == ["gpu-1"]
    assert nvidia(env).counters("gpu-1") == NodeCounters(1, INV_2)


async def test_decode_error_keeps_registered_devices(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    env.add(make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2}))
    await env.run()
    env.patch("gpu-1", {keys.NODE_NVIDIA_REGISTER: '[{"id":"GPU-0","count":"ten"}]'})
    with caplog.at_level(logging.WARNING, logger="vgpu_scheduler.cluster.registration"):
        report = await env.loop.run_pass()
        await env.loop.run_pass()  # the same error is not logged again at warning level
    assert "gpu-1" in report.errors and "count" in report.errors["gpu-1"]
    assert env.devices("gpu-1") == ["GPU-0", "GPU-1"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "node gpu-1" in warnings[0]


@pytest.mark.parametrize(
    ("annotations", "error"),
    [
        pytest.param({keys.NODE_NVIDIA_REGISTER: "[]"}, "no gpu found on node", id="empty inventory"),
        pytest.param({keys.NODE_NVIDIA_REGISTER: "GPU-0,10"}, "node annotation missing device separator",
                     id="legacy without separator"),
        pytest.param(
            {keys.NODE_NVIDIA_REGISTER: INV_2, keys.NODE_NVIDIA_SCORE: "[1]"},
            "pair score 0 must be an object",
            id="bad pair score",
        ),
    ],
)
async def test_decode_errors_never_register(env: Env, annotations: dict[str, str], error: str) -> None:
    env.add(make_node("bad", annotations))
    env.add(make_node("good", {keys.NODE_NVIDIA_REGISTER: INV_1}))
    report = await env.loop.run_pass()
    assert error in report.errors["bad"]
    assert env.devices("bad") is None and env.devices("good") == ["GPU-9"]


@pytest.mark.parametrize("empty", ["[]", "::"])
async def test_zero_devices_is_a_discovery_error_that_keeps_devices(env: Env, empty: str) -> None:
    # §3.2/§8.3: NVIDIA's GetNodeDevices fails with "no gpu found on node" on an empty inventory
    # in either dialect, so the registered devices are kept (nothing is removed).
    env.add(make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2}))
    await env.run()
    env.patch("gpu-1", {keys.NODE_NVIDIA_REGISTER: empty})
    report = await env.loop.run_pass()
    assert report.removed == [] and report.errors == {"gpu-1": "no gpu found on node"}
    assert env.devices("gpu-1") == ["GPU-0", "GPU-1"]


async def test_allocatable_drop_to_zero_cleans_up_on_next_pass(env: Env) -> None:
    env.add(make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2}))
    await env.run()
    assert env.annotation("gpu-1") is not None
    env.patch("gpu-1", gpus="0")
    report = await env.loop.run_pass()
    await env.loop.flush_writes()
    assert report.cleaned == ["gpu-1"] and env.devices("gpu-1") is None
    assert env.annotation("gpu-1") is None  # cleanup deletes the handshake
    assert nvidia(env).counters("gpu-1") == NodeCounters()  # and forgets the counters
    assert env.annotation("gpu-1", keys.NODE_NVIDIA_REGISTER) == INV_2  # the inventory is the plugin's


async def test_flapping_node_with_zero_allocatable(env: Env) -> None:
    """§3.4 consequences: register annotation left behind, allocatable 0 ⇒ in and out every ~60 s."""
    env.add(make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2}, gpus="0"))
    report = await env.loop.run_pass()
    await env.loop.flush_writes()
    env.sync()
    assert report.updated == ["gpu-1"]  # absent handshake: re-read, devices registered
    env.clock.advance(30)
    assert (await env.loop.run_pass()).unhealthy == []  # fresh Requesting stamp
    env.clock.advance(31)
    report = await env.loop.run_pass()
    await env.loop.flush_writes()
    env.sync()
    assert report.cleaned == ["gpu-1"] and env.annotation("gpu-1") is None
    report = await env.loop.run_pass()
    assert report.updated == ["gpu-1"] and report.requested == ["gpu-1"]


async def test_expired_handshake_on_unregistered_node_writes_nothing(env: Env) -> None:
    stale = format_requesting(T0 - timedelta(minutes=5), UTC)
    env.add(make_node("cpu-1", {keys.NODE_HANDSHAKE: stale}, gpus=None))
    report = await env.loop.run_pass()
    await env.loop.flush_writes()
    assert report.unhealthy == ["cpu-1"] and report.cleaned == [] and report.requested == []
    assert env.annotation("cpu-1") == stale


async def test_no_update_refreshes_cordon_but_keeps_devices_and_usage(env: Env) -> None:
    env.add(make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2, keys.NODE_NVIDIA_SCORE: SCORES}))
    await env.run()
    env.state.on_pod(
        pod(
            "p",
            namespace="ns",
            uid="u1",
            annotations=assigned_annotations("gpu-1", "GPU-1,NVIDIA,1000,30:;"),
            containers=[container("c")],
            phase="Pending",
        )
    )
    env.patch(
        "gpu-1",
        {keys.DEVICE_CORDON: "GPU-0", keys.NODE_NVIDIA_SCORE: '[{"uuid":"GPU-0","score":{"GPU-1":1}}]'},
    )
    report = await env.loop.run_pass()
    assert report.updated == []
    view = env.state.ledger.view("gpu-1")
    assert view is not None
    assert view.cordoned == frozenset({"GPU-0"})
    # Pair scores are part of the inventory: HAMi re-reads them only with an update.
    assert view.devices[0].pair_scores == {"GPU-1": 50}
    assert [(u.used, u.usedmem, u.usedcores) for u in view.usage] == [(0, 0, 0), (1, 1000, 30)]


async def test_handshake_from_old_plugins_is_answered(env: Env) -> None:
    env.add(
        make_node(
            "gpu-1",
            {
                keys.NODE_NVIDIA_REGISTER: LEGACY,
                keys.NODE_HANDSHAKE: "Reported 2026-11-29 21:00:00 +0000 UTC",
            },
        )
    )
    await env.run()
    assert env.annotation("gpu-1") == "Requesting_2026-11-29 21:03:30"
    env.patch("gpu-1", {keys.NODE_HANDSHAKE: "Deleted_2026-11-29 21:00:00"})
    report = await env.loop.run_pass()
    assert report.requested == ["gpu-1"] and report.updated == ["gpu-1"]


async def test_write_failures_are_only_logged(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    env.add(make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2}))
    env.cluster.fail_next("patch", 1, 500, resource="nodes")
    with caplog.at_level(logging.WARNING):
        await env.run()
    assert env.devices("gpu-1") == ["GPU-0", "GPU-1"]
    assert env.annotation("gpu-1") is None
    assert env.loop.writer.failed == 1
    assert any("gpu-1" in r.getMessage() and "failed to patch" in r.getMessage() for r in caplog.records)
    env.clock.advance(15)
    await env.run()  # asked again on the next pass
    assert env.annotation("gpu-1") == "Requesting_2026-11-29 21:03:45"


async def test_node_deletion_forgets_everything(env: Env) -> None:
    env.add(make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2}))
    await env.run()
    obj = env.store.remove("gpu-1")
    assert obj is not None
    env.loop.handler.on_delete(obj)
    assert env.devices("gpu-1") is None
    assert nvidia(env).counters("gpu-1") == NodeCounters()
    assert env.deleted == ["gpu-1"]


async def test_one_broken_node_object_does_not_stop_the_pass(env: Env) -> None:
    env.store.upsert(
        {"metadata": {"name": "weird", "annotations": {keys.NODE_NVIDIA_REGISTER: 5}}, "status": "not-a-dict"}
    )
    env.add(make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2}))
    report = await env.loop.run_pass()
    assert report.updated == ["gpu-1"]


# ------------------------------------------------------------------ the writer


async def test_writer_latest_value_wins_and_never_overlaps(env: Env) -> None:
    env.add(make_node("n1"))
    env.add(make_node("n2"))
    env.cluster.delay_next("patch", 1, 0.05, resource="nodes")
    writer = NodeAnnotationWriter(env.client, "example.com/k", concurrency=1)
    writer.submit("n1", "a")
    await asyncio.sleep(0.01)  # "a" is in flight now
    assert writer.pending("n1")
    writer.submit("n1", "b")
    writer.submit("n1", "c")  # replaces the queued "b"
    writer.submit("n2", "z")
    writer.submit("gone", "x")
    writer.discard("gone")
    await writer.flush()
    assert not writer.pending("n1")
    assert env.annotation("n1", "example.com/k") == "c"
    assert env.annotation("n2", "example.com/k") == "z"
    assert writer.written == 3 and writer.failed == 0
    writer.submit("missing-node", None)  # 404: logged at debug, counted
    await writer.flush()
    assert writer.failed == 1
    await writer.close()


async def test_writer_picks_the_oldest_writes_one_per_node_and_none_in_flight(env: Env) -> None:
    writer = NodeAnnotationWriter(env.client, "example.com/k", concurrency=2)
    for name, key in [("n1", "a"), ("n1", "b"), ("n2", "a"), ("n3", "a"), ("n4", "a")]:
        writer._queued[(name, key)] = "v"
    assert writer._next_writes(2) == [("n1", "a"), ("n2", "a")]
    writer._inflight.add("n1")
    assert writer._next_writes(3) == [("n2", "a"), ("n3", "a"), ("n4", "a")]
    assert writer._next_writes(0) == []


# ------------------------------------------------------------------ the loop


async def eventually(cond: Callable[[], bool]) -> None:
    for _ in range(400):
        if cond():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached")


async def test_loop_wakes_on_node_events_waits_for_ready_and_leader() -> None:
    cluster = MemoryCluster(seed=2)
    client = KubeClient(MemoryTransport(cluster))
    state = SchedulerState(build())
    flags = {"ready": False, "leader": True}
    hooks: list[int] = []

    async def after_pass() -> None:
        hooks.append(loop.passes)

    reflector = Reflector(client, "nodes")
    loop = RegistrationLoop(
        client,
        state,
        reflector.store,
        now=Clock(),
        tz=UTC,
        interval=3600,
        ready=lambda: flags["ready"],
        is_leader=lambda: flags["leader"],
        on_pass=after_pass,
    )
    reflector.handler = loop.handler
    cluster.create("nodes", make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2}))
    loop.start()
    reflector.start()
    try:
        await reflector.wait_synced(5)
        await asyncio.sleep(0.02)
        assert loop.passes == 0  # woken by the add, but the informers are "not synced"
        flags["ready"] = True
        loop.notify()
        await eventually(lambda: loop.passes == 1)
        assert loop.synced.is_set() and hooks == [1]
        assert state.ledger.view("gpu-1") is not None

        # A node add wakes the loop (a 1 h ticker would not).
        cluster.create("nodes", make_node("gpu-2", {keys.NODE_NVIDIA_REGISTER: INV_1}))
        await eventually(lambda: state.ledger.view("gpu-2") is not None)

        # Losing leadership clears synced and stops passes; regaining triggers one at once.
        flags["leader"] = False
        loop.on_leader_change(False)
        assert not loop.synced.is_set()
        passes = loop.passes
        cluster.create("nodes", make_node("gpu-3", {keys.NODE_NVIDIA_REGISTER: INV_1}))
        await eventually(lambda: reflector.store.get(None, "gpu-3") is not None)
        await asyncio.sleep(0.02)
        assert loop.passes == passes and state.ledger.view("gpu-3") is None
        flags["leader"] = True
        loop.on_leader_change(True)
        await eventually(lambda: loop.synced.is_set())
        assert state.ledger.view("gpu-3") is not None

        # A node delete drops it at once.
        cluster.delete("nodes", "gpu-2")
        await eventually(lambda: state.ledger.view("gpu-2") is None)
    finally:
        await reflector.stop()
        await loop.stop()
        await client.close()


async def test_loop_ticker_runs_passes_without_events() -> None:
    cluster = MemoryCluster(seed=3)
    client = KubeClient(MemoryTransport(cluster))
    store = Store()
    loop = RegistrationLoop(client, SchedulerState(build()), store, now=Clock(), tz=UTC, interval=0.01)
    loop.start()
    try:
        await eventually(lambda: loop.passes >= 3)
    finally:
        await loop.stop()
        await client.close()


async def test_long_pass_yields_and_skips_nodes_deleted_meanwhile(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    import vgpu_scheduler.cluster.registration as registration

    monkeypatch.setattr(registration, "PASS_YIELD_EVERY", 2)
    for i in range(6):
        env.add(make_node(f"gpu-{i}", {keys.NODE_NVIDIA_REGISTER: INV_2}))
    seen_mid_pass: list[list[str]] = []

    async def meanwhile() -> None:
        # Runs at the pass's first yield: other work is not blocked by a long pass, and a node
        # deleted now must not be registered from the pass's stale listing.
        seen_mid_pass.append([n for n in (f"gpu-{i}" for i in range(6)) if env.devices(n)])
        env.store.remove("gpu-5")

    task = asyncio.ensure_future(meanwhile())
    report = await env.loop.run_pass()
    await task
    assert seen_mid_pass == [["gpu-0", "gpu-1"]]
    assert report.updated == ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4"]
    assert env.devices("gpu-5") is None


async def test_stamp_and_lock_writes_keep_the_node_generation(env: Env) -> None:
    """Handshake stamps and lock values move on every pass and bind; no decision reads them, so the
    node's cached verdicts (keyed by its generation) stay. A cordon or another annotation moves it."""
    env.add(make_node("gpu-1", {keys.NODE_NVIDIA_REGISTER: INV_2}))
    await env.run()
    ledger = env.state.ledger
    before = ledger.generation("gpu-1")
    env.patch("gpu-1", {keys.NODE_HANDSHAKE: "Reported 2026-11-29 21:03:40 +0000 UTC"})
    env.sync()
    report = await env.loop.run_pass()
    assert report.updated == ["gpu-1"]  # re-registered, as HAMi does on a report
    env.patch("gpu-1", {keys.NODE_LOCK: "2026-11-29T21:03:41Z,ns,p"})
    env.sync()
    await env.loop.run_pass()
    assert ledger.generation("gpu-1") == before
    assert env.devices("gpu-1") == ["GPU-0", "GPU-1"]
    env.patch("gpu-1", {keys.DEVICE_CORDON: "GPU-0"})
    env.sync()
    await env.loop.run_pass()
    moved = ledger.generation("gpu-1")
    assert moved != before
    env.patch("gpu-1", {"example.com/zone": "b"})
    env.sync()
    await env.loop.run_pass()
    assert ledger.generation("gpu-1") != moved


def test_stamp_keys_are_the_handshakes_and_locks_but_no_inventory() -> None:
    vendors = build()
    stamps = stamp_keys(vendors)
    assert {keys.NODE_HANDSHAKE, keys.NODE_LOCK} <= stamps
    assert stamps.isdisjoint(k for v in vendors for k in v.inventory_keys)
