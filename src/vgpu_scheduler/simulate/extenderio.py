"""What the simulated kube-scheduler sends to the extender and reads back: the two verbs as an
endpoint (the in-process `Extender`, or a running server over HTTP), the filter's arguments built
from pieces already encoded, its answer decoded, and the reasons a pending pod keeps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
import msgspec

Obj = dict[str, Any]

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


class ExtenderEndpoint(Protocol):
    """The two extender verbs, bytes in, bytes out (`Extender` itself, or HTTP)."""

    async def filter(self, body: bytes) -> bytes: ...

    async def bind(self, body: bytes) -> bytes: ...


class HttpExtender:
    """POST the same bodies to `<url>/filter` and `<url>/bind` of a running server."""

    def __init__(self, url: str, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def _post(self, verb: str, body: bytes) -> bytes:
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=self._timeout)
        async with self._session.post(
            f"{self.url}/{verb}", data=body, headers={"Content-Type": "application/json"}
        ) as response:
            data = await response.read()
            if response.status != 200:
                # The extender always answers 200; anything else is reported like an extender error.
                text = data[:200].decode(errors="replace")
                return _encode({"Error": f"{verb}: HTTP {response.status}: {text}"})
            return data

    async def filter(self, body: bytes) -> bytes:
        return await self._post("filter", body)

    async def bind(self, body: bytes) -> bytes:
        return await self._post("bind", body)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class _FilterResult(msgspec.Struct, frozen=True):
    """ExtenderFilterResult as the loop reads it (`Nodes` is not used: the loop sends names).
    FailedNodes stays JSON: it is read only for a pod still pending at the end (`PendingReasons`)."""

    NodeNames: list[str] | None = None
    FailedNodes: msgspec.Raw = msgspec.Raw(b"null")
    Error: str | None = None


_decode_result = msgspec.json.Decoder(_FilterResult).decode
_decode_failed = msgspec.json.Decoder(dict[str, str] | None).decode


@dataclass(slots=True, frozen=True)
class FilterAnswer:
    node_names: list[Any]
    failed_nodes: Mapping[str, str] | msgspec.Raw
    error: str


def decode_filter_answer(body: bytes) -> FilterAnswer:
    """The extender's filter answer: typed decoding (C speed) for the well-formed answer, else the
    tolerant reading (any JSON types, stringified)."""
    try:
        typed = _decode_result(body)
    except msgspec.ValidationError:
        raw = _decode(body)
        return FilterAnswer(
            list(raw.get("NodeNames") or []), _tolerant_map(raw.get("FailedNodes")),
            str(raw.get("Error") or ""),
        )
    return FilterAnswer(typed.NodeNames or [], typed.FailedNodes, typed.Error or "")


def _tolerant_map(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, Mapping) else {}


@dataclass(slots=True, frozen=True)
class PendingReasons:
    """Why a pod is pending: the predicates' reasons (the verdict cache's map: read only), then
    the extender's FailedNodes, still as the JSON it answered until a report needs them (most
    answers are superseded by the pod's next attempt)."""

    predicates: Mapping[str, str]
    extender: Mapping[str, str] | msgspec.Raw | None = None

    def merged(self) -> dict[str, str]:
        out = dict(self.predicates)
        raw = self.extender
        extender: Mapping[str, str] | None
        if isinstance(raw, msgspec.Raw):
            try:
                extender = _decode_failed(raw)
            except msgspec.ValidationError:
                extender = _tolerant_map(_decode(raw))
        else:
            extender = raw
        if extender:
            out.update(extender)
        return out


def extender_args(pod: Obj, names_json: bytes, pod_json: bytes | None = None) -> bytes:
    """`{"Pod": pod, "Nodes": null, "NodeNames": names}` as msgspec encodes it, from the names'
    JSON and the pod's when the caller has it (`pod_json`, the encoding of `pod`)."""
    if pod_json is None:
        pod_json = _encode(pod)
    return b'{"Pod":' + pod_json + b',"Nodes":null,"NodeNames":' + names_json + b"}"
