"""A chaos run on the real control plane (opt-in: `VGPU_CHAOS=1`, see conftest.py).

One run of harness.run_chaos with the seed from `VGPU_CHAOS_SEED` (default: drawn and printed),
`VGPU_CHAOS_NODES` nodes × 8 GPUs (default 100) for `VGPU_CHAOS_SECONDS` (default 300): the checker
must find no violation. The failure message starts with the seed, which replays the run's fault
sequence (`bench/chaos.py --seed N`).
"""

from __future__ import annotations

import asyncio
import os
import random

import pytest
from controlplane import ControlPlaneUnavailable, find_binaries_or_raise
from harness import ChaosConfig, run_chaos

pytestmark = [pytest.mark.chaos, pytest.mark.slow]


def test_chaos_run_keeps_every_invariant() -> None:
    try:
        bin_dir = find_binaries_or_raise()
    except ControlPlaneUnavailable as exc:
        pytest.skip(str(exc))
    seed = int(os.environ.get("VGPU_CHAOS_SEED") or random.SystemRandom().randrange(1, 1_000_000))
    cfg = ChaosConfig(seed=seed, nodes=int(os.environ.get("VGPU_CHAOS_NODES", "100")),
                      seconds=float(os.environ.get("VGPU_CHAOS_SECONDS", "300")))
    print(f"\nchaos seed {seed} (replay: VGPU_CHAOS_SEED={seed})")
    result = asyncio.run(run_chaos(cfg, bin_dir))
    print(result.summary())
    shown = "\n".join(f"  {v.kind}: {v.message}" for v in result.violations[:20])
    assert result.ok, f"chaos seed {seed} (replay: VGPU_CHAOS_SEED={seed}): {result.summary()}\n{shown}"
