"""The fake API server on the wire: headers, chunked watch bodies, raw status bodies, auth."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from tests.builders import api_pod
from tests.builders import node as node_object
from vgpu_scheduler.standin.fakeapi import FakeApiServer, serve
from vgpu_scheduler.standin.memory import MemoryCluster


def fixture_headers(fx: Any, rel: str) -> dict[str, str]:
    lines = fx.text(rel).split("\n\n", 1)[0].splitlines()[1:]
    return {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines if ":" in line)}


SAME_EVERYWHERE = (
    "cache-control",
    "content-type",
    "x-kubernetes-pf-flowschema-uid",
    "x-kubernetes-pf-prioritylevel-uid",
)


async def test_error_answer_headers_and_body_like_the_apiserver(
    server: FakeApiServer, cluster: MemoryCluster, fx: Any
) -> None:
    cluster.seed_from_list(fx.pod_list())
    want_headers = fixture_headers(fx, "api/patch-409-conflict.response-headers.txt")
    async with (
        aiohttp.ClientSession() as s,
        s.patch(
            server.url + "/api/v1/namespaces/default/pods/gpu-single",
            data=b'{"metadata":{"resourceVersion":"1","annotations":{"hami.io/vgpu-node":"gpu-node-1"}}}',
            headers={"Content-Type": "application/merge-patch+json"},
        ) as resp,
    ):
        body = await resp.read()
        assert resp.status == 409
        got = {k.lower(): v for k, v in resp.headers.items()}
    for name in SAME_EVERYWHERE:
        assert got[name] == want_headers[name]
    assert "audit-id" in got and int(got["content-length"]) == len(body)
    # Byte for byte what kube-apiserver sent.
    assert body == fx.text("api/patch-409-conflict.json").strip().encode()


async def test_binding_answers_byte_for_byte(server: FakeApiServer, cluster: MemoryCluster, fx: Any) -> None:
    request = fx.json("api/pods-binding.request.json")
    cluster.seed_from_list(
        [
            {
                **api_pod("manual-bind"),
                "metadata": {**api_pod("manual-bind")["metadata"], "uid": request["metadata"]["uid"]},
            }
        ]
    )
    url = server.url + "/api/v1/namespaces/default/pods/manual-bind/binding"
    async with aiohttp.ClientSession() as s:
        for want in ("pods-binding.response.json", "pods-binding.already-bound.response.json"):
            async with s.post(
                url, data=json.dumps(request).encode(), headers={"Content-Type": "application/json"}
            ) as resp:
                assert await resp.read() == fx.text(f"api/{want}").strip().encode()
                status_line = fx.text(f"api/{want.replace('.json', '-headers.txt')}").splitlines()[0]
                assert resp.status == int(status_line.split()[1])


async def test_watch_is_chunked_json_lines(server: FakeApiServer, cluster: MemoryCluster, fx: Any) -> None:
    want_headers = fixture_headers(fx, "api/watch-pods.response-headers.txt")
    cluster.create("pods", api_pod("a"))
    url = server.url + "/api/v1/pods?watch=1&allowWatchBookmarks=true&resourceVersion=1&timeoutSeconds=0.3"
    async with aiohttp.ClientSession() as s, s.get(url) as resp:
        got = {k.lower(): v for k, v in resp.headers.items()}
        for name in (*SAME_EVERYWHERE, "transfer-encoding"):
            assert got[name] == want_headers[name]
        cluster.trigger_bookmarks()
        body = await resp.read()
    lines = body.decode().split("\n")
    assert lines[-1] == ""  # every event ends with a newline
    events = [json.loads(line) for line in lines[:-1]]
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]
    assert events[0]["object"]["kind"] == "Pod"


async def test_watch_410_is_http_200_with_an_error_event(
    server: FakeApiServer, cluster: MemoryCluster, fx: Any
) -> None:
    cluster.create("pods", api_pod("a"))
    cluster.compact()
    want_status = fx.text("api/watch-410.txt").splitlines()[0]
    async with (
        aiohttp.ClientSession() as s,
        s.get(server.url + "/api/v1/pods?watch=1&resourceVersion=1") as resp,
    ):
        assert f"HTTP/1.1 {resp.status} {resp.reason}" == want_status
        lines = (await resp.read()).decode().splitlines()
    assert len(lines) == 1
    event = json.loads(lines[0])
    want = json.loads(fx.text("api/watch-410.stream.jsonl"))
    assert event["type"] == want["type"] and event["object"]["reason"] == "Expired"
    assert event["object"]["message"].startswith("too old resource version: 1 (")
    assert list(event["object"]) == list(want["object"])


async def test_client_going_away_frees_the_watch(server: FakeApiServer, cluster: MemoryCluster) -> None:
    async with aiohttp.ClientSession() as s:
        resp = await s.get(server.url + "/api/v1/pods?watch=1&resourceVersion=1")
        for _ in range(200):
            if cluster.watch_count() == 1:
                break
            await asyncio.sleep(0.005)
        assert cluster.watch_count() == 1
        resp.close()
    for _ in range(400):
        if cluster.watch_count() == 0:
            break
        await asyncio.sleep(0.005)
    assert cluster.watch_count() == 0


async def test_token_required_when_configured(cluster: MemoryCluster) -> None:
    srv = await serve(cluster, token="abc")
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(srv.url + "/api/v1/nodes") as resp:
                assert resp.status == 401
                assert await resp.json() == {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Failure",
                    "message": "Unauthorized",
                    "reason": "Unauthorized",
                    "code": 401,
                }
            async with s.get(srv.url + "/api/v1/nodes", headers={"Authorization": "Bearer abc"}) as resp:
                assert resp.status == 200
        assert srv.auth_headers == ["", "Bearer abc"]
    finally:
        await srv.close()


async def test_bad_requests(server: FakeApiServer, cluster: MemoryCluster) -> None:
    cluster.create("nodes", node_object("n1", typed=True))
    async with aiohttp.ClientSession() as s:
        async with s.post(
            server.url + "/api/v1/nodes", data=b"{not json", headers={"Content-Type": "application/json"}
        ) as resp:
            assert resp.status == 400 and (await resp.json())["reason"] == "BadRequest"
        async with s.patch(
            server.url + "/api/v1/nodes/n1",
            data=b"{}",
            headers={"Content-Type": "application/strategic-merge-patch+json"},
        ) as resp:
            assert resp.status == 415 and (await resp.json())["reason"] == "UnsupportedMediaType"
        async with s.patch(
            server.url + "/api/v1/nodes/n1",
            data=b'[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]',
            headers={"Content-Type": "application/json-patch+json"},
        ) as resp:
            assert resp.status == 200 and (await resp.json())["metadata"]["labels"] == {"a": "b"}
        async with s.post(server.url + "/api/v1/pods", data=b"{}") as resp:
            assert resp.status == 405
        async with s.get(server.url + "/apis/apps/v1/deployments") as resp:
            assert resp.status == 404 and (await resp.json())["message"] == (
                "the server could not find the requested resource"
            )
        async with s.get(server.url + "/api/v1/pods?limit=x") as resp:
            assert resp.status == 400


async def test_close_cuts_open_watches(cluster: MemoryCluster) -> None:
    srv = await serve(cluster)
    async with aiohttp.ClientSession() as s:
        resp = await s.get(srv.url + "/api/v1/pods?watch=1&resourceVersion=1")
        for _ in range(200):
            if cluster.watch_count() == 1:
                break
            await asyncio.sleep(0.005)
        await asyncio.wait_for(srv.close(), 10)  # would wait for the watch to end without the cut
        assert cluster.watch_count() == 0
        with pytest.raises(aiohttp.ClientPayloadError):
            await asyncio.wait_for(resp.read(), 10)
