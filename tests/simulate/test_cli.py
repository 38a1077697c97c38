"""`vgpu-scheduler simulate` end to end: inputs, report file, exit codes."""

import importlib.util
import json
from pathlib import Path

import pytest

from vgpu_scheduler.cli import main as root_main
from vgpu_scheduler.simulate.cli import InputError, build_parser, main
from vgpu_scheduler.standin.embedded.fleet import fleet
from vgpu_scheduler.standin.embedded.runtime import DURATION_ANNOTATION

POD = """\
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default{extra}}}
spec:
  containers:
  - name: c
    image: x
    resources: {{limits: {{nvidia.com/gpu: 1, nvidia.com/gpumem: 2048}}}}
"""


def pods_file(tmp_path: Path, *names: str, extra: str = "") -> Path:
    path = tmp_path / "pods.yaml"
    path.write_text("---\n".join(POD.format(name=n, extra=extra) for n in names))
    return path


def test_demo_run_writes_the_report_and_prints_a_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    assert root_main(["simulate", "--count", "30", "--seed", "3", "--output", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report) >= {"pods", "summary"}
    assert len(report["pods"]) == 30
    assert set(report["pods"][0]) == {"namespace", "name", "node", "annotations", "reasons"}
    printed = capsys.readouterr().out
    assert "pods: " in printed and "simulated makespan" in printed


def test_same_seed_same_bytes_other_seed_other_pods(tmp_path: Path) -> None:
    a, b, c = (tmp_path / f"{n}.json" for n in "abc")
    for path, seed in ((a, "5"), (b, "5"), (c, "6")):
        assert main(["--count", "25", "--seed", seed, "--output", str(path)]) == 0
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_snapshot_and_pods_files_with_policies(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": fleet(2, 2)}))
    pods = pods_file(tmp_path, "one", "two")
    results = {}
    for policy in ("binpack", "spread"):
        out = tmp_path / f"{policy}.json"
        args = ["--snapshot", str(snap), "--pods", str(pods), "--node-scheduler-policy", policy,
                "--output", str(out)]
        assert main(args) == 0
        results[policy] = [p["node"] for p in json.loads(out.read_text())["pods"]]
    assert results["binpack"][0] == results["binpack"][1]  # packed onto one node
    assert results["spread"][0] != results["spread"][1]


@pytest.mark.parametrize(
    ("content", "where", "message"),
    [
        pytest.param(
            "kind: Pod\napiVersion: v1\nmetadata: {namespace: x}\n", "--pods", "metadata.name is missing",
            id="pod without a name",
        ),
        pytest.param("items: [1\n", "--pods", "invalid YAML", id="broken YAML"),
        pytest.param('{"kind": "Pod",', "--snapshot", "invalid JSON", id="broken JSON snapshot"),
        pytest.param(
            "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n", "--pods", "unsupported kind 'Service'",
            id="unsupported kind",
        ),
        pytest.param(
            "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q}\n", "--pods", "ResourceQuota default/q",
            id="ResourceQuota among the pods",
        ),
        pytest.param(
            POD.format(name="late", extra=f", annotations: {{{DURATION_ANNOTATION}: soon}}"),
            "--pods",
            "Pod default/late",
            id="malformed duration",
        ),
    ],
)
def test_bad_input_is_one_clear_error_exit_2_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, where: str, message: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    out = tmp_path / "out.json"
    assert main([where, str(bad), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and message in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


BAD_FLAGS = [
    ["--provider", "Nope"],
    ["--gpu-scheduler-policy", "random"],
    ["--count", "-1"],
    ["--seed", "x"],
    ["--max-sim-time", "-1"],
    ["--max-sim-time", "inf"],
    ["--max-sim-time", "soon"],
]


@pytest.mark.parametrize("args", [pytest.param(a, id=" ".join(a)) for a in BAD_FLAGS])
def test_bad_flags_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert capsys.readouterr().err.startswith("vgpu-scheduler simulate: ")


def test_bad_device_config_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "dev.yaml"
    bad.write_text("nvidia: [1]\n")
    assert main(["--device-config-file", str(bad)]) == 2
    assert "device config" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is not None, reason="matplotlib is installed")
def test_plot_without_matplotlib_says_how_to_install(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    assert main(["--plot", str(tmp_path / "p.png"), "--output", str(out)]) == 2
    assert "pip install 'vgpu-scheduler[plot]'" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], (False, False)),
        (["--enable-ascend"], (True, False)),
        (["--enable-iluvatar=true", "--enable-ascend=false"], (False, True)),
        (["--enable-ascend", "1", "--enable-iluvatar", "T"], (True, True)),
    ],
    ids=["default", "bare", "go-words", "go-letters"],
)
def test_vendor_gates_parse_as_go_bools(argv: list[str], expected: tuple[bool, bool]) -> None:
    args = build_parser().parse_args(argv)
    assert (args.enable_ascend, args.enable_iluvatar) == expected


def test_a_vendor_gate_rejects_a_non_bool() -> None:
    with pytest.raises(InputError, match="invalid boolean value 'yes'"):
        build_parser().parse_args(["--enable-ascend=yes"])


def test_explain_puts_the_explanation_on_pending_pods_only(tmp_path: Path) -> None:
    snap = tmp_path / "snap.json"
    snap.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": fleet(1, 1)}))
    big = POD.format(name="big", extra="").replace("nvidia.com/gpumem: 2048", "nvidia.com/gpumem: 999999")
    pods = tmp_path / "pods.yaml"
    pods.write_text(POD.format(name="small", extra="") + "---\n" + big)
    plain, explained = tmp_path / "plain.json", tmp_path / "explained.json"
    base = ["--snapshot", str(snap), "--pods", str(pods)]
    assert main([*base, "--output", str(plain)]) == 0
    assert main([*base, "--explain", "--output", str(explained)]) == 0
    without = {p["name"]: p for p in json.loads(plain.read_text())["pods"]}
    with_ = {p["name"]: p for p in json.loads(explained.read_text())["pods"]}
    assert "explain" not in without["big"] and "explain" not in with_["small"]
    explanation = with_["big"]["explain"]
    assert explanation["status"] == "pending" and explanation["node"] is None
    (node_report,) = explanation["nodes"]
    assert node_report["reason"] == with_["big"]["reasons"][node_report["node"]]
    assert {c["verdict"] for d in node_report["devices"] for c in d["checks"]} == {"CardInsufficientMemory"}
    # Apart from the explanation, the reports are the same.
    del with_["big"]["explain"]
    assert with_ == without


def test_pods_pending_on_an_error_are_counted_apart_and_the_run_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pods = pods_file(tmp_path, "bad", extra=", annotations: {hami.io/device-scoring-weights: garbage}")
    out = tmp_path / "r.json"
    assert main(["--pods", str(pods), "--output", str(out)]) == 0
    (entry,) = json.loads(out.read_text())["pods"]
    assert "device-scoring-weights" in entry["error"]
    assert "1 pending (1 of them on an error" in capsys.readouterr().out


def test_max_sim_time_is_reported_when_it_cuts_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arrival = ", annotations: {simulate.vgpu-scheduler.io/arrival-seconds: '50'}"
    late = pods_file(tmp_path, "late", extra=arrival)
    out = tmp_path / "r.json"
    assert main(["--pods", str(late), "--max-sim-time", "10", "--output", str(out)]) == 0
    assert json.loads(out.read_text())["summary"]["end"] == "max_sim_time"
    assert "stopped early: --max-sim-time reached" in capsys.readouterr().out
