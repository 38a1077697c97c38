"""Bad start-up input refused where it enters, in one line: an unknown default policy (exit 2,
before anything starts) and a listen address that cannot be bound (exit 1, no traceback)."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from vgpu_scheduler.scheduler.options import SchedulerOptions, invalid_policy
from vgpu_scheduler.server import main
from vgpu_scheduler.server.main import StartupError, listen_error, start, stop

KNOWN_GPU = "binpack, spread, topology-aware, mutex, numa, best-fit"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI entry point as a process (PYTHONPATH is inherited, so it runs this worktree)."""
    return subprocess.run(
        [sys.executable, "-m", "vgpu_scheduler", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture
def held_port() -> Iterator[int]:
    """A port on 127.0.0.1 another process (here: this socket) is listening on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def _demo(**overrides: Any) -> SchedulerOptions:
    base: dict[str, Any] = {
        "cluster_snapshot": "demo",
        "http_bind": f"127.0.0.1:{_free_port()}",
        "metrics_bind_address": f"127.0.0.1:{_free_port()}",
    }
    return SchedulerOptions(**{**base, **overrides})


# --- unknown policies ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param(
            {"node_scheduler_policy": "pack"},
            'invalid --node-scheduler-policy "pack": unknown policy "pack" (known: binpack, spread)',
            id="node pack",
        ),
        pytest.param(
            {"gpu_scheduler_policy": "foo"},
            f'invalid --gpu-scheduler-policy "foo": unknown policy "foo" (known: {KNOWN_GPU})',
            id="gpu foo",
        ),
        pytest.param(
            {"gpu_scheduler_policy": "binpack,nuam"},
            f'invalid --gpu-scheduler-policy "binpack,nuam": unknown policy "nuam" (known: {KNOWN_GPU})',
            id="gpu chain with a typo",
        ),
        pytest.param(
            {"gpu_scheduler_policy": ""},
            f'invalid --gpu-scheduler-policy "": unknown policy "" (known: {KNOWN_GPU})',
            id="gpu empty",
        ),
    ],
)
def test_invalid_policy_names_the_flag_and_the_known_values(overrides: dict[str, str], message: str) -> None:
    assert invalid_policy(SchedulerOptions(**overrides)) == message


@pytest.mark.parametrize(
    "gpu",
    ["binpack", "spread", "topology-aware", "mutex", "numa", "best-fit", "binpack,numa", "spread, mutex"],
)
@pytest.mark.parametrize("node", ["binpack", "spread"])
def test_known_policies_pass(node: str, gpu: str) -> None:
    assert invalid_policy(SchedulerOptions(node_scheduler_policy=node, gpu_scheduler_policy=gpu)) == ""


async def test_start_refuses_an_unknown_policy_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def no_client(opts: SchedulerOptions) -> Any:
        raise AssertionError("the API client was made before the policy was checked")

    monkeypatch.setattr(main, "make_client", no_client)
    with pytest.raises(StartupError) as caught:
        await start(_demo(node_scheduler_policy="pack"))
    assert caught.value.code == 2
    assert str(caught.value).startswith('invalid --node-scheduler-policy "pack": unknown policy "pack"')


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--node-scheduler-policy", "pack"),
        ("--gpu-scheduler-policy", "foo"),
        ("--gpu-scheduler-policy", "binpack,x"),
    ],
)
def test_cli_refuses_an_unknown_policy_in_one_line_exit_2(flag: str, value: str) -> None:
    # Were the value accepted, the server would start on the demo cluster and the run time out.
    done = _run("--cluster-snapshot", "demo", "--http_bind", "127.0.0.1:0", flag, value)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f'vgpu-scheduler: invalid {flag} "{value}": unknown policy')
    assert len(done.stderr.splitlines()) == 1, done.stderr


# --- listen addresses that cannot be bound --------------------------------------------------------


def test_permission_denied_below_1024_says_how_to_fix_it() -> None:
    # asyncio's text for it; the errno decides, the text is not shown.
    exc = OSError(errno.EACCES, "error while attempting to bind on address ('0.0.0.0', 443): permission")
    assert listen_error("0.0.0.0:443", "--http_bind", exc) == (
        "cannot listen on 0.0.0.0:443: permission denied; run as root, grant CAP_NET_BIND_SERVICE "
        "(setcap cap_net_bind_service=+ep on the interpreter), or choose a port >= 1024 with --http_bind"
    )


@pytest.mark.parametrize(
    ("address", "exc", "expected"),
    [
        pytest.param(
            ":9395",
            OSError(errno.EADDRINUSE, "address already in use"),
            "cannot listen on 0.0.0.0:9395: address already in use; stop the process holding it "
            "(ss -ltnp 'sport = :9395') or choose another port with --metrics-bind-address",
            id="all interfaces, in use",
        ),
        pytest.param(
            "[::1]:80",
            OSError(errno.EADDRNOTAVAIL, "cannot assign requested address"),
            "cannot listen on [::1]:80: address not available on this host; choose an address of this "
            "host (or 0.0.0.0) with --metrics-bind-address",
            id="ipv6, not this host",
        ),
        pytest.param(
            "nosuchhost:8080",
            socket.gaierror(-2, "Name or service not known"),
            "cannot listen on nosuchhost:8080: name or service not known; choose another address with "
            "--metrics-bind-address",
            id="unresolvable host",
        ),
    ],
)
def test_other_listen_errors_name_the_address(address: str, exc: OSError, expected: str) -> None:
    assert listen_error(address, "--metrics-bind-address", exc) == expected


async def test_http_port_in_use_is_one_line_and_stops_what_started(held_port: int) -> None:
    opts = _demo(http_bind=f"127.0.0.1:{held_port}")
    stopped: list[main.Running] = []
    real_stop = main.stop

    async def spy(running: main.Running) -> None:
        stopped.append(running)
        await real_stop(running)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(main, "stop", spy)
        with pytest.raises(StartupError) as caught:
            await start(opts)
    assert caught.value.code == 1
    assert str(caught.value) == (
        f"cannot listen on 127.0.0.1:{held_port}: address already in use; stop the process holding it "
        f"(ss -ltnp 'sport = :{held_port}') or choose another port with --http_bind"
    )
    # The metrics listener started before the failure was closed again: its port binds now.
    assert len(stopped) == 1
    _, metrics_port = main.split_host_port(opts.metrics_bind_address)
    with socket.socket() as s:
        s.bind(("127.0.0.1", metrics_port))


async def test_metrics_port_in_use_names_its_flag(held_port: int) -> None:
    with pytest.raises(StartupError) as caught:
        await start(_demo(metrics_bind_address=f"127.0.0.1:{held_port}"))
    assert caught.value.code == 1
    assert str(caught.value).startswith(f"cannot listen on 127.0.0.1:{held_port}: address already in use;")
    assert str(caught.value).endswith("choose another port with --metrics-bind-address")


async def test_embedded_api_port_in_use_names_its_flag(held_port: int) -> None:
    with pytest.raises(StartupError) as caught:
        await start(_demo(embedded_api_bind=f":{held_port}"))  # no host: loopback
    assert str(caught.value).startswith(f"cannot listen on 127.0.0.1:{held_port}: address already in use;")
    assert str(caught.value).endswith("choose another port with --embedded-api-bind")


async def test_free_ports_still_start() -> None:
    """Control: the same start path serves when the ports are free."""
    running = await start(_demo())
    await stop(running)


@pytest.mark.parametrize("which", ["--http_bind", "--metrics-bind-address"])
def test_cli_port_in_use_exits_1_without_traceback(which: str, held_port: int) -> None:
    ports = {flag: f"127.0.0.1:{_free_port()}" for flag in ("--http_bind", "--metrics-bind-address")}
    ports[which] = f"127.0.0.1:{held_port}"
    done = _run("--cluster-snapshot", "demo", *(part for pair in ports.items() for part in pair))
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"vgpu-scheduler: cannot listen on 127.0.0.1:{held_port}: address already in use;")
    assert last.endswith(f"with {which}")


async def test_a_certificate_pair_that_does_not_load_is_one_line(tmp_path: Any) -> None:
    (tmp_path / "tls.crt").write_text("not a certificate")
    (tmp_path / "tls.key").write_text("not a key")
    line = r"^cannot load --cert_file/--key_file \(.*tls\.crt, .*tls\.key\): "
    with pytest.raises(StartupError, match=line):
        await start(_demo(cert_file=str(tmp_path / "tls.crt"), key_file=str(tmp_path / "tls.key")))
