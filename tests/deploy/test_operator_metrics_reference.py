"""The operator metrics' references agree with what the server exposes: every metric a panel of
deploy/grafana/vgpu-scheduler-dashboard.json queries exists with the type the query needs (a
histogram's `_bucket`, a counter's `_total`) and every panel reads the data-source variable;
docs/metrics.md lists exactly the `vgpu_scheduler_*` families."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import trustme
from prometheus_client import CollectorRegistry

from tests.builders import device
from vgpu_scheduler.cluster.apistats import ApiStats
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.lockstats import NodeLockStats
from vgpu_scheduler.cluster.reflector import ReflectorStats
from vgpu_scheduler.config import DeviceConfig
from vgpu_scheduler.scheduler.extender import ExtenderStats
from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.scheduler.process import SchedulerProcess
from vgpu_scheduler.server.certmetrics import CertCollector
from vgpu_scheduler.server.metrics import exposition, metrics_registry
from vgpu_scheduler.server.opmetrics import OperatorCollector, OperatorSources
from vgpu_scheduler.server.tls import ReloadingCertificate
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "vgpu-scheduler-dashboard.json"
METRICS_DOC = ROOT / "docs" / "metrics.md"
METRIC = re.compile(r"\b(?:vgpu_scheduler|hami)_[a-z0-9_]+\b")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def exposed_families(tmp_path: Path) -> dict[str, str]:
    """Family name (as written on `# TYPE`) -> type, from a server with every source attached (TLS
    included: a pair written under `tmp_path`)."""
    client = KubeClient(MemoryTransport(MemoryCluster()))
    process = SchedulerProcess(SchedulerOptions(), DeviceConfig(), client, "host")
    process.state.set_node_devices("n1", [device("GPU-0")])  # HAMi's per-device families need one
    sources = OperatorSources(ExtenderStats(), ApiStats(), NodeLockStats(), [("pods", ReflectorStats())],
                              process.state)
    registry: CollectorRegistry = metrics_registry(process.state, extender_stats=sources.extender)
    registry.register(OperatorCollector(sources))
    leaf = trustme.CA().issue_cert("127.0.0.1")
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    leaf.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    cert = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    registry.register(CertCollector(cert))
    lines = exposition(registry).decode().splitlines()
    return {parts[2]: parts[3] for parts in (line.split() for line in lines if line.startswith("# TYPE "))}


def expressions(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            else:
                yield from expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item)


def test_every_queried_metric_is_exposed_with_the_type_the_query_needs(tmp_path: Path) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    families = exposed_families(tmp_path)
    queried = {name for expr in expressions(dashboard) for name in METRIC.findall(expr)}
    assert any(name.startswith("vgpu_scheduler_") for name in queried)
    missing = []
    for name in sorted(queried):
        base = next((name.removesuffix(s) for s in HISTOGRAM_SUFFIXES if name.endswith(s)), "")
        if families.get(name) in ("counter", "gauge") or families.get(base) == "histogram":
            continue
        missing.append(name)
    assert missing == []


def test_the_dashboard_uses_every_operator_family(tmp_path: Path) -> None:
    dashboard_text = DASHBOARD.read_text()
    ours = {name for name in exposed_families(tmp_path) if name.startswith("vgpu_scheduler_")}
    assert sorted(name for name in ours if name not in dashboard_text) == []


def test_every_panel_reads_the_data_source_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert (variables["datasource"]["type"], variables["datasource"]["query"]) == ("datasource", "prometheus")
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"] and all('instance=~"$instance"' in t["expr"] for t in panel["targets"])
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_metrics_doc_lists_exactly_the_operator_families(tmp_path: Path) -> None:
    rows = re.findall(r"^\| `(vgpu_scheduler_[a-z0-9_]+)` \|", METRICS_DOC.read_text(), re.MULTILINE)
    documented = set(rows)
    exposed = {name for name in exposed_families(tmp_path) if name.startswith("vgpu_scheduler_")}
    assert sorted(documented - exposed) == [] and sorted(exposed - documented) == []
