"""The chart's device-config section list is the vendor registry's (issue 29 item 3): rendered by
scripts/chart-sections from `devices.registry.chart_sections`, so a vendor's registry line is all
the chart's list needs. No Helm here: the template text itself is compared."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vgpu_scheduler.devices.registry import REGISTRY, chart_sections
from vgpu_scheduler.devices.spec import VendorSpec

ROOT = Path(__file__).resolve().parents[2]
HELPERS = ROOT / "charts" / "vgpu-scheduler" / "templates" / "_helpers.tpl"
SCRIPT = ROOT / "scripts" / "chart-sections"


def chart_block() -> str:
    text = HELPERS.read_text(encoding="utf-8")
    start = text.index('{{- define "vgpu-scheduler.sections" -}}\n')
    body = text[text.index("\n", start) + 1 :]
    return body[: body.index("{{- end -}}")]


def test_the_charts_section_list_is_the_registrys() -> None:
    assert chart_block() == chart_sections()
    lines = chart_block().splitlines()
    assert lines[:2] == ['- {section: nvidia, vendor: ""}', "- {section: cambricon, vendor: cambricon}"]
    assert lines[-2:] == ["- {section: vnpus, vendor: ascend}", "- {section: iluvatars, vendor: iluvatar}"]


def test_a_vendor_added_to_the_registry_gets_its_chart_line() -> None:
    toy = VendorSpec("toys", "", gate="enable_toy")
    assert chart_sections((*REGISTRY, toy)) == chart_sections() + "- {section: toys, vendor: toy}\n"
    assert chart_sections((VendorSpec("plain", ""),)) == "- {section: plain, vendor: plain}\n"


def test_the_script_checks_the_chart() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stderr) == (0, "")
