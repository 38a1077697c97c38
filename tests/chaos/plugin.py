"""The device-plugin stand-in (tests/e2e/pluginstandin.py) with the nemesis' three faults, and retries.

* `pause()` / `resume()`: no node's plugin confirms anything meanwhile; on resume every bound pod
  still waiting is offered again;
* `late(seconds)`: confirmations come that much later (0 to end it);
* `kill(node)` / `revive(node)`: one node's plugin is dead (its pods stay `allocating` and its lock
  stays) until revived, when its waiting pods are offered again.

An Allocate whose API call fails (kube-apiserver restarting) is tried again, as kubelet does, with
the same writes; a pod gone meanwhile is dropped.
"""

from __future__ import annotations

import asyncio

from pluginstandin import DevicePluginStandIn, Obj

from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError
from vgpu_scheduler.configfile import default_device_config
from vgpu_scheduler.devices.registry import build

RETRY = 1.0  # s between two attempts of one Allocate


class ChaosDevicePlugin(DevicePluginStandIn):
    def __init__(self, client: KubeClient, *, delay: float, namespace: str) -> None:
        # The vendors of the servers' (default) device configuration: DCU's resource names too.
        super().__init__(client, delay=delay, namespace=namespace, vendors=build(default_device_config()))
        self.base_delay = delay
        self.paused = False
        self.dead: set[str] = set()

    def _stopped(self, pod: Obj) -> bool:
        return self.paused or (pod.get("spec") or {}).get("nodeName") in self.dead

    def _offer(self, pod: Obj) -> None:
        if self._stopped(pod):
            return  # not marked seen: offered again when the fault ends
        super()._offer(pod)

    async def _admit(self, pod: Obj) -> None:
        meta = pod.get("metadata") or {}
        namespace, name, uid = str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid"))
        if self.delay > 0:
            await asyncio.sleep(self.delay)
        while True:
            current = self.reflector.store.get(namespace, name)
            if current is None or (current.get("metadata") or {}).get("uid") != uid:
                return  # deleted meanwhile
            if self._stopped(current):
                self._seen.discard(uid)  # the fault came first: offered again when it ends
                return
            try:
                # The pod as offered, not as now: a retry after a half-done attempt (annotations
                # consumed, phase not written) redoes the same writes instead of consuming twice.
                result = await self.plugin.admit(pod)
            except ApiConnectionError:
                await asyncio.sleep(RETRY)
                continue
            except ApiError as exc:
                if exc.status == 404:
                    return
                if exc.status in (409, 429) or exc.status >= 500:
                    await asyncio.sleep(RETRY)
                    continue
                self.errors.append(f"{namespace}/{name}: {exc}")
                return
            if result.error:
                self.errors.append(f"{namespace}/{name}: {result.error}")
            self.confirmed[f"{namespace}/{name}"] = asyncio.get_running_loop().time()
            return

    def pause(self) -> None:
        self.paused = True

    def resume(self) -> None:
        self.paused = False
        self._offer_again()

    def late(self, seconds: float) -> None:
        self.delay = seconds or self.base_delay

    def kill(self, node: str) -> None:
        self.dead.add(node)

    def revive(self, node: str) -> None:
        self.dead.discard(node)
        self._offer_again()

    def _offer_again(self) -> None:
        for pod in self.reflector.store.list():
            self._offer(pod)
