"""The image (Dockerfile, .dockerignore).

No container engine runs here, so the Dockerfile is checked for its structure, its interpreter lookup
is run against a layout like the image's, and the kernel behaviour the file capability relies on is
shown on this machine (when it runs as root with setcap and setpriv)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def _lines() -> list[str]:
    """Instructions with their `\\` continuations joined, comments dropped."""
    text = (REPO / "Dockerfile").read_text()
    kept = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return [ln.strip() for ln in re.sub(r"\\\n", " ", "\n".join(kept)).splitlines()]


def _final_stage() -> list[str]:
    lines = _lines()
    last_from = max(i for i, ln in enumerate(lines) if ln.startswith("FROM "))
    return lines[last_from:]


def test_dockerfile_is_a_non_root_image_of_this_repository() -> None:
    text = (REPO / "Dockerfile").read_text()
    lines = _lines()
    froms = [ln.split()[1] for ln in lines if ln.startswith("FROM ")]
    assert froms and all(f.startswith("python:3.11-slim") for f in froms)
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert lines[-1] == 'ENTRYPOINT ["vgpu-scheduler"]'
    assert "COPY src ./src" in lines and any("pip wheel" in ln and ln.endswith(" .") for ln in lines)
    assert "ln -s /usr/local/bin/vgpu-scheduler /usr/local/bin/scheduler" in text  # the chart's command
    assert not (DEPLOY / "Dockerfile").exists()
    ignore = (REPO / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*") + 1:][:3] == ["!pyproject.toml", "!README.md", "!src/"]


def _setcap_step() -> str:
    steps = [ln for ln in _final_stage() if ln.startswith("RUN ") and "setcap" in ln]
    assert len(steps) == 1, "one RUN step sets the capability"
    return steps[0]


def test_the_entry_points_interpreter_gets_the_bind_capability_before_user() -> None:
    """HAMi's chart binds 443 (80 without its webhook) as the image's user: the interpreter the entry
    point runs must carry cap_net_bind_service, set in the final stage (a COPY would not carry it)."""
    final = _final_stage()
    step = _setcap_step()
    run = final.index(step)
    assert run < next(i for i, ln in enumerate(final) if ln.startswith("USER "))
    assert step.index("pip install") < step.index("setcap")  # the entry point exists by then
    entrypoint = re.fullmatch(r'ENTRYPOINT \["([^"]+)"\]', final[-1])
    assert entrypoint
    script = f"/usr/local/bin/{entrypoint.group(1)}"
    lookup = r'interpreter="\$\(readlink -f "\$\(sed -n \'1s/\^#!//p\' ' + re.escape(script) + r'\)"\)"'
    assert re.search(lookup, step), "the interpreter is the one behind the entry point's #! line"
    assert 'setcap cap_net_bind_service=+ep "$interpreter"' in step
    assert 'getcap "$interpreter" | grep -q cap_net_bind_service' in step
    # setcap's package leaves in the same layer; nothing else gets a capability.
    assert "apt-get purge -y --auto-remove libcap2-bin" in step and step.count("setcap ") == 1
    exposed = {p for ln in final if ln.startswith("EXPOSE ") for p in ln.split()[1:]}
    assert {"443", "80", "9395"} <= exposed


def test_the_interpreter_lookup_resolves_the_real_file(tmp_path: Path) -> None:
    """The step's lookup, run against a layout like the image's: a console script whose #! names a
    symlink chain (python -> python3 -> python3.11), ends at the real file (setcap needs a file)."""
    step = _setcap_step()
    lookup = re.search(r'(interpreter="\$\(.*?\)"\)")', step)
    case = re.search(r'(case "\$interpreter" in .*? esac)', step)
    assert lookup and case
    bin_dir = tmp_path / "usr" / "local" / "bin"
    bin_dir.mkdir(parents=True)
    real = bin_dir / "python3.11"
    real.write_text("")
    (bin_dir / "python3").symlink_to("python3.11")
    (bin_dir / "python").symlink_to("python3")
    script = bin_dir / "vgpu-scheduler"
    script.write_text(f"#!{bin_dir / 'python'}\nimport sys\n")
    shell = lookup.group(1).replace("/usr/local/bin/", f"{bin_dir}/")
    shell += f' && {case.group(1)} && echo "$interpreter"'
    out = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(real)
    script.write_text("#!/bin/sh\nexec true\n")  # not an interpreter: the build stops
    assert subprocess.run(["bash", "-c", shell], capture_output=True, text=True).returncode != 0


SYSTEM_PYTHON = Path("/usr/bin/python3")
BIND_443 = ("import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
            "s.bind(('127.0.0.1', 443)); print('bound')")


def _can_show_file_capabilities() -> str:
    if os.geteuid() != 0:
        return "needs root (to set a file capability and switch to uid 65532)"
    if not (shutil.which("setcap") and shutil.which("setpriv")):
        return "needs setcap (libcap2-bin) and setpriv (util-linux)"
    if not SYSTEM_PYTHON.exists():
        return f"needs {SYSTEM_PYTHON} (an interpreter uid 65532 can read)"
    if int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text()) <= 443:
        return "port 443 is unprivileged here: nothing to show"
    return ""


@pytest.mark.skipif(bool(_can_show_file_capabilities()), reason=_can_show_file_capabilities() or "-")
def test_a_file_capability_lets_uid_65532_bind_443_and_what_stops_it() -> None:
    """What the image and docs/deploy.md rely on, on this kernel: a copy of the interpreter with
    cap_net_bind_service=+ep binds 443 as uid 65532; without the capability in the bounding set
    (`drop: [ALL]` alone) the kernel refuses to run it; under no_new_privs
    (allowPrivilegeEscalation: false) it runs but cannot bind."""
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:  # pytest's tmp_path is not reachable by 65532
        Path(tmp).chmod(0o755)
        _show_file_capabilities(Path(tmp) / "python3")


def _show_file_capabilities(python: Path) -> None:
    shutil.copy2(SYSTEM_PYTHON.resolve(), python)
    subprocess.run(["setcap", "cap_net_bind_service=+ep", str(python)], check=True)

    def run(*setpriv: str, exe: Path = python) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["setpriv", "--reuid=65532", "--regid=65532", "--clear-groups", *setpriv,
             "env", "PYTHONHOME=/usr", str(exe), "-c", BIND_443],
            capture_output=True, text=True, timeout=60,
        )

    assert run().stdout.strip() == "bound"
    assert "Permission denied" in run(exe=SYSTEM_PYTHON.resolve()).stderr  # the plain interpreter
    refused = run("--bounding-set=-net_bind_service")
    assert refused.returncode != 0 and "Operation not permitted" in refused.stderr
    assert "Permission denied" in run("--no-new-privs").stderr
