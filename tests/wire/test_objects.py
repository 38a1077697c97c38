"""The object accessors never raise and read malformed fields as absent; one init-container count."""

from collections.abc import Callable, Mapping
from typing import Any

import pytest

from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine import podinfo, requests
from vgpu_scheduler.wire import objects

Accessor = Callable[[Mapping[str, Any]], object]

def annotation_a(obj: Mapping[str, Any]) -> str | None:
    return objects.annotation(obj, "a")


# (id, object, accessor, expected): malformed shapes next to the well-formed one.
CASES: list[tuple[str, Mapping[str, Any], Accessor, object]] = [
    ("name", {"metadata": {"name": "p"}}, objects.name, "p"),
    ("name-missing-metadata", {}, objects.name, ""),
    ("name-metadata-list", {"metadata": ["name"]}, objects.name, ""),
    ("name-metadata-null", {"metadata": None}, objects.name, ""),
    ("name-not-string", {"metadata": {"name": 5}}, objects.name, ""),
    ("namespace", {"metadata": {"namespace": "ns"}}, objects.namespace, "ns"),
    ("namespace-metadata-string", {"metadata": "x"}, objects.namespace, ""),
    ("uid", {"metadata": {"uid": "u1"}}, objects.uid, "u1"),
    ("uid-null", {"metadata": {"uid": None}}, objects.uid, ""),
    ("resource-version", {"metadata": {"resourceVersion": "7"}}, objects.resource_version, "7"),
    ("resource-version-int", {"metadata": {"resourceVersion": 7}}, objects.resource_version, ""),
    ("annotations", {"metadata": {"annotations": {"a": "1"}}}, objects.annotations, {"a": "1"}),
    ("annotations-non-string-values-dropped", {"metadata": {"annotations": {"a": 1, "b": "2", "c": None}}},
     objects.annotations, {"b": "2"}),
    ("annotations-list", {"metadata": {"annotations": ["a"]}}, objects.annotations, {}),
    ("annotation", {"metadata": {"annotations": {"a": "1"}}}, annotation_a, "1"),
    ("annotation-absent", {"metadata": {"annotations": {"b": "1"}}}, annotation_a, None),
    ("annotation-not-string", {"metadata": {"annotations": {"a": 1}}}, annotation_a, None),
    ("annotation-annotations-list", {"metadata": {"annotations": ["a"]}}, annotation_a, None),
    ("annotation-metadata-null", {"metadata": None}, annotation_a, None),
    ("labels", {"metadata": {"labels": {"l": "v"}}}, objects.labels, {"l": "v"}),
    ("labels-non-string-values-dropped", {"metadata": {"labels": {"l": True}}}, objects.labels, {}),
    ("labels-metadata-int", {"metadata": 3}, objects.labels, {}),
    ("spec-list", {"spec": []}, objects.spec, {}),
    ("status-string", {"status": "Running"}, objects.status, {}),
    ("node-name", {"spec": {"nodeName": "n1"}}, objects.node_name, "n1"),
    ("node-name-spec-null", {"spec": None}, objects.node_name, ""),
    ("node-name-int", {"spec": {"nodeName": 1}}, objects.node_name, ""),
    ("phase", {"status": {"phase": "Running"}}, objects.phase, "Running"),
    ("phase-missing", {"status": {}}, objects.phase, ""),
    ("phase-status-list", {"status": ["Running"]}, objects.phase, ""),
    ("containers", {"spec": {"containers": [{"name": "a"}]}}, objects.containers, [{"name": "a"}]),
    ("containers-non-objects-skipped", {"spec": {"containers": [{"name": "a"}, "b", None, 3]}},
     objects.containers, [{"name": "a"}]),
    ("containers-dict", {"spec": {"containers": {"name": "a"}}}, objects.containers, []),
    ("init-containers-string", {"spec": {"initContainers": "abc"}}, objects.init_containers, []),
    ("init-count", {"spec": {"initContainers": [{}, {}]}}, objects.init_container_count, 2),
    ("init-count-non-objects", {"spec": {"initContainers": [{}, "x", None, []]}},
     objects.init_container_count, 1),
    ("init-count-null", {"spec": {"initContainers": None}}, objects.init_container_count, 0),
    ("init-count-spec-string", {"spec": "x"}, objects.init_container_count, 0),
]


@pytest.mark.parametrize(("obj", "accessor", "expected"), [pytest.param(*c[1:], id=c[0]) for c in CASES])
def test_accessor_on_well_formed_and_malformed_objects(
    obj: Mapping[str, Any], accessor: Accessor, expected: object
) -> None:
    assert accessor(obj) == expected


MALFORMED: list[Any] = [None, 1, "x", [], [1], {"a": 1}, True]


@pytest.mark.parametrize("value", MALFORMED, ids=repr)
@pytest.mark.parametrize("field", ["metadata", "spec", "status"])
def test_no_accessor_raises_on_a_malformed_field(field: str, value: Any) -> None:
    obj = {field: value}
    assert objects.annotation(obj, "a") is None
    for accessor in (objects.name, objects.namespace, objects.uid, objects.resource_version,
                     objects.annotations, objects.labels, objects.node_name, objects.phase,
                     objects.containers, objects.init_containers, objects.init_container_count):
        accessor(obj)


def test_one_init_container_count_everywhere() -> None:
    """Quota (fed by the webhook and the fit), requests, the webhook and the ledger share one count."""
    from vgpu_scheduler.engine import fit
    from vgpu_scheduler.server import webhook

    assert requests.init_container_count is objects.init_container_count
    assert podinfo.init_container_count is objects.init_container_count
    assert webhook.objects.init_container_count is objects.init_container_count
    # fit.pod_fit_context defaults n_init from the same function.
    pod = {"spec": {"initContainers": [{}, "junk", {"name": "b"}], "containers": [{}]}}
    assert fit.pod_fit_context(pod, vendors=build()).n_init == 2


@pytest.mark.parametrize(
    "init",
    [pytest.param([], id="none"), pytest.param([{}, "junk", None, {}], id="junk-between"),
     pytest.param("not-a-list", id="not-a-list"), pytest.param([1, 2], id="only-junk")],
)
def test_init_count_agrees_with_pod_requests(init: Any) -> None:
    """The count is the number of leading `pod_requests` entries that are init containers."""
    gpu = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    pod = {"spec": {"initContainers": init, "containers": [gpu, "junk", {}]}}
    reqs = requests.pod_requests(pod, build())
    n_init = objects.init_container_count(pod)
    assert len(reqs) == n_init + 2
    assert reqs[n_init]  # the first app container is the GPU one
