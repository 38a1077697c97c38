"""`version` subcommand lines (§1.3) and the hami_build_info label set (§8.4)."""

from __future__ import annotations

import platform

import pytest

from vgpu_scheduler import __version__, cli
from vgpu_scheduler.version import BuildInfo, build_info, build_info_labels, go_platform, version_lines

SAMPLE = BuildInfo(
    version="v2.10.0",
    revision="4707fb02c91c545bc7343ce26dba4c32919f9a3e",
    build_date="20260821-08:20:39",
    go_version="go1.26.6",
    compiler="gc",
    platform="linux/amd64",
)


def test_version_lines_match_hami_layout() -> None:
    assert version_lines(SAMPLE) == [
        "version:          v2.10.0",
        "revision:         4707fb02c91c545bc7343ce26dba4c32919f9a3e",
        "build date:       20260821-08:20:39",
        "go version:       go1.26.6",
        "compiler:         gc",
        "platform:         linux/amd64",
    ]
    # Every value starts in column 19.
    for line in version_lines(SAMPLE):
        assert line[17] == " " and line[18] != " "


def test_defaults_without_build_stamp() -> None:
    info = build_info(environ={})
    assert info.version == f"v{__version__}"
    assert info.revision == "unknown"
    assert info.build_date == "unknown"
    assert info.go_version == f"python{platform.python_version()}"
    assert info.compiler == platform.python_implementation()
    assert info.platform == go_platform()


def test_environment_stamp_wins() -> None:
    info = build_info(
        environ={
            "VGPU_SCHEDULER_VERSION": "v9.9.9",
            "VGPU_SCHEDULER_REVISION": "abc123",
            "VGPU_SCHEDULER_BUILD_DATE": "20261129-21:06:11",
        }
    )
    assert (info.version, info.revision, info.build_date) == ("v9.9.9", "abc123", "20261129-21:06:11")
    assert version_lines(info)[1] == "revision:         abc123"


@pytest.mark.parametrize(
    ("sys_platform", "machine", "expected"),
    [
        ("linux", "x86_64", "linux/amd64"),
        ("linux", "aarch64", "linux/arm64"),
        ("darwin", "arm64", "darwin/arm64"),
        ("win32", "AMD64", "windows/amd64"),
        ("linux", "ppc64le", "linux/ppc64le"),
        ("linux", "mips", "linux/mips"),
        ("linux", "", "linux/unknown"),
    ],
)
def test_go_platform(sys_platform: str, machine: str, expected: str) -> None:
    assert go_platform(sys_platform, machine) == expected


def test_build_info_labels() -> None:
    assert build_info_labels(SAMPLE) == {
        "version": "v2.10.0",
        "revision": "4707fb02c91c545bc7343ce26dba4c32919f9a3e",
        "build_date": "20260821-08:20:39",
        "go_version": "go1.26.6",
        "compiler": "gc",
        "platform": "linux/amd64",
    }
    labels = build_info_labels()
    assert set(labels) == {"version", "revision", "build_date", "go_version", "compiler", "platform"}


# `scheduler [flags] version [flags]`: cobra finds the subcommand among the flags and parses every
# flag against it, where only the persistent (global device) flags exist.
@pytest.mark.parametrize(
    ("argv", "code", "first_line"),
    [
        pytest.param(["version"], 0, "version:", id="version"),
        pytest.param(["version", "extra"], 0, "version:", id="version extra"),
        pytest.param(["--debug", "version"], 0, "version:", id="--debug version"),
        pytest.param(["version", "--device-config-file=/x.yaml"], 0, "version:",
                     id="version --device-config-file=/x.yaml"),
        pytest.param(["--device-config-file", "/x.yaml", "version"], 0, "version:",
                     id="--device-config-file /x.yaml version"),
        pytest.param(["--http_bind=:1", "version"], 2, "Error: unknown flag: --http_bind",
                     id="--http_bind=:1 version"),
        pytest.param(["version", "--bogus"], 2, "Error: unknown flag: --bogus", id="version --bogus"),
    ],
)
def test_version_subcommand(
    argv: list[str], code: int, first_line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == code
    out = capsys.readouterr()
    assert out.out == ""  # cobra's Println writes to stderr
    assert out.err.splitlines()[0].startswith(first_line)
