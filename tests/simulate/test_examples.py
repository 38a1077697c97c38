"""The fleets under examples/ run through `vgpu-scheduler simulate` with the exact command of their
README, and the report keeps every vendor's rules:

* every scheduled pod sits on a node whose device plugins registered each vendor it asks for;
* its allocation annotations are those of the vendors it asks for (and no other's), one entry per
  device asked, each naming a device of that vendor on that node; the device plugin consumed them;
* no device is over-committed: the entries of every pod, summed per device, stay within the
  device's inventory (split count, memory, cores) and are what the report says the device uses;
* the pods written not to fit stay pending, with the reasons the README shows.

The vendor facts below (resource and annotation names, inventory formats) are written out here
rather than taken from the scheduler, so that the test checks the scheduler against them.
"""

from __future__ import annotations

import functools
import json
import shlex
import tempfile
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from vgpu_scheduler.cli import main as root_main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

Node = Mapping[str, Any]


# --------------------------------------------------------------------------------------------
# What each vendor's device plugin registers and what the scheduler writes for it


def _annotation(node: Node, key: str) -> str | None:
    value = (node["metadata"].get("annotations") or {}).get(key)
    return value if isinstance(value, str) else None


def json_ids(key: str, field: str = "id") -> Callable[[Node], list[str]]:
    """Device ids of a JSON inventory annotation (NVIDIA, AMD, Ascend, Metax sGPU)."""

    def ids(node: Node) -> list[str]:
        value = _annotation(node, key)
        return [d[field] for d in json.loads(value)] if value else []

    return ids


def legacy_ids(key: str) -> Callable[[Node], list[str]]:
    """Device ids of a legacy `id,count,mem,cores,type,numa,health,index,mode:` annotation (Hygon,
    Iluvatar)."""

    def ids(node: Node) -> list[str]:
        value = _annotation(node, key)
        return [segment.split(",")[0] for segment in value.split(":") if segment] if value else []

    return ids


def capacity_ids(resource: str) -> Callable[[Node], list[str]]:
    """Metax whole GPUs: one device `<node>-metax-<i>` per unit of the count resource's capacity."""

    def ids(node: Node) -> list[str]:
        count = int(node["status"]["capacity"].get(resource, 0))
        return [f"{node['metadata']['name']}-metax-{i}" for i in range(count)]

    return ids


@dataclass(frozen=True)
class VendorFacts:
    name: str
    count: str
    """The count resource a container asks for."""
    allocation: str
    """`hami.io/<x>-devices-`: + `allocated` / `to-allocate`."""
    inventory: Callable[[Node], list[str]]
    runtime: str = ""
    """A vendor-specific annotation listing the chosen devices for the device plugin ("" = none)."""

    @property
    def allocated(self) -> str:
        return f"{self.allocation}allocated"

    @property
    def to_allocate(self) -> str:
        return f"{self.allocation}to-allocate"


def iluvatar(chip: str) -> VendorFacts:
    return VendorFacts(f"Iluvatar {chip}", f"iluvatar.ai/{chip}-vgpu", f"hami.io/{chip}-devices-",
                       legacy_ids(f"hami.io/node-{chip}-register"))


def ascend(chip: str) -> VendorFacts:
    return VendorFacts(f"Ascend {chip}", f"huawei.com/{chip}", f"hami.io/{chip}-devices-",
                       json_ids(f"hami.io/node-register-{chip}"), runtime=f"huawei.com/{chip}")


VENDORS = (
    VendorFacts("NVIDIA", "nvidia.com/gpu", "hami.io/vgpu-devices-",
                json_ids("hami.io/node-nvidia-register")),
    VendorFacts("Hygon DCU", "hygon.com/dcunum", "hami.io/dcu-devices-",
                legacy_ids("hami.io/node-dcu-register")),
    VendorFacts("AMD", "amd.com/gpu", "hami.io/amd-devices-", json_ids("hami.io/node-amd-register")),
    *(iluvatar(chip) for chip in ("MR-V100", "MR-V50", "BI-V150", "BI-V100")),
    *(ascend(chip) for chip in ("Ascend910A", "Ascend910B2", "Ascend910B3", "Ascend910B4-1", "Ascend910B4",
                                "Ascend310P", "Ascend910C")),
    VendorFacts("Metax GPU", "metax-tech.com/gpu", "hami.io/metax-gpu-devices-",
                capacity_ids("metax-tech.com/gpu")),
    VendorFacts("Metax sGPU", "metax-tech.com/sgpu", "hami.io/metax-sgpu-devices-",
                json_ids("metax-tech.com/node-gpu-devices", field="uuid"),
                runtime="metax-tech.com/gpu-devices-allocated"),
)
BY_COUNT = {v.count: v for v in VENDORS}


def runtime_uuids(vendor: VendorFacts, value: str) -> list[str]:
    """The device ids a vendor's runtime annotation names, in order."""
    parsed = json.loads(value)
    if vendor.runtime.startswith("huawei.com/"):  # [{"UUID": ...}, ...]
        return [d["UUID"] for d in parsed]
    return [d["uuid"] for container in parsed for d in container]  # Metax: [[{"uuid": ...}], ...]


# --------------------------------------------------------------------------------------------
# The examples


@dataclass(frozen=True)
class Example:
    directory: str
    pending: Mapping[str, Mapping[str, str]]
    """Pods that must stay pending -> some of their per-node reasons."""


EXAMPLE_CASES = [
    pytest.param(
        Example(
            "mixed-fleet",
            pending={
                "nv-t4-batch-7": {"nvidia-t4-0": "4/4 CardInsufficientMemory",
                                  "nvidia-t4-1": "4/4 CardInsufficientMemory"},
                "nv-too-big": {"nvidia-a100-0": "8/8 CardInsufficientMemory",
                               "nvidia-dcu-0": "4/4 CardInsufficientMemory"},
                "nv-h100-only": {"nvidia-a100-1": "8/8 CardTypeMismatch",
                                 "nvidia-t4-1": "4/4 CardTypeMismatch"},
                "dcu-nine": {"hygon-0": "NodeInsufficientDevice"},
                "amd-dcu-pipeline": {"amd-0": "NodeInsufficientDevice", "hygon-0": "NodeInsufficientDevice"},
                "ilu-bi-v100": {"iluvatar-0": "NodeInsufficientDevice"},
            },
        ),
        id="mixed-fleet",
    ),
    pytest.param(
        Example(
            "ascend-metax",
            pending={
                "npu-nine": {"ascend-910b3-0": "NodeInsufficientDevice"},
                "npu-soft-too-big": {"ascend-910b3-0": "1/8 ModeNotFit",
                                     "ascend-910b3-2": "8/8 CardInsufficientMemory",
                                     "ascend-metax-0": "1/4 ModeNotFit"},
                "metax-gpu-nine": {"metax-gpu-0": "NodeInsufficientDevice"},
                "npu-310p-metax-gpu": {"ascend-310p-0": "NodeInsufficientDevice",
                                       "metax-gpu-0": "NodeInsufficientDevice"},
            },
        ),
        id="ascend-metax",
    ),
]


def readme_command(directory: str) -> list[str]:
    """The one `vgpu-scheduler simulate ...` command line of the example's README."""
    lines = [line.strip() for line in (EXAMPLES / directory / "README.md").read_text().splitlines()
             if line.strip().startswith("vgpu-scheduler simulate ")]
    assert len(lines) == 1, lines
    return shlex.split(lines[0])


@functools.cache
def run_example(directory: str) -> dict[str, Any]:
    """The report of the README's command (run once per example; paths taken from the repository)."""
    argv = readme_command(directory)
    assert argv[:2] == ["vgpu-scheduler", "simulate"]
    for flag in ("--snapshot", "--pods"):
        at = argv.index(flag) + 1
        assert argv[at] == f"examples/{directory}/{flag[2:]}.yaml"
        argv[at] = str(ROOT / argv[at])
    at = argv.index("--output") + 1
    assert argv[at] == "report.json"
    with tempfile.TemporaryDirectory() as tmp:
        argv[at] = str(Path(tmp) / "report.json")
        assert root_main(argv[1:]) == 0
        report: dict[str, Any] = json.loads(Path(argv[at]).read_text())
    return report


def load_nodes(directory: str) -> dict[str, Node]:
    docs = yaml.safe_load_all((EXAMPLES / directory / "snapshot.yaml").read_text())
    return {d["metadata"]["name"]: d for d in docs if d and d.get("kind") == "Node"}


def load_pods(directory: str) -> dict[str, Node]:
    docs = yaml.safe_load_all((EXAMPLES / directory / "pods.yaml").read_text())
    return {d["metadata"]["name"]: d for d in docs if d and d.get("kind") == "Pod"}


def asked(container: Mapping[str, Any]) -> dict[VendorFacts, int]:
    """The vendors a container asks for, with the number of devices."""
    resources = container.get("resources") or {}
    limits = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    return {BY_COUNT[name]: int(value) for name, value in limits.items() if name in BY_COUNT}


def entries(value: str) -> list[list[tuple[str, int, int]]]:
    """An allocation annotation (§4.5) as per-container lists of (uuid, memory MiB, cores)."""
    containers = value.split(";")
    assert containers[-1] == "", value  # every container, the last one too, ends with ';'
    out = []
    for text in containers[:-1]:
        devices = []
        for device in (d for d in text.split(":") if d):
            uuid, _type, mem, cores = device.split(",")
            devices.append((uuid, int(mem), int(cores)))
        out.append(devices)
    return out


@pytest.mark.parametrize("example", EXAMPLE_CASES)
def test_example_places_every_pod_by_its_vendors_rules(example: Example) -> None:
    report = run_example(example.directory)
    nodes = load_nodes(example.directory)
    pods = load_pods(example.directory)
    inventory = {(v, name): v.inventory(node) for v in VENDORS for name, node in nodes.items()}
    owner = {uuid: (v, name) for (v, name), ids in inventory.items() for uuid in ids}
    assert len(owner) == sum(len(ids) for ids in inventory.values())  # device ids are unique

    outcome = {p["name"]: p for p in report["pods"]}
    assert list(outcome) == list(pods)  # every pod of the file, in order
    assert {n for n, p in outcome.items() if p["node"] is None} == set(example.pending)

    usage: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # uuid -> used, memory, cores
    for name, result in outcome.items():
        containers = pods[name]["spec"]["containers"]
        wanted = [asked(c) for c in containers]
        vendors = {v for per in wanted for v in per}
        assert vendors, f"{name} asks for no device"
        annotations = result["annotations"]
        ours = {k for k in annotations if k.startswith("hami.io/") and k.endswith("-devices-allocated")}
        if result["node"] is None:
            assert not ours, name
            expected = example.pending[name]
            assert {n: result["reasons"].get(n) for n in expected} == expected, name
            continue
        node = result["node"]
        assert annotations["hami.io/vgpu-node"] == node
        assert annotations["hami.io/bind-phase"] == "success"
        # Only the annotations of the vendors the pod asks for.
        assert ours == {v.allocated for v in vendors}, name
        for vendor in vendors:
            assert inventory[vendor, node], f"{name} on {node}: no {vendor.name} device there"
            per_container = entries(annotations[vendor.allocated])
            assert len(per_container) == len(containers), name
            for container_devices, container_wants in zip(per_container, wanted, strict=True):
                assert len(container_devices) == container_wants.get(vendor, 0), name
                assert len({uuid for uuid, _, _ in container_devices}) == len(container_devices), name
                for uuid, mem, cores in container_devices:
                    assert owner[uuid] == (vendor, node), f"{name}: {uuid}: not {vendor.name} on {node}"
                    row = usage[uuid]
                    row[0] += 1
                    row[1] += mem
                    row[2] += cores
            # The simulated device plugin consumed the allocation.
            assert set(annotations[vendor.to_allocate]) == {";"}, name
            chosen = [uuid for devices in per_container for uuid, _, _ in devices]
            if vendor.runtime:
                assert sorted(runtime_uuids(vendor, annotations[vendor.runtime])) == sorted(chosen), name

    # No device over-committed, and the report's usage is exactly the pods' allocations.
    devices = report["devices"]
    assert sorted(d["uuid"] for d in devices) == sorted(owner)  # every registered device, once
    for device in devices:
        used, mem, cores = usage.get(device["uuid"], [0, 0, 0])
        assert owner[device["uuid"]][1] == device["node"]
        assert (device["used"], device["usedmem"], device["usedcores"]) == (used, mem, cores), device
        assert used <= device["count"] and mem <= device["devmem"] and cores <= device["devcore"], device


@pytest.mark.parametrize("example", EXAMPLE_CASES)
def test_every_vendor_of_the_example_places_a_pod(example: Example) -> None:
    """The example exercises each vendor its nodes register: at least one pod lands on each."""
    report = run_example(example.directory)
    nodes = load_nodes(example.directory)
    registered = {v for v in VENDORS for node in nodes.values() if v.inventory(node)}
    placed = {v for p in report["pods"] if p["node"] for v in VENDORS if v.allocated in p["annotations"]}
    assert placed == registered
