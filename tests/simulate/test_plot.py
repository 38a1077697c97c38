import math
import sys
from pathlib import Path

import pytest

from vgpu_scheduler.simulate.plot import (
    INSTALL_HINT,
    PlotDataError,
    PlotUnavailableError,
    memory_matrix,
    plot,
)
from vgpu_scheduler.simulate.report import DeviceState, TimelinePoint, build_report


def small_report() -> dict[str, object]:
    devices = [
        DeviceState("n1", 0, "GPU-a", "NVIDIA A100", 10, 1000, 100, used=1, usedmem=500, usedcores=10),
        DeviceState("n1", 1, "GPU-b", "NVIDIA A100", 10, 1000, 100),
        DeviceState("n2", 0, "GPU-c", "NVIDIA V100", 10, 2000, 100, used=2, usedmem=2000, usedcores=100),
    ]
    timeline = [TimelinePoint(0.0, 0, 3, 0, 0, 0), TimelinePoint(4.0, 2, 1, 3, 2500, 110)]
    return build_report([], devices, timeline=timeline, makespan=4.0)


def test_memory_matrix_rows_per_node_and_blank_missing_devices() -> None:
    nodes, width, rows = memory_matrix(small_report()["devices"])  # type: ignore[arg-type]
    assert nodes == ["n1", "n2"] and width == 2
    assert rows[0] == [0.5, 0.0]
    assert rows[1][0] == 1.0 and math.isnan(rows[1][1])


def test_missing_matplotlib_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(PlotUnavailableError) as err:
        plot(small_report(), tmp_path / "out.png")
    assert INSTALL_HINT in str(err.value)
    assert INSTALL_HINT == "pip install 'vgpu-scheduler[plot]'"
    assert not (tmp_path / "out.png").exists()


def test_report_without_plot_data_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(PlotDataError, match="devices"):
        plot({"pods": [], "summary": {}}, tmp_path / "out.png")
    with pytest.raises(PlotDataError, match="malformed device row"):
        memory_matrix([{"node": "n1"}])


def test_draws_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "report.png"
    plot(small_report(), out)
    assert out.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
