"""The protocol floor: a minimal extender making exactly our API writes with trivial decisions.

    python bench/floor_extender.py --port P --server https://127.0.0.1:A --ca ca.crt \
        --cert client.crt --key client.key --serving-cert s.crt --serving-key s.key

bench/burst.py runs it in place of our server, so each run prints our pods/s as a fraction of what
the same protocol costs with (almost) nothing else around it on the machine at hand. Per bound pod it
writes what our server writes (docs/performance.md, "API writes per bound pod"):

* filter: the `FilteringSucceed` event (off the request path, as ours; events on our events'
  budget of 50 per second, 100 saved, at most 1,000 waiting);
* bind: the node lock `hami.io/mutex.lock` (merge patch guarded by the node's resourceVersion), the
  pod patch (HAMi's allocation annotations, `bind-phase: allocating`, `bind-time`; guarded by the
  pod's resourceVersion), the Binding (guarded by the patched pod's resourceVersion), and the
  `BindingSucceed` event.

It also answers /webhook with the one mutation a GPU pod needs (`schedulerName`), so kube-apiserver
makes the same admission call per create. Decisions are trivial: the next node in a rotation that is
neither locked (as its own node watch shows: the device-plugin stand-in releases the lock) nor about
to be locked by a bind of its own; none free is HAMi's contention error, as ours answers. A pod gets
the node's GPUs in turn with the memory its first container asks for. Lock-aware in the simplest
way: no holder checks, no takeover, no retries; a refused write fails the bind (kube-scheduler
retries the pod). Nothing here reads the pod informer, the ledger or any vendor code.
Bench tool only: it trusts its caller (loopback, the bench's own certificates).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import ssl
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

from vgpu_scheduler.cluster.transport import TokenBucket

log = logging.getLogger("floor")

Obj = dict[str, Any]
NODE_LOCK = "hami.io/mutex.lock"
REGISTER = "hami.io/node-nvidia-register"
SCHEDULER_NAME = "hami-scheduler"
GPUMEM = "nvidia.com/gpumem"
MERGE_PATCH = "application/merge-patch+json"
LOCK_TIMEOUT_TEXT = "5m0s"  # our --node-lock-timeout's default, in HAMi's contention text
CONTENTION = "node {} has been locked within " + LOCK_TIMEOUT_TEXT + ": node lock contention"
BIND_WINDOW = 20.0  # s a filter's choice counts as "about to be locked" (our --bind-timeout)
# Our events' budget (scheduler/process.py EVENT_QPS, EVENT_BURST; cluster/events.py's queue):
# beyond it ours wait, and past the queue they are dropped, so the floor writes no more than ours.
EVENT_QPS, EVENT_BURST, EVENT_QUEUE = 50.0, 100, 1000


@dataclass
class NodeState:
    resource_version: str = ""
    locked: bool = False
    uuids: list[str] = field(default_factory=list)
    placed: int = 0


@dataclass
class Chosen:
    node: str
    pod: Obj  # the ObjectReference fields events need, and the resourceVersion filtered
    until: float


class Api:
    """The few calls the floor makes, over one aiohttp session with the client certificate."""

    def __init__(self, server: str, ctx: ssl.SSLContext) -> None:
        self.server = server
        self.session = ClientSession(connector=TCPConnector(ssl=ctx, limit=100),
                                     timeout=ClientTimeout(total=30))

    async def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
                   answer: bool = False) -> tuple[int, Obj]:
        data = None if body is None else json.dumps(body).encode()
        async with self.session.request(method, self.server + path, data=data,
                                        headers={"Content-Type": content_type}) as resp:
            raw = await resp.read()
            return resp.status, (json.loads(raw) if answer and raw else {})

    async def close(self) -> None:
        await self.session.close()


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Floor:
    def __init__(self, api: Api) -> None:
        self.api = api
        self.nodes: dict[str, NodeState] = {}
        self.pending: dict[str, Chosen] = {}  # pod uid -> the filter's choice, until its bind
        self.about_to_lock: dict[str, str] = {}  # node -> uid of the pending bind there
        self.turn = 0
        self.synced = asyncio.Event()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.event_budget = TokenBucket(EVENT_QPS, EVENT_BURST)
        self.events_waiting = 0

    # -- node watch: resourceVersion, lock present, device ids ---------------------------------------

    def see_node(self, node: Obj) -> None:
        meta = node.get("metadata") or {}
        name = meta.get("name", "")
        state = self.nodes.setdefault(name, NodeState())
        rv = str(meta.get("resourceVersion", ""))
        if state.resource_version and _older(rv, state.resource_version):
            return  # a read older than what the watch already showed (the GET after a conflict)
        state.resource_version = rv
        annotations = meta.get("annotations") or {}
        state.locked = NODE_LOCK in annotations
        if not state.uuids and REGISTER in annotations:
            try:
                state.uuids = [d["id"] for d in json.loads(annotations[REGISTER])]
            except (ValueError, KeyError, TypeError):
                state.uuids = []

    async def watch_nodes(self) -> None:
        while True:
            try:
                await self._list_and_watch()
            except (aiohttp.ClientError, ValueError, TimeoutError) as exc:
                log.warning("node watch: %r; listing again", exc)
                await asyncio.sleep(0.2)

    async def _list_and_watch(self) -> None:
        while True:
            status, listed = await self.api.call("GET", "/api/v1/nodes", answer=True)
            if status != 200:
                await asyncio.sleep(0.5)
                continue
            for node in listed.get("items") or []:
                self.see_node(node)
            self.synced.set()
            rv = (listed.get("metadata") or {}).get("resourceVersion", "")
            url = f"{self.api.server}/api/v1/nodes?watch=1&allowWatchBookmarks=true&resourceVersion={rv}"
            async with self.api.session.get(url, timeout=ClientTimeout(total=None)) as resp:
                async for line in resp.content:
                    if not line.strip():
                        continue
                    event = json.loads(line)
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self.see_node(event["object"])
                    elif event.get("type") == "ERROR":
                        break

    # -- filter ------------------------------------------------------------------------------------

    def pick(self, names: list[str], uid: str) -> str | None:
        n = len(names)
        for step in range(n):
            name = names[(self.turn + step) % n]
            state = self.nodes.get(name)
            if state is None or not state.uuids or state.locked:
                continue
            waiting = self.about_to_lock.get(name)
            if waiting is not None and waiting != uid and self.pending.get(waiting, None) is not None \
                    and self.pending[waiting].until > time.monotonic():
                continue
            self.turn = (self.turn + step + 1) % n
            return name
        return None

    async def filter(self, request: web.Request) -> web.Response:
        args = json.loads(await request.read())
        pod = args.get("Pod") or {}
        meta = pod.get("metadata") or {}
        uid = meta.get("uid", "")
        names = args.get("NodeNames") or []
        node = self.pick(names, uid)
        if node is None:
            first = names[0] if names else ""
            return _json({"Nodes": None, "NodeNames": None, "FailedNodes": None,
                          "FailedAndUnresolvableNodes": None,
                          "Error": CONTENTION.format(first)})
        ctr = ((pod.get("spec") or {}).get("containers") or [{}])[0]
        mem = str(((ctr.get("resources") or {}).get("limits") or {}).get(GPUMEM, "0"))
        ref = {"kind": "Pod", "namespace": meta.get("namespace", ""), "name": meta.get("name", ""),
               "uid": uid, "apiVersion": "v1", "resourceVersion": meta.get("resourceVersion", ""),
               "mem": mem}
        self.pending[uid] = Chosen(node, ref, time.monotonic() + BIND_WINDOW)
        self.about_to_lock[node] = uid
        message = (f"find fit node({node}), 0 nodes not fit, 1 nodes fit({node}:0.00), "
                   f"1 of {len(names)} nodes evaluated")
        self.event(ref, "Normal", "FilteringSucceed", message)
        return _json({"Nodes": None, "NodeNames": [node], "FailedNodes": {},
                      "FailedAndUnresolvableNodes": None, "Error": ""})

    # -- bind --------------------------------------------------------------------------------------

    async def bind(self, request: web.Request) -> web.Response:
        args = json.loads(await request.read())
        # In a task of its own, as ours: a caller that gives up (kube-scheduler's 30 s timeout)
        # cancels the handler, which must not cut the bind between its lock and its unlock.
        task = asyncio.get_running_loop().create_task(self._bind(args))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return await asyncio.shield(task)

    async def _bind(self, args: Obj) -> web.Response:
        uid, node = args.get("PodUID", ""), args.get("Node", "")
        chosen = self.pending.pop(uid, None)
        if self.about_to_lock.get(node) == uid:
            del self.about_to_lock[node]
        state = self.nodes.get(node)
        if chosen is None or chosen.node != node or state is None:
            return _json({"Error": f"pod {args.get('PodName')} was not filtered onto {node}"})
        ref = chosen.pod
        ns, name = ref["namespace"], ref["name"]
        now = datetime.now(UTC)
        lock = {"metadata": {"annotations": {NODE_LOCK: f"{rfc3339(now)},{ns},{name}"},
                             "resourceVersion": state.resource_version}}
        state.locked = True  # from now on: no other filter may pick the node while this write is out
        status, _ = await self.api.call("PATCH", f"/api/v1/nodes/{node}", lock, content_type=MERGE_PATCH)
        if status == 409:  # the watch is behind our own writes: decide on a read, as ours does
            status, fresh = await self.api.call("GET", f"/api/v1/nodes/{node}", answer=True)
            if status == 200:
                state.locked = False
                self.see_node(fresh)
            if status == 200 and not state.locked:
                lock["metadata"]["resourceVersion"] = state.resource_version
                status, _ = await self.api.call("PATCH", f"/api/v1/nodes/{node}", lock,
                                                content_type=MERGE_PATCH)
            else:
                status = 409
        elif status != 200:
            state.locked = False  # not written; the watch shows any other lock
        if status != 200:
            log.info("bind %s/%s: lock of %s refused (HTTP %s)", ns, name, node, status)
            return _json({"Error": CONTENTION.format(node)})
        state.locked = True
        uuid = state.uuids[state.placed % len(state.uuids)]
        state.placed += 1
        devices = f"{uuid},NVIDIA,{ref['mem']},0:;"
        stamp = str(int(time.time()))
        annotations = {
            "hami.io/vgpu-node": node, "hami.io/vgpu-time": stamp,
            "hami.io/vgpu-devices-to-allocate": devices, "hami.io/vgpu-devices-allocated": devices,
            "hami.io/bind-phase": "allocating", "hami.io/bind-time": stamp,
        }
        # No resourceVersion guard here (ours has one, and reads the pod again on a conflict):
        # kube-scheduler's status patch after a failed attempt makes the filtered version stale,
        # and the floor has no pod informer to read a newer one from.
        patch = {"metadata": {"annotations": annotations}}
        status, patched = await self.api.call("PATCH", f"/api/v1/namespaces/{ns}/pods/{name}", patch,
                                              content_type=MERGE_PATCH, answer=True)
        if status != 200:
            await self.unlock(node)
            log.warning("bind %s/%s: pod patch HTTP %s", ns, name, status)
            return _json({"Error": f"patching pod {ns}/{name}: HTTP {status}"})
        version = (patched.get("metadata") or {}).get("resourceVersion", "")
        binding = {"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": version},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        status, _ = await self.api.call("POST", f"/api/v1/namespaces/{ns}/pods/{name}/binding", binding)
        if status not in (200, 201):
            await self.unlock(node)
            log.warning("bind %s/%s: Binding HTTP %s", ns, name, status)
            return _json({"Error": f"binding pod {ns}/{name}: HTTP {status}"})
        self.event(ref, "Normal", "BindingSucceed", f"Successfully binding node [{node}] to {ns}/{name}")
        return _json({"Error": ""})

    async def unlock(self, node: str) -> None:
        unlock = {"metadata": {"annotations": {NODE_LOCK: None}}}
        await self.api.call("PATCH", f"/api/v1/nodes/{node}", unlock, content_type=MERGE_PATCH)

    # -- events, off the request path ----------------------------------------------------------------

    def event(self, ref: Obj, type_: str, reason: str, message: str) -> None:
        now = datetime.now(UTC)
        ts = rfc3339(now)
        involved = {k: v for k, v in ref.items() if k != "mem" and v}
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{ref['name']}.{time.time_ns():x}", "namespace": ref["namespace"]},
            "involvedObject": involved, "reason": reason, "message": message,
            "source": {"component": SCHEDULER_NAME}, "firstTimestamp": ts, "lastTimestamp": ts,
            "count": 1, "type": type_, "eventTime": None, "reportingComponent": SCHEDULER_NAME,
            "reportingInstance": "",
        }
        if self.events_waiting >= EVENT_QUEUE:
            return  # dropped, as ours are
        self.events_waiting += 1
        task = asyncio.get_running_loop().create_task(self._send_event(ref["namespace"], body))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _send_event(self, namespace: str, body: Obj) -> None:
        try:
            await self.event_budget.acquire()
            await self.api.call("POST", f"/api/v1/namespaces/{namespace}/events", body)
        finally:
            self.events_waiting -= 1

    # -- webhook: the schedulerName mutation only ---------------------------------------------------

    async def webhook(self, request: web.Request) -> web.Response:
        review = json.loads(await request.read())
        req = review.get("request") or {}
        ops = [{"op": "add", "path": "/spec/schedulerName", "value": SCHEDULER_NAME}]
        response = {"uid": req.get("uid", ""), "allowed": True, "patchType": "JSONPatch",
                    "patch": base64.b64encode(json.dumps(ops).encode()).decode()}
        return _json({"apiVersion": review.get("apiVersion", "admission.k8s.io/v1"),
                      "kind": "AdmissionReview", "response": response})

    async def ready(self, _request: web.Request) -> web.Response:
        return web.Response(status=200 if self.synced.is_set() else 503, text="ok")


def _older(rv: str, than: str) -> bool:
    """kube-apiserver's resourceVersions are etcd revisions: integers, compared as such here."""
    try:
        return int(rv) < int(than)
    except ValueError:
        return False


def _json(obj: Any) -> web.Response:
    return web.Response(body=json.dumps(obj).encode(), content_type="application/json")


async def serve(args: argparse.Namespace) -> None:
    client_ctx = ssl.create_default_context(cafile=args.ca)
    client_ctx.load_cert_chain(args.cert, args.key)
    api = Api(args.server, client_ctx)
    floor = Floor(api)
    watcher = asyncio.get_running_loop().create_task(floor.watch_nodes())
    app = web.Application()
    app.router.add_post("/filter", floor.filter)
    app.router.add_post("/bind", floor.bind)
    app.router.add_post("/webhook", floor.webhook)
    app.router.add_get("/readyz", floor.ready)
    app.router.add_get("/healthz", floor.ready)
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(args.serving_cert, args.serving_key)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port, ssl_context=serving).start()
    try:
        await asyncio.Event().wait()  # until the bench kills the process
    finally:
        watcher.cancel()
        await runner.cleanup()
        await api.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--server", required=True, help="kube-apiserver URL")
    p.add_argument("--ca", required=True)
    p.add_argument("--cert", required=True, help="client certificate for kube-apiserver")
    p.add_argument("--key", required=True)
    p.add_argument("--serving-cert", required=True)
    p.add_argument("--serving-key", required=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(serve(p.parse_args()))


if __name__ == "__main__":
    main()
