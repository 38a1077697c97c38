"""Cancelling a consumer of an in-memory watch stops it at once, even when an event arrives in the
same loop iteration as the cancellation.

The bug: `MemoryWatch.__anext__` waited with `asyncio.wait_for(event.wait(), timeout)`; on Python
3.11 `wait_for` swallows a cancellation that lands while the inner wait has just completed, so the
consumer went on reading until the watch's timeoutSeconds ran out (a Reflector asks for 300-600 s).
The waits below are bounded only so that a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.builders import pod
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.reflector import Reflector
from vgpu_scheduler.standin.embedded.deviceplugin import attach_device_plugin
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport

BOUND = 10.0  # seconds; far below the 600 s watch timeout the bug waited for


async def _until(cond: Any) -> None:
    for _ in range(10_000):
        if cond():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


async def test_cancel_with_an_event_arriving_in_the_same_iteration() -> None:
    cluster = MemoryCluster(seed=1)
    watch = cluster.watch("pods", timeout_seconds=600)
    seen: list[bytes] = []

    async def consume() -> None:
        async for line in watch:
            seen.append(line)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)  # the consumer now waits for an event
    cluster.create("pods", pod("a", containers=[{"name": "c"}]))  # wakes the waiter ...
    task.cancel()  # ... in the same iteration as the cancellation
    done, _ = await asyncio.wait({task}, timeout=BOUND)
    assert task in done and task.cancelled()


async def test_cancel_of_an_idle_watch() -> None:
    cluster = MemoryCluster(seed=1)
    watch = cluster.watch("pods", timeout_seconds=600, allow_bookmarks=True)

    async def consume() -> None:
        async for _ in watch:
            pass

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=BOUND)
    assert task in done and task.cancelled()


async def test_watch_still_times_out_and_wakes_for_events() -> None:
    cluster = MemoryCluster(seed=1)
    watch = cluster.watch("pods", timeout_seconds=0.05)
    lines: list[bytes] = []

    async def consume() -> None:
        async for line in watch:
            lines.append(line)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0)
    cluster.create("pods", pod("a", containers=[{"name": "c"}]))
    await asyncio.wait({task}, timeout=BOUND)
    assert task.done() and task.exception() is None  # ended by its timeout
    assert len(lines) == 1 and b'"ADDED"' in lines[0]


async def test_reflector_stop_while_writes_arrive() -> None:
    for round_ in range(20):  # the race depends on where the reflector is; try several positions
        cluster = MemoryCluster(seed=round_)
        reflector = Reflector(KubeClient(MemoryTransport(cluster)), "pods")
        reflector.start()
        assert await reflector.wait_synced(BOUND)
        await _until(lambda r=reflector: r.stats.watches > 0)
        for _ in range(round_ % 4):
            await asyncio.sleep(0)
        cluster.create("pods", pod(f"p{round_}", containers=[{"name": "c"}]))
        await asyncio.wait_for(reflector.stop(), BOUND)


async def test_background_device_plugin_stop_while_pods_change() -> None:
    for round_ in range(10):
        cluster = MemoryCluster(seed=round_)
        plugin = attach_device_plugin(cluster)
        assert await plugin.reflector.wait_synced(BOUND)
        await _until(lambda p=plugin: p.reflector.stats.watches > 0)
        for _ in range(round_ % 3):
            await asyncio.sleep(0)
        cluster.create("pods", pod(f"p{round_}", containers=[{"name": "c"}]))
        await asyncio.wait_for(plugin.stop(), BOUND)
