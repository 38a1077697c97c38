"""Mirror kube-scheduler's leader Lease under per-replica identities (the failover test's glue).

In a cluster each scheduler replica is one pod: kube-scheduler's identity is `<pod hostname>_<uuid>`
and our server, in the same pod, leads while the Lease holder starts with its hostname (§8.2). On
one test machine every kube-scheduler has the machine's hostname, and without root no process can
get another one, so our two servers could not tell their kube-schedulers apart.

The mirror watches kube-scheduler's Lease and keeps a second Lease equal to it, except that the
holder is renamed: the kube-scheduler named in `names` (identity -> replica) becomes
`<replica>_<uuid>`, any other holder becomes `<other>_<uuid>`. Our servers follow the mirror
(`--leader-elect-resource-name`) with hostnames `<replica>` / `<other>` (ControlPlane.spawn_server's
`hostname`). Every renewal is copied (renewTime changes), so our servers see the same sequence of
updates they would see on the real Lease, one watch hop later.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError
from vgpu_scheduler.cluster.reflector import Reflector

Obj = dict[str, Any]
COPIED = ("leaseDurationSeconds", "acquireTime", "renewTime", "leaseTransitions")


def renamed(holder: str, names: dict[str, str], other: str) -> str:
    """`<host>_<uuid>` -> `<replica>_<uuid>`; "" stays "" (released)."""
    if not holder:
        return ""
    uuid = holder.rsplit("_", 1)[-1]
    return f"{names.get(holder, other)}_{uuid}"


class LeaseMirror:
    def __init__(
        self, client: KubeClient, namespace: str, source: str, target: str, *, names: dict[str, str],
        other: str,
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.target = target
        self.names = names
        self.other = other
        self.holders: list[str] = []  # every distinct source holder seen, in order
        self.errors: list[str] = []
        self.reflector = Reflector(
            client, api.LEASES, namespace=namespace, field_selector=f"metadata.name={source}", handler=self
        )
        self._pending: Obj | None = None
        self._wake = asyncio.Event()
        self._writer: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LeaseMirror:
        self._writer = asyncio.get_running_loop().create_task(self._write_loop())
        self.reflector.start()
        await self.reflector.wait_synced(timeout=60)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.reflector.stop()
        if self._writer is not None:
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer

    # Reflector handler
    def on_add(self, obj: Obj) -> None:
        self._offer(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._offer(new)

    def on_delete(self, obj: Obj) -> None:
        pass

    def _offer(self, lease: Obj) -> None:
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        if holder and (not self.holders or self.holders[-1] != holder):
            self.holders.append(holder)
        mirrored = {k: spec[k] for k in COPIED if k in spec}
        mirrored["holderIdentity"] = renamed(holder, self.names, self.other)
        self._pending = mirrored  # only the latest state matters
        self._wake.set()

    async def _write_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            spec, self._pending = self._pending, None
            if spec is None:
                continue
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.target, "namespace": self.namespace}, "spec": spec}
            try:
                try:
                    await self.client.patch(api.LEASES, self.target, {"spec": spec}, self.namespace)
                except ApiError as exc:
                    if exc.status != 404:
                        raise
                    await self.client.create(api.LEASES, body, self.namespace)
            except (ApiError, ApiConnectionError) as exc:  # kube-apiserver down: the next renewal retries
                self.errors.append(str(exc))
