"""The extender is a façade over its rooms (filter, bind, reservations): a tunable set on it after
construction is the one every room reads, as when the verbs lived in one class."""

from __future__ import annotations

from tests.builders import gpu_pod
from tests.scheduler.conftest import Stack


def _chosen(answer: dict[str, object]) -> str:
    names = answer["NodeNames"]
    assert isinstance(names, list) and len(names) == 1, answer
    return str(names[0])


async def test_a_bind_timeout_set_on_the_facade_stops_the_bind(stack: Stack) -> None:
    p = await stack.create(gpu_pod("p"))
    node = _chosen(await stack.filter({"Pod": p, "NodeNames": ["n1", "n2"]}))
    stack.extender.bind_timeout = 0.0  # read by the bind's deadline and its refusal text
    error = await stack.bind(p, node)
    assert error == f"bind of pod default/p to {node} timed out after 0s"
    assert stack.extender.stats.binds_deadline == 1
    assert stack.cluster.get("pods", "p", namespace="default")["spec"].get("nodeName") is None


async def test_a_clock_set_on_the_facade_dates_the_bind_patch(stack: Stack) -> None:
    p = await stack.create(gpu_pod("p"))
    node = _chosen(await stack.filter({"Pod": p, "NodeNames": ["n1", "n2"]}))
    stack.extender.now = lambda: 1_234_567_890.5
    assert await stack.bind(p, node) == ""
    bound = stack.cluster.get("pods", "p", namespace="default")
    assert bound["metadata"]["annotations"]["hami.io/bind-time"] == "1234567890"
