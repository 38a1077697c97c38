"""Typed, tolerant accessors for Kubernetes object dicts (pods, nodes, quotas, events).

Objects reach us from watch streams, extender bodies and admission reviews, and only the first is
validated by an API server. Every accessor here takes whatever JSON decoded to and never raises: a
field of the wrong type reads as absent (empty string, empty mapping, empty list). Callers that must
*reject* malformed input (the webhook's shape check) do that themselves, before reading.
"""

# No `from __future__ import annotations` here: it would shadow the `annotations` accessor.
from collections.abc import Mapping, Sequence
from typing import Any

_EMPTY: Mapping[str, Any] = {}


def as_mapping(value: object) -> Mapping[str, Any]:
    """`value` when it is a JSON object, else an empty mapping."""
    if type(value) is dict:  # decoded JSON: skips the slower abstract-class check
        return value
    return value if isinstance(value, Mapping) else _EMPTY


def as_list(value: object) -> Sequence[Any]:
    """`value` when it is a JSON array, else an empty sequence."""
    return value if isinstance(value, list | tuple) else ()


def _str(value: object) -> str:
    # Only strings count: `"name": 5` is malformed, not "5".
    return value if isinstance(value, str) else ""


# --- metadata -----------------------------------------------------------------------------------


def metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(obj.get("metadata"))


def name(obj: Mapping[str, Any]) -> str:
    return _str(metadata(obj).get("name"))


def namespace(obj: Mapping[str, Any]) -> str:
    return _str(metadata(obj).get("namespace"))


def uid(obj: Mapping[str, Any]) -> str:
    return _str(metadata(obj).get("uid"))


def resource_version(obj: Mapping[str, Any]) -> str:
    return _str(metadata(obj).get("resourceVersion"))


def annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """String-valued annotations; other values are dropped (an unvalidated body may hold `5`)."""
    raw = as_mapping(metadata(obj).get("annotations"))
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


def annotation(obj: Mapping[str, Any], key: str) -> str | None:
    """One string-valued annotation (None when absent or not a string), without copying the rest:
    what hot paths read of a pod or node carrying many annotations."""
    value = as_mapping(metadata(obj).get("annotations")).get(key)
    return value if isinstance(value, str) else None


def labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """String-valued labels; other values are dropped."""
    raw = as_mapping(metadata(obj).get("labels"))
    return {k: v for k, v in raw.items() if isinstance(k, str) and isinstance(v, str)}


# --- spec and status ----------------------------------------------------------------------------


def spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(obj.get("spec"))


def status(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(obj.get("status"))


def node_name(pod: Mapping[str, Any]) -> str:
    """`spec.nodeName`: the node a pod is bound to, "" while unbound."""
    return _str(spec(pod).get("nodeName"))


def phase(pod: Mapping[str, Any]) -> str:
    """`status.phase`, "" when absent (callers decide what an absent phase means)."""
    return _str(status(pod).get("phase"))


def containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """`spec.containers` entries that are objects; other entries take no position."""
    return [c for c in as_list(spec(pod).get("containers")) if isinstance(c, Mapping)]


def init_containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """`spec.initContainers` entries that are objects; other entries take no position."""
    return [c for c in as_list(spec(pod).get("initContainers")) if isinstance(c, Mapping)]


def init_container_count(pod: Mapping[str, Any]) -> int:
    """How many leading entries of a per-container list belong to init containers.

    The one definition shared by requests, fit, quota, the ledger and the webhook: it counts exactly
    the containers `engine.requests.pod_requests` yields an entry for, so index `i < count` means
    "init container" everywhere.
    """
    return len(init_containers(pod))
