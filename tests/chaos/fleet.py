"""The chaos fleet: NVIDIA nodes and every fifth node a Hygon DCU node, each registered the way its
device plugin does it (inventory annotation, handshake, allocatable), in the chaos group.

`variant` changes a node's inventory when the nemesis re-registers it: variant 0 is the full node
(`gpus` devices), variant 1 has half the devices with half the memory, variant 2 the full count
again with 3/4 of the memory.
"""

from __future__ import annotations

from datetime import datetime

from pluginstandin import GROUP_LABEL, Obj, gpu_node

GROUP = "chaos"
NVIDIA_MEM, DCU_MEM = 81920, 32768  # MiB per device
DCU_REGISTER = "hami.io/node-dcu-register"
DCU_HANDSHAKE = "hami.io/node-handshake-dcu"
BASE = {"cpu": "256", "memory": "1Ti", "pods": "500"}


def node_name(i: int) -> str:
    return f"{GROUP}-{i:03d}"


def is_dcu(name: str) -> bool:
    return int(name.rsplit("-", 1)[1]) % 5 == 4


def shape_of(gpus: int, variant: int) -> tuple[int, float]:
    """(devices, memory factor) of an inventory variant."""
    return {0: (gpus, 1.0), 1: (max(1, gpus // 2), 0.5), 2: (gpus, 0.75)}[variant % 3]


def node_objects(name: str, *, gpus: int, variant: int = 0) -> tuple[Obj, Obj]:
    """The Node to create and its status patch."""
    count, factor = shape_of(gpus, variant)
    if is_dcu(name):
        return _dcu_node(name, count, int(DCU_MEM * factor))
    node, status = gpu_node(name, gpus=count, devmem=int(NVIDIA_MEM * factor))
    node["metadata"]["labels"][GROUP_LABEL] = GROUP
    return node, status


def _dcu_node(name: str, count: int, devmem: int) -> tuple[Obj, Obj]:
    # The legacy comma form `id,count,devmem,devcore,type,numa,health,index,mode:` (§3.2).
    register = "".join(f"DCU-{name}-{i},4,{devmem},100,DCU-Z100,0,true,{i},hami-core:" for i in range(count))
    stamp = "Reported " + datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    node = {"apiVersion": "v1", "kind": "Node", "spec": {}, "metadata": {
        "name": name,
        "labels": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": name, GROUP_LABEL: GROUP},
        "annotations": {DCU_REGISTER: register, DCU_HANDSHAKE: stamp},
    }}
    resources = {**BASE, "hygon.com/dcunum": str(count * 4)}
    return node, {"status": {"capacity": resources, "allocatable": resources}}
