"""Pictures of a simulation report (optional: needs the `plot` extra, i.e. matplotlib).

One figure, two panels: a heatmap of per-GPU memory allocation (one row per node, one column per
device index) and the fleet's memory/core/slot allocation ratios over simulated time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

INSTALL_HINT = "pip install 'vgpu-scheduler[plot]'"


class PlotUnavailableError(RuntimeError):
    """matplotlib is not installed."""


class PlotDataError(ValueError):
    """The report lacks the data a plot needs."""


def memory_matrix(devices: Sequence[Mapping[str, Any]]) -> tuple[list[str], int, list[list[float]]]:
    """(node names in order, devices per row, rows of usedmem/devmem). Missing devices (nodes with
    fewer GPUs) are NaN so they show as blank cells."""
    nodes: list[str] = []
    by_node: dict[str, dict[int, float]] = {}
    for d in devices:
        try:
            node, index = str(d["node"]), int(d["index"])
            devmem, usedmem = int(d["devmem"]), int(d["usedmem"])
        except (KeyError, TypeError, ValueError) as exc:
            raise PlotDataError(f"malformed device row {dict(d)!r}: {exc}") from None
        if node not in by_node:
            nodes.append(node)
            by_node[node] = {}
        by_node[node][index] = usedmem / devmem if devmem > 0 else 0.0
    width = 1 + max((i for cells in by_node.values() for i in cells), default=-1)
    rows = [[by_node[n].get(i, float("nan")) for i in range(width)] for n in nodes]
    return nodes, width, rows


def plot(report_data: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Draw the report into `path` (format from the extension: .png, .svg, .pdf ...)."""
    devices = report_data.get("devices")
    timeline = report_data.get("timeline")
    if not isinstance(devices, list) or not isinstance(timeline, list):
        raise PlotDataError("report has no 'devices'/'timeline' lists; was it written by `simulate`?")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise PlotUnavailableError(f"plotting needs matplotlib; install it with: {INSTALL_HINT}") from None

    nodes, width, rows = memory_matrix(devices)
    # Tall enough for one readable row per node on small fleets, capped for 1,000-node benchmarks.
    fig = Figure(figsize=(11, min(4 + 0.25 * len(nodes), 30)), layout="constrained")
    FigureCanvasAgg(fig)
    heat, over_time = fig.subplots(2, 1, height_ratios=(3, 1))

    if rows and width:
        image = heat.imshow(rows, aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
        fig.colorbar(image, ax=heat, label="GPU memory allocated / capacity")
        heat.set_xticks(range(width))
        if len(nodes) <= 64:
            heat.set_yticks(range(len(nodes)), labels=nodes, fontsize=7)
    heat.set_xlabel("device index")
    heat.set_ylabel("node")
    heat.set_title("GPU memory allocation at the end of the run")

    times = [float(p.get("time", 0.0)) for p in timeline]
    for key, label in (("memory_ratio", "memory"), ("core_ratio", "cores"), ("slot_ratio", "slots")):
        over_time.step(times, [float(p.get(key, 0.0)) for p in timeline], where="post", label=label)
    over_time.set_ylim(0, 1.05)
    over_time.set_xlabel("simulated time (s)")
    over_time.set_ylabel("allocated / capacity")
    over_time.legend(loc="upper right")
    over_time.set_title("GPU allocation over simulated time")
    fig.savefig(os.fspath(path))
