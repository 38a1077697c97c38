"""Rendering charts/vgpu-scheduler with the pinned Helm that scripts/helm-build builds, for the unit
tier (tests/deploy/test_chart.py) and the e2e tier (tests/e2e/test_deploy.py).

`find_helm()` returns the binary or raises HelmUnavailable with one line saying why (the tests then
skip). The Helm version is read from scripts/helm-build, so the script stays the one place it is
written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "vgpu-scheduler"
HELM_BUILD = REPO / "scripts" / "helm-build"
KUBE_VERSION = "v1.36.3"  # the e2e tier's kube-apiserver (scripts/control-plane-build)
Obj = dict[str, Any]


CUSTOM_NAMES = {
    "resourceName": "example.com/vgpu", "resourceMem": "example.com/vgpu-mem",
    "resourceMemPercentage": "example.com/vgpu-mem-pct", "resourceCores": "example.com/vgpu-cores",
    "resourcePriority": "example.com/vgpu-priority",
    "mluResourceName": "example.com/mlu", "mluResourceMem": "example.com/mlu-mem",
    "mluResourceCores": "example.com/mlu-cores",
    "dcuResourceName": "example.com/dcu", "dcuResourceMem": "example.com/dcu-mem",
    "dcuResourceCores": "example.com/dcu-cores",
    "metaxResourceName": "example.com/sgpu", "metaxResourceCore": "example.com/sgpu-core",
    "metaxResourceMem": "example.com/sgpu-mem",
    "enflameResourceNameDRSGCU": "example.com/drs", "enflameResourceNameGCUMemory": "example.com/drs-mem",
    "enflameResourceNameGCUCore": "example.com/drs-core",
    "kunlunResourceName": "example.com/xpu", "kunlunResourceVCountName": "example.com/vxpu",
    "kunlunResourceVMemoryName": "example.com/vxpu-mem",
    "vastaiResourceName": "example.com/va", "birenResourceName": "example.com/br",
    "schedulerName": "example-scheduler",
}
# The scheduler part of HAMi's own default values (charts/hami/values.yaml v2.10.0) that differs from
# ours, as a HAMi user's values file would carry it: it must render and start our extender.
HAMI_VALUES: Obj = {
    "scheduler": {
        "kubeScheduler": {"extraNewArgs": ["--config=/config/config.yaml", "-v=4"],
                          "extraArgs": ["--policy-config-file=/config/config.json", "-v=4"]},
        "extender": {"extraArgs": ["--debug", "-v=4"]},
        "livenessProbe": False,
        "service": {"type": "NodePort", "httpPort": 443, "schedulerPort": 31998, "monitorPort": 31993,
                    "monitorTargetPort": 9395, "httpTargetPort": 443},
        "admissionWebhook": {"whitelistNamespaces": ["kube-system"], "reinvocationPolicy": "Never",
                             "failurePolicy": "Ignore"},
    },
    "devices": {"kunlun": {"enabled": True, "customresources": ["kunlunxin.com/xpu"]},
                "ascend": {"enabled": False, "customresources": ["huawei.com/Ascend910A"]}},
    "podSecurityPolicy": {"enabled": False},
    "prometheus": {"enabled": False},
}
# id: (values, release, namespace)
VALUE_SETS: dict[str, tuple[Obj, str, str]] = {
    "defaults": ({}, "vgpu-scheduler", "vgpu-scheduler"),
    "cert-manager": ({"scheduler": {"certManager": {"enabled": True}}}, "vgpu-scheduler", "vgpu-scheduler"),
    "two-replicas": ({"scheduler": {"replicas": 2}}, "vgpu-scheduler", "vgpu-scheduler"),
    "ascend-iluvatar": ({"devices": {"ascend": {"enabled": True}, "iluvatar": {"enabled": True}}},
                        "vgpu-scheduler", "vgpu-scheduler"),
    "resource-names": (CUSTOM_NAMES, "vgpu-scheduler", "vgpu-scheduler"),
    "namespace": ({}, "hami", "gpu-system"),
    "no-webhook": ({"scheduler": {"admissionWebhook": {"enabled": False}}}, "vgpu-scheduler", "kube-system"),
    "own-secret": ({"scheduler": {"patch": {"enabled": False}, "service": {"httpTargetPort": 8443}}},
                   "vgpu-scheduler", "vgpu-scheduler"),
    "hami-values": (HAMI_VALUES, "hami", "hami-system"),
}


def render_set(name: str) -> list[Obj]:
    values, release, ns = VALUE_SETS[name]
    return render(values, release=release, namespace=ns)


class HelmUnavailable(RuntimeError):
    pass


def helm_version() -> str:
    found = re.search(r"^HELM_VERSION=(v\S+)", HELM_BUILD.read_text(), re.MULTILINE)
    assert found, "scripts/helm-build names no HELM_VERSION"
    return found.group(1)


def find_helm() -> Path:
    version = helm_version()
    root = os.environ.get("VGPU_KUBE_CACHE") or str(Path.home() / ".cache" / "vgpu-scheduler")
    cache = Path(root) / f"helm-{version}"
    helm = cache / "bin" / "helm"
    stamp = cache / "stamp"
    built = stamp.is_file() and stamp.read_text().strip() == f"helm={version}"
    if not os.access(helm, os.X_OK) or not built:
        why = "not built yet, or the build failed"
        if shutil.which("go") is None:
            why = "no Go toolchain on PATH"
        raise HelmUnavailable(f"chart tests skipped: Helm {version} missing in {helm.parent} ({why}); "
                              "run scripts/helm-build")
    return helm


def helm(*args: str) -> str:
    out = subprocess.run([str(find_helm()), *args], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
    return out.stdout


def _with_values(values: Obj, args: list[str]) -> list[str]:
    fd, path = tempfile.mkstemp(suffix=".json", prefix="values-")  # JSON is YAML
    with os.fdopen(fd, "w") as f:
        json.dump(values, f)
    return [*args, "-f", path]


def render(values: Obj | None = None, *, release: str = "vgpu-scheduler", namespace: str = "vgpu-scheduler",
           kube_version: str = KUBE_VERSION, extra: tuple[str, ...] = ()) -> list[Obj]:
    """`helm template` of the chart with these values (and `extra` arguments such as `--set`): the
    objects, in Helm's order."""
    args = _with_values(values or {}, ["template", release, str(CHART), "--namespace", namespace,
                                       "--kube-version", kube_version, *extra])
    try:
        text = helm(*args)
    finally:
        os.unlink(args[-1])
    return [d for d in yaml.safe_load_all(text) if d]


def lint(values: Obj | None = None) -> str:
    args = _with_values(values or {}, ["lint", "--strict", str(CHART)])
    try:
        return helm(*args)
    finally:
        os.unlink(args[-1])


def render_error(values: Obj) -> str:
    """The error of a render expected to fail (a `fail` in a template)."""
    args = _with_values(values, ["template", "x", str(CHART), "--kube-version", KUBE_VERSION])
    try:
        out = subprocess.run([str(find_helm()), *args], capture_output=True, text=True, timeout=120)
    finally:
        os.unlink(args[-1])
    assert out.returncode != 0, "the render did not fail"
    return out.stderr
