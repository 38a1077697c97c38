"""Count the nodes `engine.decide` fits: by `evaluate_node`, or by the pod's node judge alone
(`engine.fit.node_judge`: a node it finds a reason for is not fitted further)."""

from __future__ import annotations

from typing import Any

import pytest

from vgpu_scheduler.engine import walk_all, walk_first_fit
from vgpu_scheduler.engine.fit import NodeJudge, evaluate_node, node_judge
from vgpu_scheduler.engine.nodeview import NodeView


def count_fits(mp: pytest.MonkeyPatch) -> list[str]:
    """Names of the nodes decide evaluates from now on (while `mp` holds), in call order."""
    calls: list[str] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[2].name)
        return evaluate_node(*args, **kwargs)

    def counting_judge(*args: Any, **kwargs: Any) -> NodeJudge | None:
        judge = node_judge(*args, **kwargs)
        if judge is None:
            return None
        inner = judge

        def judged(view: NodeView) -> str | None:
            reason = inner(view)
            if reason:  # else evaluate_node runs (and counts it)
                calls.append(view.name)
            return reason

        return judged

    for walk in (walk_first_fit, walk_all):  # the walks that fit (the bounded one through walk_all's)
        mp.setattr(walk, "evaluate_node", counting)
        mp.setattr(walk, "node_judge", counting_judge)
    return calls
