"""Iluvatar and Biren end to end through `vgpu-scheduler simulate`: a snapshot with one node of
each, the chart's sections verbatim in --device-config-file, the pods' annotations and placement
in the report; Iluvatar only with --enable-iluvatar."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vgpu_scheduler.cli import main as root_main

# The chart's device-configmap.yaml sections (v2.10.0), verbatim.
CHART_SECTIONS = """\
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceMemoryPercentageName: nvidia.com/gpumem-percentage
  resourceCoreName: nvidia.com/gpucores
iluvatars:
- chipName: MR-V100
  commonWord: MR-V100
  resourceCountName: iluvatar.ai/MR-V100-vgpu
  resourceMemoryName: iluvatar.ai/MR-V100.vMem
  resourceCoreName: iluvatar.ai/MR-V100.vCore
- chipName: MR-V50
  commonWord: MR-V50
  resourceCountName: iluvatar.ai/MR-V50-vgpu
  resourceMemoryName: iluvatar.ai/MR-V50.vMem
  resourceCoreName: iluvatar.ai/MR-V50.vCore
- chipName: BI-V150
  commonWord: BI-V150
  resourceCountName: iluvatar.ai/BI-V150-vgpu
  resourceMemoryName: iluvatar.ai/BI-V150.vMem
  resourceCoreName: iluvatar.ai/BI-V150.vCore
- chipName: BI-V100
  commonWord: BI-V100
  resourceCountName: iluvatar.ai/BI-V100-vgpu
  resourceMemoryName: iluvatar.ai/BI-V100.vMem
  resourceCoreName: iluvatar.ai/BI-V100.vCore
biren:
  resourceCountName: birentech.com/gpu
"""

ILU_REGISTER = "ILU-0,4,32768,100,BI-V150,0,true,0,hami-core:ILU-1,4,32768,100,BI-V150,0,true,1,hami-core:"
BR_REGISTER = json.dumps([{"id": f"BR-{i}", "count": 1, "devmem": 65536, "type": "Biren", "health": True,
                           "index": i} for i in range(2)])


def node(name: str, annotations: dict[str, str], resource: str, count: str) -> dict[str, Any]:
    res = {"cpu": "32", "memory": "128Gi", "pods": "110", resource: count}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "annotations": annotations},
            "status": {"capacity": res, "allocatable": res}}


def pod(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"containers": [{"name": "app", "image": "x", "resources": {"limits": limits}}]}}


def write_inputs(tmp_path: Path, config: str = CHART_SECTIONS) -> list[str]:
    snap, pods, dc = tmp_path / "snap.json", tmp_path / "pods.json", tmp_path / "dc.yaml"
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        node("ilu-node", {"hami.io/node-BI-V150-register": ILU_REGISTER}, "iluvatar.ai/BI-V150-vgpu", "8"),
        node("br-node", {"hami.io/node-biren-register": BR_REGISTER}, "birentech.com/gpu", "2"),
    ]}))
    pods.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        pod("ilu", {"iluvatar.ai/BI-V150-vgpu": "1", "iluvatar.ai/BI-V150.vMem": "16",
                    "iluvatar.ai/BI-V150.vCore": "50"}),
        pod("br", {"birentech.com/gpu": "2"}),
        pod("br2", {"birentech.com/gpu": "1"}),
    ]}))
    dc.write_text(config)
    return ["simulate", "--snapshot", str(snap), "--pods", str(pods), "--device-config-file", str(dc)]


def run(tmp_path: Path, args: list[str]) -> dict[str, dict[str, Any]]:
    out = tmp_path / "r.json"
    assert root_main([*args, "--output", str(out)]) == 0
    return {p["name"]: p for p in json.loads(out.read_text())["pods"]}


@pytest.mark.parametrize("flag", ["--enable-iluvatar", "--enable-iluvatar=true"])
def test_iluvatar_and_biren_pods_get_their_devices(tmp_path: Path, flag: str) -> None:
    pods = run(tmp_path, [*write_inputs(tmp_path), flag])
    ilu, br, br2 = pods["ilu"], pods["br"], pods["br2"]
    assert ilu["node"] == "ilu-node"
    # 16 units of 256 MiB; spread takes the last device; the device plugin consumed the to-allocate list.
    assert {k: v for k, v in ilu["annotations"].items() if "BI-V150" in k} == {
        "hami.io/BI-V150-devices-allocated": "ILU-1,BI-V150,4096,50:;",
        "hami.io/BI-V150-devices-to-allocate": ";",
    }
    assert ilu["annotations"]["hami.io/vgpu-node"] == "ilu-node"
    assert ilu["annotations"]["hami.io/bind-phase"] == "success"
    assert br["node"] == "br-node"
    assert br["annotations"]["hami.io/Biren-devices-allocated"] == "BR-1,Biren,0,0:BR-0,Biren,0,0:;"
    assert br["annotations"]["hami.io/Biren-devices-to-allocate"] == ";"
    assert br["annotations"]["hami.io/bind-phase"] == "success"
    # Both Biren devices are taken whole (count 1 each).
    assert br2["node"] is None
    assert br2["reasons"] == {"br-node": "2/2 CardTimeSlicingExhausted", "ilu-node": "NodeInsufficientDevice"}


def test_the_packaged_chart_config_works_too(tmp_path: Path) -> None:
    args = write_inputs(tmp_path)
    pods = run(tmp_path, [*args[:-2], "--enable-iluvatar"])  # no --device-config-file
    assert pods["ilu"]["annotations"]["hami.io/BI-V150-devices-allocated"] == "ILU-1,BI-V150,4096,50:;"
    assert pods["br"]["node"] == "br-node"


def test_without_the_flag_iluvatar_pods_are_not_ours(tmp_path: Path) -> None:
    """The iluvatars section does not register: kube-scheduler alone judges the pod (the node has
    no vMem/vCore capacity), and the webhook-less simulation writes no annotation."""
    pods = run(tmp_path, write_inputs(tmp_path))
    assert pods["ilu"]["node"] is None and pods["ilu"]["annotations"] == {}
    assert "Insufficient iluvatar.ai/BI-V150.vMem" in pods["ilu"]["reasons"]["ilu-node"]
    assert pods["br"]["node"] == "br-node"
    assert pods["br2"]["reasons"]["ilu-node"] == "node unregistered"


def test_a_bad_iluvatars_entry_stops_only_with_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = "nvidia: {resourceCountName: nvidia.com/gpu}\niluvatars:\n- {commonWord: 5}\n"
    args = write_inputs(tmp_path, bad)
    assert root_main([*args, "--enable-iluvatar", "--output", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err
    assert "failed to initialize devices: iluvatars.0.commonWord: expected a string" in err
    assert not (tmp_path / "r.json").exists()
    assert root_main([*args, "--output", str(tmp_path / "r.json")]) == 0
