"""The `vgpu-scheduler` command as a process: serves on an embedded demo cluster and exits 0 on
SIGTERM; `version`; and exit code 2 with a clear message for bad flags and bad input files."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.builders import gpu_pod

PYTHON = sys.executable
SCRIPT = str(Path(sys.executable).with_name("vgpu-scheduler"))  # the installed console script


def _run(*args: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, "-m", "vgpu_scheduler", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


async def test_serves_the_demo_cluster_and_exits_0_on_sigterm(it: Any, tmp_path: Path) -> None:
    http_port, metrics_port, api_port = it.free_port(), it.free_port(), it.free_port()
    log = (tmp_path / "stderr.log").open("w")
    proc = await asyncio.create_subprocess_exec(
        PYTHON,
        "-m",
        "vgpu_scheduler",
        "--cluster-snapshot",
        "demo",
        "--http_bind",
        f"127.0.0.1:{http_port}",
        "--metrics-bind-address",
        f"127.0.0.1:{metrics_port}",
        "--scheduler-name=hami-scheduler",
        f"--embedded-api-bind=127.0.0.1:{api_port}",
        stdout=log,
        stderr=log,
    )
    base = f"http://127.0.0.1:{http_port}"
    try:
        async with aiohttp.ClientSession() as session:

            async def up() -> bool:
                assert proc.returncode is None, (tmp_path / "stderr.log").read_text()
                try:
                    async with session.get(base + "/healthz") as resp:
                        return resp.status == 200
                except aiohttp.ClientConnectionError:
                    return False

            await it.eventually(up, "the server to listen", timeout=20)
            # The filter only places pods the cluster has: create it through the embedded API.
            pod = gpu_pod("demo-pod", mem=4000, cores=25)
            api = f"http://127.0.0.1:{api_port}/api/v1/namespaces/default/pods"
            async with session.post(api, json=pod) as resp:
                assert resp.status == 201, await resp.text()
                pod = await resp.json()
            unknown = {**pod, "metadata": {**pod["metadata"], "uid": "no-such-uid"}}
            refused = {"Pod": unknown, "NodeNames": ["gpu-node-00"]}
            async with session.post(base + "/filter", json=refused) as resp:
                assert (await resp.json())["Error"] == 'pods "demo-pod" not found'
            body = {"Pod": pod, "NodeNames": ["gpu-node-00", "gpu-node-08", "no-such-node"]}
            async with session.post(base + "/filter", json=body) as resp:
                assert resp.status == 200
                result = await resp.json()
            assert result["Error"] == "" and result["NodeNames"] in (["gpu-node-00"], ["gpu-node-08"])
            async with session.get(f"http://127.0.0.1:{metrics_port}/metrics") as resp:
                assert resp.status == 200
                metrics = it.parse_metrics(await resp.text())
            # 16 nodes × 8 GPUs registered; the filter's reservation is visible.
            assert len(metrics["hami_gpu_memory_limit_bytes"]) == 16 * 8
            allocated = [v for _, v in metrics["hami_gpu_memory_allocated_bytes"] if v]
            assert allocated == [4000 * 1024 * 1024]
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 10) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        log.close()
    logged = (tmp_path / "stderr.log").read_text()
    assert 'FLAG: --http_bind="127.0.0.1:' in logged and "shutting down" in logged


def test_version_prints_six_lines_on_stderr() -> None:
    done = subprocess.run([SCRIPT, "version"], capture_output=True, text=True, timeout=20, check=False)
    assert done.returncode == 0 and done.stdout == ""
    lines = done.stderr.splitlines()
    assert [line.split(":", 1)[0] for line in lines] == [
        "version",
        "revision",
        "build date",
        "go version",
        "compiler",
        "platform",
    ]


def test_unknown_flag_exits_2_with_usage() -> None:
    done = _run("--no-such-flag")
    assert done.returncode == 2
    assert done.stderr.startswith("Error: unknown flag: --no-such-flag")
    assert "Usage:" in done.stderr


@pytest.mark.parametrize(
    "content",
    [None, "nvidia: [unclosed", "nvidia: 5\n", ""],
    ids=["missing", "bad-yaml", "wrong-shape", "empty"],
)
def test_bad_device_config_exits_2_naming_the_file(content: str | None, tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    if content is not None:
        path.write_text(content)
    done = _run("--cluster-snapshot", "demo", f"--device-config-file={path}", "--http_bind", "127.0.0.1:0")
    assert done.returncode == 2, done.stderr
    assert str(path) in done.stderr


@pytest.mark.parametrize(
    "content",
    [None, "items: [unclosed", "kind: Pod\nmetadata: 5\n", "[1, 2]"],
    ids=["missing", "bad-yaml", "bad-object", "not-objects"],
)
def test_bad_cluster_snapshot_exits_2_naming_the_file(content: str | None, tmp_path: Path) -> None:
    path = tmp_path / "snapshot.yaml"
    if content is not None:
        path.write_text(content)
    done = _run("--cluster-snapshot", str(path), "--http_bind", "127.0.0.1:0")
    assert done.returncode == 2, done.stderr
    assert str(path) in done.stderr
