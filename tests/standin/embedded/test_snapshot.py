import json
from pathlib import Path

import pytest
import yaml

from tests.fixtures import KUBE_1_36
from vgpu_scheduler.simulate.workload import demo_workload
from vgpu_scheduler.standin.embedded.fleet import fleet
from vgpu_scheduler.standin.embedded.snapshot import SnapshotError, load_snapshot

FIXTURES = KUBE_1_36

KUBECTL_LIST = """\
apiVersion: v1
items:
- apiVersion: v1
  kind: Node
  metadata:
    creationTimestamp: 2026-11-29T21:02:20Z
    labels:
      gpu: "on"
    name: gpu-node-1
  spec: {}
- apiVersion: v1
  kind: Pod
  metadata:
    name: gpu-single
    namespace: team-a
  spec:
    containers:
    - name: cuda
      image: x
- apiVersion: v1
  kind: ResourceQuota
  metadata:
    name: gpu-quota
    namespace: team-a
  spec:
    hard:
      limits.nvidia.com/gpumem: "8000"
kind: List
metadata:
  resourceVersion: ""
"""


def write(tmp_path: Path, text: str, name: str = "snap.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_kubectl_list(tmp_path: Path) -> None:
    snap = load_snapshot(write(tmp_path, KUBECTL_LIST))
    assert [n["metadata"]["name"] for n in snap.nodes] == ["gpu-node-1"]
    assert [p["metadata"]["name"] for p in snap.pods] == ["gpu-single"]
    assert [q["metadata"]["name"] for q in snap.resourcequotas] == ["gpu-quota"]
    # unquoted timestamps stay strings (objects must remain JSON data)
    assert snap.nodes[0]["metadata"]["creationTimestamp"] == "2026-11-29T21:02:20Z"
    json.dumps(snap.pods)


def test_json_list_multidoc_yaml_and_typed_api_lists(tmp_path: Path) -> None:
    nodes, pods = fleet(2, 1), demo_workload(3, 1)
    as_json = write(
        tmp_path, json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes + pods}), "s.json"
    )
    snap = load_snapshot(as_json)
    assert (snap.nodes, snap.pods) == (nodes, pods)

    multidoc = write(tmp_path, yaml.safe_dump_all([*nodes, None, *pods]), "multi.yaml")
    snap = load_snapshot(multidoc)
    assert (len(snap.nodes), len(snap.pods)) == (2, 3)

    # raw API list bodies: items carry no kind/apiVersion; they are filled in
    bare = [{"metadata": p["metadata"], "spec": p["spec"]} for p in pods]
    raw = write(tmp_path, json.dumps({"apiVersion": "v1", "kind": "PodList", "items": bare}), "raw.json")
    snap = load_snapshot(raw)
    assert [p["kind"] for p in snap.pods] == ["Pod"] * 3
    assert snap.pods[0]["apiVersion"] == "v1"

    array = write(tmp_path, json.dumps(nodes), "array.json")
    assert len(load_snapshot(array).nodes) == 2


def test_real_fixture_files(tmp_path: Path) -> None:
    snap = load_snapshot(FIXTURES / "inputs" / "nodes.yaml")
    assert [n["metadata"]["name"] for n in snap.nodes] == ["gpu-node-1", "gpu-node-2", "cpu-node-1"]
    snap = load_snapshot(FIXTURES / "node" / "node.hami-registered.kubectl.json")
    assert snap.nodes[0]["metadata"]["annotations"]["hami.io/node-handshake"].startswith("Requesting_")
    snap = load_snapshot(FIXTURES / "inputs" / "pods" / "gpu-single.yaml")
    assert snap.pods[0]["metadata"]["namespace"] == "default"  # defaulted like `kubectl apply`


def test_empty_file_is_an_empty_snapshot(tmp_path: Path) -> None:
    snap = load_snapshot(write(tmp_path, "---\n# nothing\n"))
    assert (snap.nodes, snap.pods, snap.resourcequotas) == ([], [], [])


NODE = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("kind: Node\nmetadata: {name: [\n", "snap.yaml: invalid YAML at line 3, column 1: ",
                     id="broken YAML"),
        pytest.param(
            '{"kind": "Node",\n "metadata": {"name": "n"}',
            "snap.yaml: invalid JSON at line 2, column 27: Expecting",
            id="broken JSON",
        ),
        pytest.param(
            "kind: Node\nmetadata: {name: n1}\n",
            "snap.yaml: the document (kind Node, name n1): apiVersion is missing",
            id="no apiVersion",
        ),
        pytest.param(
            "- 1\n- 2\n",
            "snap.yaml: the document, item [0]: expected a Kubernetes object (a mapping), got number",
            id="a list of numbers",
        ),
        pytest.param(
            f"{NODE}---\njust a string\n",
            "snap.yaml: document 2: expected a Kubernetes object (a mapping), got string",
            id="a string document",
        ),
        pytest.param(
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {namespace: x}\n",
            "snap.yaml: the document, items[0] (kind Pod): metadata.name is missing or empty",
            id="pod without name in a List",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Node\n", "snap.yaml: the document (kind Node): metadata is missing",
            id="no metadata",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Node\nmetadata: []\n", "(kind Node): metadata must be a mapping, got list",
            id="metadata a list",
        ),
        pytest.param(
            f"{NODE}---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: prod}}\n",
            "snap.yaml: document 2 (kind Deployment, name prod/web): unsupported kind 'Deployment' "
            "(allowed: List, Node, NodeList, Pod, PodList, ResourceQuota, ResourceQuotaList)",
            id="unsupported kind",
        ),
        pytest.param(
            "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Secret, metadata: {name: s}}\n",
            "snap.yaml: the document, items[0] (kind Secret, name s): unsupported kind 'Secret'",
            id="unsupported kind in a List",
        ),
        pytest.param("metadata: {name: n1}\n", "snap.yaml: the document (name n1): kind is missing",
                     id="no kind"),
        pytest.param(
            "apiVersion: v2\nkind: Node\nmetadata: {name: n1}\n",
            "snap.yaml: the document (kind Node, name n1): unsupported apiVersion 'v2' for kind Node",
            id="unsupported apiVersion",
        ),
        pytest.param(
            "apiVersion: v1\nkind: List\nitems: {}\n",
            "snap.yaml: the document (kind List): items must be a list",
            id="List items not a list",
        ),
        pytest.param(
            f"{NODE}---\n{NODE}",
            "snap.yaml: document 2 (kind Node, name n1): duplicate Node (first defined at document 1)",
            id="duplicate node",
        ),
        pytest.param(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: ''}\n",
            "snap.yaml: the document (kind Pod, name p): metadata.namespace must be a non-empty string",
            id="empty namespace",
        ),
    ],
)
def test_errors_name_the_file_and_the_object(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SnapshotError) as err:
        load_snapshot(path)
    text_of_error = str(err.value)
    assert text_of_error.startswith(str(tmp_path))
    assert message in text_of_error
    assert "\n" not in text_of_error  # one line, ready for the CLI to print


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match=r"missing\.yaml: cannot read: No such file"):
        load_snapshot(tmp_path / "missing.yaml")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"kind: Node\n\xff\xfe")
    with pytest.raises(SnapshotError, match=r"binary\.yaml: not UTF-8 text"):
        load_snapshot(binary)
