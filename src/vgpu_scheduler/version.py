"""Build information: the `version` subcommand (§1.3) and the `hami_build_info` metric.

HAMi stamps version, revision and build date into the binary with Go ldflags. A Python package has no
link step, so the image build sets them as environment variables (`VGPU_SCHEDULER_REVISION`,
`VGPU_SCHEDULER_BUILD_DATE`, optionally `VGPU_SCHEDULER_VERSION`) or writes
`vgpu_scheduler/data/build_info.json` (`{"revision": ..., "build_date": ...}`); anything missing is
"unknown", like HAMi's defaults. The "go version" and "compiler" slots carry the Python runtime,
which is what actually executes us.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import asdict, dataclass
from importlib import resources

from vgpu_scheduler import __version__

UNKNOWN = "unknown"

ENV_VERSION = "VGPU_SCHEDULER_VERSION"
ENV_REVISION = "VGPU_SCHEDULER_REVISION"
ENV_BUILD_DATE = "VGPU_SCHEDULER_BUILD_DATE"

# Go's GOARCH names for the machine strings Python reports.
_GOARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "i386": "386",
    "i686": "386",
    "armv7l": "arm",
    "armv6l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}
_GOOS = {"win32": "windows", "cygwin": "windows"}

_LABELS = ("version", "revision", "build date", "go version", "compiler", "platform")
_VALUE_COLUMN = 18  # values start in column 19, as in `scheduler version`


@dataclass(frozen=True, slots=True)
class BuildInfo:
    version: str
    revision: str
    build_date: str
    go_version: str
    compiler: str
    platform: str


def go_platform(sys_platform: str | None = None, machine: str | None = None) -> str:
    """`GOOS/GOARCH`-style platform string, e.g. `linux/amd64`."""
    os_name = sys_platform if sys_platform is not None else sys.platform
    os_name = _GOOS.get(os_name, os_name)
    if os_name.startswith("linux"):
        os_name = "linux"
    raw = (machine if machine is not None else platform.machine()).lower()
    return f"{os_name}/{_GOARCH.get(raw, raw or UNKNOWN)}"


def _packaged_build_info() -> dict[str, str]:
    """Values written into the package at image build time, if any."""
    try:
        text = resources.files("vgpu_scheduler").joinpath("data/build_info.json").read_text("utf-8")
        data = json.loads(text)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str) and v}


def build_info(environ: dict[str, str] | None = None) -> BuildInfo:
    env = os.environ if environ is None else environ
    packaged = _packaged_build_info()

    def pick(env_key: str, file_key: str, default: str) -> str:
        return env.get(env_key) or packaged.get(file_key) or default

    return BuildInfo(
        version=pick(ENV_VERSION, "version", f"v{__version__}"),
        revision=pick(ENV_REVISION, "revision", UNKNOWN),
        build_date=pick(ENV_BUILD_DATE, "build_date", UNKNOWN),
        go_version=f"python{platform.python_version()}",
        compiler=platform.python_implementation(),
        platform=go_platform(),
    )


def version_lines(info: BuildInfo | None = None) -> list[str]:
    """The six aligned lines `scheduler version` prints (§1.3)."""
    bi = info if info is not None else build_info()
    values = (bi.version, bi.revision, bi.build_date, bi.go_version, bi.compiler, bi.platform)
    return [f"{label + ':':<{_VALUE_COLUMN}}{value}" for label, value in zip(_LABELS, values, strict=True)]


def build_info_labels(info: BuildInfo | None = None) -> dict[str, str]:
    """Label set of the `hami_build_info` gauge (§8.4)."""
    return asdict(info if info is not None else build_info())
