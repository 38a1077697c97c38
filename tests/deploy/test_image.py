"""The image (Dockerfile, .dockerignore).

No container engine runs here, so the Dockerfile is checked for its structure only."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def test_dockerfile_is_a_non_root_image_of_this_repository() -> None:
    text = (REPO / "Dockerfile").read_text()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
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

