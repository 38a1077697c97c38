"""Render every overlay of deploy/ with `kubectl kustomize` and check what must agree across files:
scheduler name, Lease, extender URL and TLS vs the container's flags, managed resources vs the
device config, Service/webhook/volumes wiring, and RBAC vs the API calls the code makes (read from
the source, apicalls.py). The e2e tier applies the same renderings to a real kube-apiserver."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ has no packages (importlib mode)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

import apicalls
from controlplane import ControlPlaneUnavailable, find_binaries_or_raise

from vgpu_scheduler.durations import parse_go_duration

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
OVERLAYS = ("default", "cert-manager")
Obj = dict[str, Any]


def _kubectl() -> tuple[Path | None, str]:
    """The pinned kubectl the e2e tier builds, or why it is missing (the same reason as that tier)."""
    try:
        return find_binaries_or_raise() / "kubectl", ""
    except ControlPlaneUnavailable as exc:
        return None, f"deploy manifests not rendered: {exc}"


KUBECTL, MISSING = _kubectl()
if KUBECTL is None:
    pytest.skip(MISSING, allow_module_level=True)  # one line in `-ra`


def render(overlay: str) -> list[Obj]:
    assert KUBECTL is not None
    out = subprocess.run([str(KUBECTL), "kustomize", str(DEPLOY / "overlays" / overlay)],
                         capture_output=True, text=True, timeout=120, check=True)
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module", params=OVERLAYS)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[Obj]]:
    return request.param, render(request.param)


def one(objs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def container(dep: Obj, name: str, init: bool = False) -> Obj:
    key = "initContainers" if init else "containers"
    return next(c for c in dep["spec"]["template"]["spec"].get(key, []) if c["name"] == name)


def flags(c: Obj) -> dict[str, str]:
    """`--name=value` args as a dict (HAMi's flags are all written that way in our manifests)."""
    out = {}
    for a in [*c.get("command", []), *c.get("args", [])]:
        if a.startswith("-") and "=" in a:
            k, v = a.lstrip("-").split("=", 1)
            out[k] = v
    return out


def expand(value: str, c: Obj, dep: Obj) -> str:
    """Resolve `$(POD_NAMESPACE)` the way the kubelet does for downward-API env vars."""
    for env in c.get("env", []):
        ref = (env.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath")
        if ref == "metadata.namespace":
            value = value.replace(f"$({env['name']})", dep["metadata"]["namespace"])
    return value


def scheduler_config(objs: list[Obj], dep: Obj) -> Obj:
    vol = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "scheduler-config")
    cm = one(objs, "ConfigMap", vol["configMap"]["name"])
    return dict(yaml.safe_load(cm["data"]["config.yaml"]))


def device_config(objs: list[Obj], dep: Obj) -> Obj:
    vol = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "device-config")
    cm = one(objs, "ConfigMap", vol["configMap"]["name"])
    return dict(yaml.safe_load(cm["data"]["device-config.yaml"]))


def resource_names(cfg: Any) -> Iterator[str]:
    """Every `resource*Name*` string of every vendor in a device config."""
    if isinstance(cfg, dict):
        for k, v in cfg.items():
            if isinstance(k, str) and k.startswith("resource") and "Name" in k and isinstance(v, str):
                yield v
            else:
                yield from resource_names(v)
    elif isinstance(cfg, list):
        for v in cfg:
            yield from resource_names(v)


def port_of(hostport: str) -> int:
    return int(hostport.rsplit(":", 1)[1])


# ---------------------------------------------------------------------------- rendered overlays


def test_scheduler_name_and_lease_agree(rendered: tuple[str, list[Obj]]) -> None:
    _, objs = rendered
    dep = one(objs, "Deployment")
    ours = container(dep, "vgpu-scheduler")
    f = flags(ours)
    cfg = scheduler_config(objs, dep)
    assert [p["schedulerName"] for p in cfg["profiles"]] == [f["scheduler-name"]]
    le = cfg["leaderElection"]
    assert le["leaderElect"] is True and f["leader-elect"] == "true"
    assert le["resourceName"] == f["leader-elect-resource-name"]
    ns = dep["metadata"]["namespace"]
    assert le["resourceNamespace"] == expand(f["leader-elect-resource-namespace"], ours, dep) == ns
    assert dep["spec"]["replicas"] == 2
    envs = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in ours["env"] if "valueFrom" in e}
    assert envs == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    ks = container(dep, "kube-scheduler")
    assert ks["image"] == "registry.k8s.io/kube-scheduler:v1.36.3"
    assert "--config=/config/config.yaml" in ks["command"]


def test_extender_reaches_the_container(rendered: tuple[str, list[Obj]]) -> None:
    _, objs = rendered
    dep = one(objs, "Deployment")
    ours = container(dep, "vgpu-scheduler")
    f = flags(ours)
    (ext,) = scheduler_config(objs, dep)["extenders"]
    tls = bool(f.get("cert_file")) and bool(f.get("key_file"))
    scheme = "https" if tls else "http"
    assert ext["urlPrefix"] == f"{scheme}://127.0.0.1:{port_of(f['http_bind'])}"
    assert ext["enableHTTPS"] is tls
    assert ext["tlsConfig"].get("insecure") is True or ext["tlsConfig"].get("caData")
    assert (ext["filterVerb"], ext["bindVerb"], ext["nodeCacheCapable"]) == ("filter", "bind", True)
    assert "prioritizeVerb" not in ext and "preemptVerb" not in ext
    assert parse_go_duration(f["bind-timeout"]) < parse_go_duration(ext["httpTimeout"]) == 30
    ports = {p["name"]: p["containerPort"] for p in ours["ports"]}
    assert ports["https"] == port_of(f["http_bind"])
    assert ports["metrics"] == port_of(f["metrics-bind-address"])
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        get = ours[probe]["httpGet"]
        assert (get["path"], get["port"], get["scheme"]) == (path, "https", "HTTPS")
    assert ours["resources"]["requests"] and ours["resources"]["limits"]


def test_managed_resources_are_the_device_config_resources(rendered: tuple[str, list[Obj]]) -> None:
    _, objs = rendered
    dep = one(objs, "Deployment")
    f = flags(container(dep, "vgpu-scheduler"))
    assert f["device-config-file"] == "/device-config.yaml"
    (ext,) = scheduler_config(objs, dep)["extenders"]
    managed = [m["name"] for m in ext["managedResources"]]
    assert len(managed) == len(set(managed))
    assert set(managed) == set(resource_names(device_config(objs, dep)))
    assert {"nvidia.com/gpu", "nvidia.com/priority", "huawei.com/Ascend910B3"} <= set(managed)
    assert all(m["ignoredByScheduler"] is True for m in ext["managedResources"])


def test_service_and_webhook_point_at_the_pods(rendered: tuple[str, list[Obj]]) -> None:
    _, objs = rendered
    dep = one(objs, "Deployment")
    ns = dep["metadata"]["namespace"]
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert labels["hami.io/webhook"] == "ignore" and labels["app.kubernetes.io/component"] == "hami-scheduler"
    svc = one(objs, "Service")
    selector = dict(svc["spec"]["selector"])
    assert selector.pop("hami.io/scheduler-role") == "leader"  # set on the leader's pod by the server
    assert selector.items() <= labels.items()
    ports = {p["port"]: p["targetPort"] for p in svc["spec"]["ports"]}
    assert ports == {443: "https", 9395: "metrics"}
    mwc = one(objs, "MutatingWebhookConfiguration")
    (hook,) = mwc["webhooks"]
    assert hook["clientConfig"]["service"] == {
        "name": svc["metadata"]["name"], "namespace": svc["metadata"]["namespace"],
        "path": "/webhook", "port": 443,
    }
    assert svc["metadata"]["namespace"] == ns
    ignore = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    assert ignore in hook["objectSelector"]["matchExpressions"]
    assert ignore in hook["namespaceSelector"]["matchExpressions"]
    assert one(objs, "Namespace", ns)["metadata"]["labels"]["hami.io/webhook"] == "ignore"
    assert hook["sideEffects"] == "None" and hook["failurePolicy"] in ("Ignore", "Fail")
    assert set(hook["admissionReviewVersions"]) == {"v1", "v1beta1"}
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["pods"], "scope": "*"}]
    for vol in dep["spec"]["template"]["spec"]["volumes"]:
        if "configMap" in vol:
            one(objs, "ConfigMap", vol["configMap"]["name"])


def test_certificates_reach_the_server(rendered: tuple[str, list[Obj]]) -> None:
    overlay, objs = rendered
    dep = one(objs, "Deployment")
    ns = dep["metadata"]["namespace"]
    ours = container(dep, "vgpu-scheduler")
    f = flags(ours)
    mount = next(m for m in ours["volumeMounts"] if m["name"] == "tls")["mountPath"]
    assert f["cert_file"] == f"{mount}/tls.crt" and f["key_file"] == f"{mount}/tls.key"
    vol = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "tls")
    svc, mwc = one(objs, "Service"), one(objs, "MutatingWebhookConfiguration")
    if overlay == "default":
        assert "emptyDir" in vol and "secret" not in vol
        init = container(dep, "certs", init=True)
        assert init["image"] == ours["image"] and init["args"][0] == "certs"
        g = flags(init)
        assert g["write-dir"] == mount
        assert g["service-name"] == svc["metadata"]["name"]
        assert g["webhook-name"] == mwc["metadata"]["name"]
        assert parse_go_duration(g["rotate-before"]) < parse_go_duration(g["validity"])
        role = one(objs, "Role", "vgpu-scheduler-certs")
        cluster_role = one(objs, "ClusterRole", "vgpu-scheduler-certs")
        assert {n for r in role["rules"] for n in r.get("resourceNames", [])} == {g["secret-name"]}
        assert {n for r in cluster_role["rules"] for n in r.get("resourceNames", [])} == {g["webhook-name"]}
        assert any(e["name"] == "POD_NAMESPACE" for e in init["env"])
    else:
        cert = one(objs, "Certificate")
        assert vol["secret"]["secretName"] == cert["spec"]["secretName"]
        assert f"{svc['metadata']['name']}.{ns}.svc" in cert["spec"]["dnsNames"]
        assert cert["metadata"]["namespace"] == ns
        issuer = one(objs, "Issuer")
        assert cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": issuer["metadata"]["name"]}
        inject = mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert inject == f"{ns}/{cert['metadata']['name']}"


# ---------------------------------------------------------------------------- RBAC vs the code


def granted(objs: list[Obj], kind: str, name: str) -> set[apicalls.Call]:
    role = one(objs, kind, name)
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def bound_to_service_account(objs: list[Obj], kind: str, name: str, ns: str) -> bool:
    binding_kind = "ClusterRoleBinding" if kind == "ClusterRole" else "RoleBinding"
    return any(
        b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}
        and {"kind": "ServiceAccount", "name": "vgpu-scheduler", "namespace": ns} in b["subjects"]
        for b in objs if b["kind"] == binding_kind
    )


def test_rbac_is_exactly_the_api_calls_the_code_makes(rendered: tuple[str, list[Obj]]) -> None:
    overlay, objs = rendered
    ns = one(objs, "Deployment")["metadata"]["namespace"]
    server_files = [p for p in apicalls.production_files() if not p.is_relative_to(apicalls.SRC / "certs")]
    made = apicalls.calls_in(server_files)
    assert ("", "pods/binding", "create") in made and ("coordination.k8s.io", "leases", "watch") in made
    have = granted(objs, "ClusterRole", "vgpu-scheduler") | granted(objs, "Role", "vgpu-scheduler")
    missing = {c: made[c] for c in set(made) - have}
    assert not missing, f"calls the RBAC does not grant: {missing}"
    assert have - set(made) == set(), "rules no code uses"
    assert not any(c[1] == "leases" for c in granted(objs, "ClusterRole", "vgpu-scheduler"))  # own ns only
    for kind in ("ClusterRole", "Role"):
        assert bound_to_service_account(objs, kind, "vgpu-scheduler", ns)
    certs_made = apicalls.calls_in(apicalls.production_files("certs"))
    if overlay == "default":
        have = granted(objs, "Role", "vgpu-scheduler-certs")
        have |= granted(objs, "ClusterRole", "vgpu-scheduler-certs")
        assert have == set(certs_made)
        assert not any(c[1] == "secrets" for c in granted(objs, "ClusterRole", "vgpu-scheduler-certs"))
        for kind in ("ClusterRole", "Role"):
            assert bound_to_service_account(objs, kind, "vgpu-scheduler-certs", ns)
    else:
        assert not [o for o in objs if o["metadata"]["name"] == "vgpu-scheduler-certs"]
    # kube-scheduler's own Lease: create, and get/update on exactly the configured name.
    lease = one(objs, "Role", "vgpu-scheduler-lease")
    cfg = scheduler_config(objs, one(objs, "Deployment"))
    names = {n for r in lease["rules"] for n in r.get("resourceNames", [])}
    assert names == {cfg["leaderElection"]["resourceName"]}


def test_the_cluster_role_names_no_secrets_or_wildcards(rendered: tuple[str, list[Obj]]) -> None:
    _, objs = rendered
    for role in (o for o in objs if o["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], role["metadata"]["name"]


def test_every_overlay_renders() -> None:
    for overlay in OVERLAYS:
        kinds = {o["kind"] for o in render(overlay)}
        assert {"Deployment", "Service", "MutatingWebhookConfiguration", "ConfigMap", "Namespace"} <= kinds
