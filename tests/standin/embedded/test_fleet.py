import json
from typing import Any

import pytest

from tests.fixtures import KUBE_1_36
from vgpu_scheduler.simulate.predicates import NodeInfo
from vgpu_scheduler.standin.embedded.fleet import (
    A100_80GB,
    V100_32GB,
    demo_fleet,
    demo_gpu_uuids,
    fleet,
    gpu_uuid,
)
from vgpu_scheduler.wire.inventory import decode_node_devices
from vgpu_scheduler.wire.keys import NODE_HANDSHAKE, NODE_NVIDIA_REGISTER
from vgpu_scheduler.wire.quantity import quantity_units

FIXTURE = KUBE_1_36 / "node" / "node.hami-registered.kubectl.json"


def test_demo_fleet_layout() -> None:
    nodes = demo_fleet()
    assert len(nodes) == 16
    names = [n["metadata"]["name"] for n in nodes]
    assert names == sorted(names) == [f"gpu-node-{i:02d}" for i in range(16)]
    all_ids: list[str] = []
    for i, node in enumerate(nodes):
        devices = decode_node_devices(node["metadata"]["annotations"][NODE_NVIDIA_REGISTER])
        model = A100_80GB if i < 8 else V100_32GB
        assert [d.index for d in devices] == list(range(8))
        assert [d.numa for d in devices] == [0, 0, 0, 0, 1, 1, 1, 1]
        assert {(d.type, d.devmem, d.count, d.devcore, d.mode, d.health) for d in devices} == {
            (model.type, model.devmem, 10, 100, "hami-core", True)
        }
        assert all(d.id.startswith("GPU-") for d in devices)
        all_ids += [d.id for d in devices]
        status = node["status"]
        assert status["capacity"]["nvidia.com/gpu"] == status["allocatable"]["nvidia.com/gpu"] == "80"
        assert node["metadata"]["annotations"][NODE_HANDSHAKE].startswith("Requesting_2026-01-01 ")
        assert node["metadata"]["labels"]["kubernetes.io/hostname"] == node["metadata"]["name"]
        assert node["metadata"]["labels"]["gpu"] == "on"
    assert len(set(all_ids)) == 128
    assert all_ids == demo_gpu_uuids()


def _key_paths(obj: Any, prefix: str = "") -> set[str]:
    if not isinstance(obj, dict):
        return set()
    out = set()
    for k, v in obj.items():
        out.add(prefix + k)
        if k not in ("annotations", "labels", "capacity", "allocatable"):
            out |= _key_paths(v, prefix + k + ".")
    return out


def test_nodes_are_shaped_like_a_real_registered_node() -> None:
    real = json.loads(FIXTURE.read_text())
    ours = demo_fleet()[0]
    missing = _key_paths(real) - _key_paths(ours) - {"metadata.managedFields"}
    assert not missing
    assert set(real["status"]["allocatable"]) <= set(ours["status"]["allocatable"])
    assert json.loads(json.dumps(ours)) == ours  # plain JSON data only


def test_allocatable_parses_and_is_below_capacity() -> None:
    for node in demo_fleet():
        info = NodeInfo(node)
        assert info.invalid_allocatable == ()
        for resource in ("cpu", "memory", "ephemeral-storage"):
            assert (
                0
                < info.allocatable[resource]
                < quantity_units(resource, node["status"]["capacity"][resource])
            )


def test_fleet_is_deterministic_and_parametrised() -> None:
    assert fleet(3, 2) == fleet(3, 2)
    nodes = fleet(5, 1, models=(V100_32GB,), split_count=4, name_prefix="bench")
    assert [n["metadata"]["name"] for n in nodes] == [f"bench-{i:02d}" for i in range(5)]
    devices = decode_node_devices(nodes[0]["metadata"]["annotations"][NODE_NVIDIA_REGISTER])
    assert [(d.numa, d.count, d.type) for d in devices] == [(0, 4, V100_32GB.type)]
    assert nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "4"


def test_benchmark_scale_fleet() -> None:
    nodes = fleet(1000, 8)
    assert len(nodes) == 1000
    assert nodes[0]["metadata"]["name"] == "gpu-node-000"
    assert nodes[-1]["metadata"]["name"] == "gpu-node-999"
    assert len({n["metadata"]["uid"] for n in nodes}) == 1000
    last = decode_node_devices(nodes[-1]["metadata"]["annotations"][NODE_NVIDIA_REGISTER])
    assert last[7].id == gpu_uuid("gpu-node-999", 7)
    assert last[0].type == V100_32GB.type


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"n_nodes": -1}, "n_nodes", id="negative nodes"),
        pytest.param({"n_nodes": 1, "gpus_per_node": 0}, "gpus_per_node", id="zero GPUs per node"),
        pytest.param({"n_nodes": 1, "models": ()}, "models", id="no models"),
        pytest.param({"n_nodes": 1, "split_count": 0}, "split_count", id="zero split count"),
    ],
)
def test_bad_parameters(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fleet(**kwargs)
