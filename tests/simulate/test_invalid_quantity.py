"""`simulate` with pods whose device quantity does not parse: the run ends, the pods stay pending
and the report says which quantity, in their reasons and (with --explain) their explanation."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from vgpu_scheduler.standin.embedded.fleet import fleet

PODS = """\
apiVersion: v1
kind: Pod
metadata: {name: gpumem, namespace: default}
spec:
  containers:
  - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: "12Gx"}}}
---
apiVersion: v1
kind: Pod
metadata: {name: gpu, namespace: default}
spec:
  containers:
  - {name: c, image: x, resources: {limits: {nvidia.com/gpu: "abc"}}}
---
apiVersion: v1
kind: Pod
metadata: {name: cores, namespace: default}
spec:
  initContainers:
  - {name: i, image: x, resources: {limits: {nvidia.com/gpu: 1}, requests: {nvidia.com/gpucores: "1.5.3"}}}
  containers:
  - {name: c, image: x}
---
apiVersion: v1
kind: Pod
metadata: {name: good, namespace: default}
spec:
  containers:
  - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 2048}}}
"""

NAMED = {
    "gpumem": (
        "container 'c': limits: nvidia.com/gpumem:", 'container c: invalid quantity nvidia.com/gpumem="12Gx"'
    ),
    "gpu": ("container 'c': limits: nvidia.com/gpu:", 'container c: invalid quantity nvidia.com/gpu="abc"'),
    "cores": (
        "init container 'i': requests: nvidia.com/gpucores:",
        'init container i: invalid quantity nvidia.com/gpucores="1.5.3"',
    ),
}


def test_pending_with_the_quantity_named_and_the_run_ends(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": fleet(2, 2)}))
    pods = tmp_path / "pods.yaml"
    pods.write_text(PODS)
    out = tmp_path / "r.json"
    args = ["simulate", "--snapshot", str(snap), "--pods", str(pods), "--explain", "--output", str(out)]
    # A process with a timeout: were a refused pod retried forever, the test fails instead of hanging.
    command = [sys.executable, "-m", "vgpu_scheduler", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    report = {p["name"]: p for p in json.loads(out.read_text())["pods"]}
    assert report["good"]["node"] is not None
    for name, (reason, explained) in NAMED.items():
        pod = report[name]
        assert pod["node"] is None
        # kube-scheduler's resource fit refuses the pod on every node before the extender is asked
        # (a real kube-scheduler never meets one: the API server refuses it); the text names it.
        expected = f"invalid resources: {reason} quantities must match"
        assert pod["reasons"] and all(r.startswith(expected) for r in pod["reasons"].values()), pod["reasons"]
        assert pod["explain"]["error"].startswith(f"pod default/{name}: {explained} in ")
