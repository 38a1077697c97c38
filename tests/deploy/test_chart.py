"""charts/vgpu-scheduler rendered by the pinned Helm (scripts/helm-build) with several values sets, and
what must agree across its objects: scheduler name, Lease, the extender's URL and TLS against the
container's flags, the managed resources against what the extender's own vendors manage (read by the
server's code from the rendered device config and flags), Service/webhook/volumes wiring, and RBAC
against the API calls the code makes (apicalls.py). The e2e tier sends the same renderings to a real
kube-apiserver (tests/e2e/test_deploy.py)."""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests/ has no packages (importlib mode)

import apicalls
import chart
from chart import CUSTOM_NAMES, VALUE_SETS, Obj

from vgpu_scheduler.configfile import parse_device_config
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.flags import parse_args
from vgpu_scheduler.gocompat.durations import parse_go_duration
from vgpu_scheduler.scheduler.options import vendor_flags

try:
    chart.find_helm()
except chart.HelmUnavailable as exc:
    pytest.skip(str(exc), allow_module_level=True)  # one line in `-ra`

REPO = chart.REPO
SWITCHES = ("cambricon", "hygon", "enflame", "mthreads", "metax", "kunlun", "awsneuron", "amd", "vastai",
            "biren", "ascend", "iluvatar")
SECTION = {"ascend": "vnpus", "iluvatar": "iluvatars"}  # the other switches are named as their section
def render_set(name: str) -> list[Obj]:
    return chart.render_set(name)


@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[Obj]]:
    return request.param, render_set(request.param)


def one(objs: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{kind} {name}: {len(found)} found"
    return found[0]


def container(dep: Obj, name: str, init: bool = False) -> Obj:
    key = "initContainers" if init else "containers"
    return next(c for c in dep["spec"]["template"]["spec"].get(key, []) if c["name"] == name)


def extender(dep: Obj) -> Obj:
    return container(dep, "vgpu-scheduler-extender")


def flags(c: Obj) -> dict[str, str]:
    """`--name=value` args as a dict (the chart writes every flag that way)."""
    out = {}
    for a in [*c.get("command", []), *c.get("args", [])]:
        if a.startswith("-") and "=" in a:
            k, v = a.lstrip("-").split("=", 1)
            out[k] = v
    return out


def volume(dep: Obj, name: str) -> Obj:
    return next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == name)


def scheduler_config(objs: list[Obj], dep: Obj) -> Obj:
    cm = one(objs, "ConfigMap", volume(dep, "scheduler-config")["configMap"]["name"])
    return dict(yaml.safe_load(cm["data"]["config.yaml"]))


def device_config_text(objs: list[Obj], dep: Obj) -> str:
    cm = one(objs, "ConfigMap", volume(dep, "device-config")["configMap"]["name"])
    return str(cm["data"]["device-config.yaml"])


def port_of(hostport: str) -> int:
    return int(hostport.rsplit(":", 1)[1])


def managed(objs: list[Obj]) -> list[str]:
    dep = one(objs, "Deployment")
    (ext,) = scheduler_config(objs, dep)["extenders"]
    assert all(m["ignoredByScheduler"] is True for m in ext["managedResources"])
    return [m["name"] for m in ext["managedResources"]]


def extenders_own_view(objs: list[Obj]) -> frozenset[str]:
    """What the extender started with these args and this device config manages, by its own code:
    the flag parser, the device config loader and the vendor registry."""
    dep = one(objs, "Deployment")
    opts, positional = parse_args(extender(dep)["args"])
    assert positional == []
    config = parse_device_config(device_config_text(objs, dep), "rendered device-config.yaml")
    return build(config, vendor_flags(opts)).managed_resources()


# ---------------------------------------------------------------------------- every values set


def test_helm_lint_passes(rendered: tuple[str, list[Obj]]) -> None:
    name, _ = rendered
    assert "0 chart(s) failed" in chart.lint(VALUE_SETS[name][0])


def test_every_object_is_in_the_release_namespace(rendered: tuple[str, list[Obj]]) -> None:
    name, objs = rendered
    ns = VALUE_SETS[name][2]
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration"}
    for o in objs:
        assert o["metadata"].get("namespace") == (None if o["kind"] in cluster_scoped else ns), o["kind"]
        assert o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "vgpu-scheduler"
    names = [(o["kind"], o["metadata"]["name"]) for o in objs]
    assert len(names) == len(set(names))


def test_scheduler_name_and_lease_agree(rendered: tuple[str, list[Obj]]) -> None:
    name, objs = rendered
    ns = VALUE_SETS[name][2]
    dep = one(objs, "Deployment")
    ours = extender(dep)
    f = flags(ours)
    cfg = scheduler_config(objs, dep)
    assert [p["schedulerName"] for p in cfg["profiles"]] == [f["scheduler-name"]]
    le = cfg["leaderElection"]
    assert le["leaderElect"] is True and f["leader-elect"] == "true"
    assert le["resourceName"] == f["leader-elect-resource-name"] == f["scheduler-name"]
    assert le["resourceNamespace"] == f["leader-elect-resource-namespace"] == ns
    envs = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in ours["env"] if "valueFrom" in e}
    assert envs == {"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    ks = container(dep, "kube-scheduler")
    assert ks["command"][:2] == ["kube-scheduler", "--config=/config/config.yaml"]
    assert [a for a in ks["command"] if a.startswith("--config")] == ["--config=/config/config.yaml"]
    lease = one(objs, "Role", f"{dep['metadata']['name']}-lease")
    assert {n for r in lease["rules"] for n in r.get("resourceNames", [])} == {le["resourceName"]}
    # The server labels the pods of its namespace with this component label (cluster/leader.py).
    assert dep["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == "hami-scheduler"


def test_extender_reaches_the_container(rendered: tuple[str, list[Obj]]) -> None:
    _, objs = rendered
    dep = one(objs, "Deployment")
    ours = extender(dep)
    f = flags(ours)
    (ext,) = scheduler_config(objs, dep)["extenders"]
    tls = bool(f.get("cert_file")) and bool(f.get("key_file"))
    scheme = "https" if tls else "http"
    assert ext["urlPrefix"] == f"{scheme}://127.0.0.1:{port_of(f['http_bind'])}"
    assert ext["enableHTTPS"] is tls
    if tls:
        assert ext["tlsConfig"] == {"insecure": True}
    assert (ext["filterVerb"], ext["bindVerb"], ext["nodeCacheCapable"]) == ("filter", "bind", True)
    assert "prioritizeVerb" not in ext and "preemptVerb" not in ext
    assert parse_go_duration(f["bind-timeout"]) < parse_go_duration(ext["httpTimeout"]) == 30
    ports = {p["name"]: p["containerPort"] for p in ours["ports"]}
    assert ports[scheme] == port_of(f["http_bind"])
    assert ports["metrics"] == port_of(f["metrics-bind-address"])
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        if probe in ours:
            get = ours[probe]["httpGet"]
            assert (get["path"], get["port"], get["scheme"]) == (path, scheme, scheme.upper())
    assert ours["resources"]["requests"] and ours["resources"]["limits"]
    sc = ours["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0
    # The image's interpreter has the file capability cap_net_bind_service+ep (Dockerfile): a
    # container whose bounding set lacks it could not even start it.
    assert "NET_BIND_SERVICE" in sc["capabilities"]["add"]
    if port_of(f["http_bind"]) < 1024:
        pod_security = dep["spec"]["template"]["spec"]["securityContext"]
        sysctls = {s["name"]: s["value"] for s in pod_security["sysctls"]}
        assert int(sysctls["net.ipv4.ip_unprivileged_port_start"]) <= port_of(f["http_bind"])


def test_the_extender_accepts_its_arguments_and_device_config(rendered: tuple[str, list[Obj]]) -> None:
    _, objs = rendered
    dep = one(objs, "Deployment")
    opts, positional = parse_args(extender(dep)["args"])  # raises FlagError on an unknown flag
    assert positional == []
    assert opts.device_config_file == "/device-config.yaml"
    mount = next(m for m in extender(dep)["volumeMounts"] if m["name"] == "device-config")
    assert (mount["mountPath"], mount["subPath"]) == ("/device-config.yaml", "device-config.yaml")
    parse_device_config(device_config_text(objs, dep))


def test_managed_resources_are_what_the_extender_manages(rendered: tuple[str, list[Obj]]) -> None:
    name, objs = rendered
    names = managed(objs)
    assert len(names) == len(set(names))
    assert set(names) == extenders_own_view(objs)
    if name == "resource-names":
        assert set(CUSTOM_NAMES.values()) - {CUSTOM_NAMES["schedulerName"]} <= set(names)
        assert not any(n.startswith("nvidia.com/") for n in names)
    else:
        assert {"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/priority"} <= set(names)
    ascend = any(n.startswith("huawei.com/") for n in names)
    assert ascend is (name == "ascend-iluvatar")


def test_service_and_webhook_point_at_the_pods(rendered: tuple[str, list[Obj]]) -> None:
    name, objs = rendered
    values = VALUE_SETS[name][0]
    ns = VALUE_SETS[name][2]
    dep = one(objs, "Deployment")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert labels["hami.io/webhook"] == "ignore"
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    svc = one(objs, "Service")
    selector = dict(svc["spec"]["selector"])
    assert selector.pop("hami.io/scheduler-role") == "leader"  # set on the leader's pod by the server
    assert selector.items() <= labels.items()
    ports = {p["name"]: p for p in svc["spec"]["ports"]}
    webhook_on = values.get("scheduler", {}).get("admissionWebhook", {}).get("enabled", True)
    assert ports["http"]["targetPort"] == ("https" if webhook_on else "http")
    assert ports["monitor"]["targetPort"] == "metrics"
    node_port = svc["spec"]["type"] == "NodePort"
    assert ("nodePort" in ports["http"]) is node_port
    mwcs = [o for o in objs if o["kind"] == "MutatingWebhookConfiguration"]
    if not webhook_on:
        assert mwcs == [] and "tls" not in [v["name"] for v in dep["spec"]["template"]["spec"]["volumes"]]
        return
    (hook,) = mwcs[0]["webhooks"]
    assert hook["clientConfig"]["service"] == {
        "name": svc["metadata"]["name"], "namespace": ns, "path": "/webhook", "port": ports["http"]["port"],
    }
    ignore = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    assert ignore in hook["objectSelector"]["matchExpressions"]
    assert ignore in hook["namespaceSelector"]["matchExpressions"]
    whitelist = values.get("scheduler", {}).get("admissionWebhook", {}).get("whitelistNamespaces")
    if whitelist:
        assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                "values": whitelist} in hook["namespaceSelector"]["matchExpressions"]
    assert hook["sideEffects"] == "None" and hook["failurePolicy"] in ("Ignore", "Fail")
    assert set(hook["admissionReviewVersions"]) == {"v1", "v1beta1"}
    assert hook["rules"] == [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                              "resources": ["pods"], "scope": "*"}]


def test_certificates_reach_the_server(rendered: tuple[str, list[Obj]]) -> None:
    name, objs = rendered
    ns = VALUE_SETS[name][2]
    dep = one(objs, "Deployment")
    ours = extender(dep)
    f = flags(ours)
    if name == "no-webhook":
        assert "cert_file" not in f and not dep["spec"]["template"]["spec"].get("initContainers")
        return
    mount = next(m for m in ours["volumeMounts"] if m["name"] == "tls")["mountPath"]
    assert f["cert_file"] == f"{mount}/tls.crt" and f["key_file"] == f"{mount}/tls.key"
    vol = volume(dep, "tls")
    svc, mwc = one(objs, "Service"), one(objs, "MutatingWebhookConfiguration")
    if name == "cert-manager":
        cert = one(objs, "Certificate")
        assert vol["secret"]["secretName"] == cert["spec"]["secretName"]
        assert f"{svc['metadata']['name']}.{ns}.svc" in cert["spec"]["dnsNames"]
        issuer = one(objs, "Issuer")
        assert cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": issuer["metadata"]["name"]}
        inject = mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        assert inject == f"{ns}/{cert['metadata']['name']}"
        assert not dep["spec"]["template"]["spec"].get("initContainers")
    elif name == "own-secret":
        assert vol["secret"]["secretName"].endswith("-tls")
        assert not [o for o in objs if o["kind"] in ("Certificate", "Issuer")]
        assert not dep["spec"]["template"]["spec"].get("initContainers")
    else:
        assert "emptyDir" in vol and "secret" not in vol
        init = container(dep, "certs", init=True)
        assert init["image"] == ours["image"] and init["args"][0] == "certs"
        g = flags(init)
        assert g["write-dir"] == mount
        assert g["service-name"] == svc["metadata"]["name"]
        assert g["webhook-name"] == mwc["metadata"]["name"]
        assert parse_go_duration(g["rotate-before"]) < parse_go_duration(g["validity"])
        fullname = dep["metadata"]["name"]
        role = one(objs, "Role", f"{fullname}-certs")
        cluster_role = one(objs, "ClusterRole", f"{fullname}-certs")
        assert {n for r in role["rules"] for n in r.get("resourceNames", [])} == {g["secret-name"]}
        assert {n for r in cluster_role["rules"] for n in r.get("resourceNames", [])} == {g["webhook-name"]}
        assert any(e["name"] == "POD_NAMESPACE" for e in init["env"])
        assert init["securityContext"] == ours["securityContext"]
        # certs-renew: the same sync again every renewEvery, into the files the extender reloads.
        renew = container(dep, "certs-renew")
        h = flags(renew)
        assert parse_go_duration(h.pop("every")) < parse_go_duration(g["rotate-before"])
        assert h == g and renew["image"] == init["image"] and renew["volumeMounts"] == init["volumeMounts"]


def granted(objs: list[Obj], kind: str, name: str) -> set[apicalls.Call]:
    role = one(objs, kind, name)
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"]
            for v in rule["verbs"]}


def bound_to_service_account(objs: list[Obj], kind: str, name: str, sa: str, ns: str) -> bool:
    binding_kind = "ClusterRoleBinding" if kind == "ClusterRole" else "RoleBinding"
    return any(
        b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}
        and {"kind": "ServiceAccount", "name": sa, "namespace": ns} in b["subjects"]
        for b in objs if b["kind"] == binding_kind
    )


def test_rbac_is_exactly_the_api_calls_the_code_makes(rendered: tuple[str, list[Obj]]) -> None:
    name, objs = rendered
    ns = VALUE_SETS[name][2]
    dep = one(objs, "Deployment")
    fullname = dep["metadata"]["name"]
    sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
    assert one(objs, "ServiceAccount")["metadata"]["name"] == sa
    server_files = [p for p in apicalls.production_files() if not p.is_relative_to(apicalls.SRC / "certs")]
    made = apicalls.calls_in(server_files)
    assert ("", "pods/binding", "create") in made and ("coordination.k8s.io", "leases", "watch") in made
    have = granted(objs, "ClusterRole", fullname) | granted(objs, "Role", fullname)
    missing = {c: made[c] for c in set(made) - have}
    assert not missing, f"calls the RBAC does not grant: {missing}"
    assert have - set(made) == set(), "rules no code uses"
    assert not any(c[1] == "leases" for c in granted(objs, "ClusterRole", fullname))  # own ns only
    for kind in ("ClusterRole", "Role"):
        assert bound_to_service_account(objs, kind, fullname, sa, ns)
    for role in ("system:kube-scheduler", "system:volume-scheduler"):
        assert bound_to_service_account(objs, "ClusterRole", role, sa, ns)
    assert bound_to_service_account(objs, "Role", f"{fullname}-lease", sa, ns)
    certs = [o for o in objs if o["metadata"]["name"] == f"{fullname}-certs"]
    if dep["spec"]["template"]["spec"].get("initContainers"):
        have = granted(objs, "Role", f"{fullname}-certs") | granted(objs, "ClusterRole", f"{fullname}-certs")
        assert have == set(apicalls.calls_in(apicalls.production_files("certs")))
        assert not any(c[1] == "secrets" for c in granted(objs, "ClusterRole", f"{fullname}-certs"))
        for kind in ("ClusterRole", "Role"):
            assert bound_to_service_account(objs, kind, f"{fullname}-certs", sa, ns)
    else:
        assert certs == []


def test_no_role_names_a_wildcard(rendered: tuple[str, list[Obj]]) -> None:
    _, objs = rendered
    for role in (o for o in objs if o["kind"] in ("ClusterRole", "Role")):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], role["metadata"]["name"]


def test_a_disruption_budget_exactly_with_several_replicas(rendered: tuple[str, list[Obj]]) -> None:
    _, objs = rendered
    dep = one(objs, "Deployment")
    pdbs = [o for o in objs if o["kind"] == "PodDisruptionBudget"]
    if dep["spec"]["replicas"] > 1:
        (pdb,) = pdbs
        assert pdb["spec"]["minAvailable"] == 1
        assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
        assert "podAntiAffinity" in dep["spec"]["template"]["spec"]["affinity"]
    else:
        assert pdbs == []


# ---------------------------------------------------------------------------- single values


def test_the_values_sets_differ_where_they_say() -> None:
    assert one(render_set("two-replicas"), "Deployment")["spec"]["replicas"] == 2
    assert one(render_set("defaults"), "Deployment")["spec"]["replicas"] == 1
    no_election = chart.render({"scheduler": {"replicas": 3, "leaderElect": False}})
    dep = one(no_election, "Deployment")
    assert dep["spec"]["replicas"] == 1 and flags(extender(dep))["leader-elect"] == "false"
    assert scheduler_config(no_election, dep)["leaderElection"]["leaderElect"] is False
    hami = one(render_set("hami-values"), "Deployment")
    assert extender(hami)["args"][-2:] == ["--debug", "-v=4"]
    assert one(render_set("hami-values"), "Service")["spec"]["type"] == "NodePort"


def test_kube_scheduler_follows_the_cluster_version() -> None:
    cases = (("v1.31.4+k3s1", "v1.31.4"), ("v1.30.8-eks-2d5f260", "v1.30.8"), ("v1.36.3", "v1.36.3"))
    for cluster, tag in cases:
        dep = one(chart.render({}, kube_version=cluster), "Deployment")
        assert container(dep, "kube-scheduler")["image"] == f"registry.k8s.io/kube-scheduler:{tag}"
    pinned = {"scheduler": {"kubeScheduler": {"image": {"tag": "v1.33.0"}}},
              "global": {"imageRegistry": "r.example"}}
    dep = one(chart.render(pinned), "Deployment")
    assert container(dep, "kube-scheduler")["image"] == "r.example/kube-scheduler:v1.33.0"
    assert extender(dep)["image"] == "r.example/vgpu-scheduler:0.1.0"


def test_without_kube_scheduler_the_pod_is_the_extender_alone() -> None:
    objs = chart.render({"scheduler": {"kubeScheduler": {"enabled": False}, "replicas": 2}})
    dep = one(objs, "Deployment")
    names = [c["name"] for c in dep["spec"]["template"]["spec"]["containers"]]
    assert names == ["vgpu-scheduler-extender", "certs-renew"]  # certs-renew: the certificate's renewal
    assert dep["spec"]["replicas"] == 1 and flags(extender(dep))["leader-elect"] == "false"
    assert not [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-config")]
    assert not [o for o in objs if o["metadata"]["name"].endswith(("-lease", "-kube-scheduler"))]


def test_service_monitor_scrapes_the_metrics_port() -> None:
    objs = chart.render({"scheduler": {"serviceMonitor": {"enabled": True, "interval": "30s"}}})
    sm, svc = one(objs, "ServiceMonitor"), one(objs, "Service")
    assert sm["spec"]["endpoints"] == [{"port": "monitor", "path": "/metrics", "interval": "30s"}]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert "monitor" in [p["name"] for p in svc["spec"]["ports"]]
    assert not [o for o in render_set("defaults") if o["kind"] == "ServiceMonitor"]


def test_custom_url_webhook() -> None:
    url = {"enabled": True, "host": "sched.example.com", "port": 31998, "path": "/webhook"}
    objs = chart.render({"scheduler": {"admissionWebhook": {"customURL": url}}})
    (hook,) = one(objs, "MutatingWebhookConfiguration")["webhooks"]
    assert hook["clientConfig"] == {"url": "https://sched.example.com:31998/webhook"}
    init = container(one(objs, "Deployment"), "certs", init=True)
    assert "--dns-name=sched.example.com" in init["args"]


def test_with_every_vendor_enabled_the_device_config_is_the_packaged_default() -> None:
    every = {"devices": {v: {"enabled": True} for v in SWITCHES}}
    objs = chart.render(every)
    text = device_config_text(objs, one(objs, "Deployment"))
    packaged = REPO / "src" / "vgpu_scheduler" / "data" / "device-config.yaml"
    assert yaml.safe_load(text) == yaml.safe_load(packaged.read_text())


def test_device_config_content_replaces_the_built_one_and_is_filtered() -> None:
    content = ("nvidia:\n  resourceCountName: example.com/gpu\n"
               "vastai:\n  resourceCountName: example.com/va\n"
               "iluvatars:\n- {chipName: X, commonWord: X, resourceCountName: example.com/x-vgpu,"
               " resourceMemoryName: example.com/x.vMem, resourceCoreName: example.com/x.vCore}\n")
    objs = chart.render({"device-config": {"content": content}})  # iluvatar off: its section goes
    cfg = yaml.safe_load(device_config_text(objs, one(objs, "Deployment")))
    assert set(cfg) == {"nvidia", "vastai"}
    assert set(managed(objs)) == extenders_own_view(objs) >= {"example.com/gpu", "example.com/va"}
    err = chart.render_error({"device-config": {"content": "nvidai:\n  resourceCountName: x\n"}})
    assert 'unknown section "nvidai"' in err


def test_chart_version_is_the_package_version() -> None:
    meta = yaml.safe_load((chart.CHART / "Chart.yaml").read_text())
    package = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert meta["version"] == meta["appVersion"] == package


def test_the_chart_uses_hamis_value_names() -> None:
    """The names the issue lists exist in values.yaml with the same path as in HAMi's chart."""
    values = yaml.safe_load((chart.CHART / "values.yaml").read_text())
    paths = [
        "schedulerName", "resourceName", "resourceMem", "resourceMemPercentage", "resourceCores",
        "resourcePriority", "mluResourceName", "dcuResourceName", "metaxResourceName",
        "enflameResourceNameDRSGCU", "kunlunResourceName", "vastaiResourceName", "birenResourceName",
        "scheduler.defaultSchedulerPolicy.nodeSchedulerPolicy",
        "scheduler.defaultSchedulerPolicy.gpuSchedulerPolicy", "scheduler.leaderElect", "scheduler.replicas",
        "scheduler.nodeLockExpire", "scheduler.metricsBindAddress", "scheduler.kubeScheduler.enabled",
        "scheduler.kubeScheduler.image.tag", "scheduler.kubeScheduler.extraNewArgs",
        "scheduler.extender.image.repository", "scheduler.extender.extraArgs", "scheduler.extender.resources",
        "scheduler.admissionWebhook.enabled", "scheduler.admissionWebhook.customURL.enabled",
        "scheduler.admissionWebhook.whitelistNamespaces", "scheduler.admissionWebhook.failurePolicy",
        "scheduler.admissionWebhook.reinvocationPolicy", "scheduler.certManager.enabled",
        "scheduler.patch.enabled", "scheduler.service.type", "scheduler.service.httpPort",
        "scheduler.service.schedulerPort", "scheduler.service.monitorPort",
        "scheduler.serviceMonitor.enabled", "scheduler.nodeSelector", "scheduler.tolerations",
        "devices.ascend.enabled", "devices.iluvatar.enabled",
    ]
    for path in paths:
        node: Any = values
        for key in path.split("."):
            assert isinstance(node, dict) and key in node, path
            node = node[key]
    assert set(values["devices"]) - {"nvidia"} == set(SWITCHES)


# ---------------------------------------------------------------------------- vendor switches


def _sections(objs: list[Obj]) -> set[str]:
    return set(yaml.safe_load(device_config_text(objs, one(objs, "Deployment"))))


DEFAULT_NAMES: dict[str, set[str]] = {}


def _default_names(switch: str) -> set[str]:
    """The resource names a vendor owns with the default values (rendered once with it alone)."""
    if switch not in DEFAULT_NAMES:
        alone = chart.render({"devices": {v: {"enabled": v == switch} for v in SWITCHES}})
        DEFAULT_NAMES[switch] = set(managed(alone)) - set(_nvidia_names())
    return DEFAULT_NAMES[switch]


def _nvidia_names() -> set[str]:
    if "" not in DEFAULT_NAMES:
        DEFAULT_NAMES[""] = set(managed(chart.render({"devices": {v: {"enabled": False} for v in SWITCHES}})))
    return DEFAULT_NAMES[""]


def test_with_every_switch_off_nvidia_and_enflame_drs_remain() -> None:
    """NVIDIA is always on; Enflame's DRS names are the extender's whatever the config says (HAMi's
    extender registers them with their defaults), so they stay managed."""
    assert _nvidia_names() == {"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
                               "nvidia.com/gpucores", "nvidia.com/priority",
                               "enflame.com/drs-gcu", "enflame.com/gcu-memory", "enflame.com/gcu-core"}
    assert _default_names("enflame") == {"enflame.com/gcu"}
    assert all(_default_names(v) for v in SWITCHES)  # every vendor owns at least one resource


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.fixed_dictionaries({v: st.booleans() for v in SWITCHES}))
@example({v: False for v in SWITCHES})
@example({v: True for v in SWITCHES})
@example({v: v in ("ascend", "iluvatar") for v in SWITCHES})
@example({v: v not in ("ascend", "iluvatar") for v in SWITCHES})
def test_managed_resources_device_config_and_flags_follow_the_same_switches(on: dict[str, bool]) -> None:
    objs = chart.render({"devices": {v: {"enabled": e} for v, e in on.items()}})
    dep = one(objs, "Deployment")
    f = flags(extender(dep))
    # The device config holds exactly the enabled vendors' sections (NVIDIA always).
    assert _sections(objs) == {"nvidia"} | {SECTION.get(v, v) for v, e in on.items() if e}
    # The gates of the two vendors the extender registers only on request.
    assert (f.get("enable-ascend") == "true") is on["ascend"]
    assert (f.get("enable-iluvatar") == "true") is on["iluvatar"]
    # The managed resources are what the extender itself manages with this config and these flags...
    names = set(managed(objs))
    assert names == extenders_own_view(objs)
    # ...which is NVIDIA's plus exactly the enabled vendors' own.
    assert names == _nvidia_names().union(*(_default_names(v) for v, e in on.items() if e))


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)
    elif isinstance(node, str):
        yield node


def test_a_disabled_vendor_leaves_no_trace() -> None:
    """No resource name of a disabled vendor anywhere in what kube-scheduler or the extender reads."""
    objs = chart.render({"devices": {v: {"enabled": False} for v in SWITCHES}})
    dep = one(objs, "Deployment")
    seen = set(_strings(scheduler_config(objs, dep)))
    seen |= set(_strings(yaml.safe_load(device_config_text(objs, dep))))
    seen |= set(extender(dep)["args"])
    for switch in SWITCHES:
        assert not _default_names(switch) & seen, switch
    assert not [a for a in extender(dep)["args"] if re.match(r"--enable-", a)]


# ---------------------------------------------------------------------------- docs/deploy.md


def test_every_set_line_of_the_deploy_doc_renders_and_agrees() -> None:
    """The `--set` expressions docs/deploy.md gives for our chart render, and the extender they
    configure still manages exactly what kube-scheduler sends it."""
    doc = (REPO / "docs" / "deploy.md").read_text()
    ours = doc[doc.index("## Install with our chart"):doc.index("## Install with HAMi's chart")]
    ports = doc[doc.index("### Ports below 1024"):doc.index("### Certificates")]
    sets = re.findall(r"--set ([^\s`]+)", ours) + re.findall(r"--set ([^\s`]+)", ports)
    sets += re.findall(r"^\| [^|]+ \| `([^`]+=[^`]+)`", ours, re.MULTILINE)  # the table of variations
    assert len(sets) >= 12 and all(re.fullmatch(r"[\w.-]+=\S+", s.strip("'")) for s in sets), sets
    for expr in sets:
        objs = chart.render(extra=("--set", expr.strip("'")))
        assert set(managed(objs)) == extenders_own_view(objs), expr
        parse_args(extender(one(objs, "Deployment"))["args"])
    high_port = "scheduler.podSecurityContext=null,scheduler.service.httpTargetPort=8443"
    assert high_port in sets
    high = chart.render(extra=("--set", high_port))
    dep = one(high, "Deployment")
    assert "securityContext" not in dep["spec"]["template"]["spec"]
    assert flags(extender(dep))["http_bind"] == "0.0.0.0:8443"


def test_renewal_without_restart_can_be_turned_off() -> None:
    objs = chart.render({"scheduler": {"patch": {"renewEvery": ""}}})
    dep = one(objs, "Deployment")
    assert "certs-renew" not in [c["name"] for c in dep["spec"]["template"]["spec"]["containers"]]
    assert container(dep, "certs", init=True)
