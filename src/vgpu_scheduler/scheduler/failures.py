"""Failure texts of a no-fit filter: the FilteringFailed event texts and the metric reason.

One concern: turning a `NoFit` decision's node -> reason map into HAMi's grouped texts (§5.7),
kept for the pod's retries while its answer is unchanged, and into one bounded reason word for
the metrics.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Mapping
from itertools import chain

from vgpu_scheduler.engine.decide import NODE_UNREGISTERED, NoFit
from vgpu_scheduler.wire.reasons import parse_reason


def filtering_failed_messages(failed: Mapping[str, str]) -> list[str]:
    """The FilteringFailed event texts when no node fits (§5.7).

    One event per reason *type* (a node whose reason string names several types counts under
    each), then the summary. Nodes without a reason type ("node unregistered") only count in the
    summary, as in HAMi, which groups the nodes it evaluated by `ParseReason`.
    """
    # Grouped per distinct reason text first (a no-fit pod has a few texts for thousands of
    # nodes), the names sorted once: per type, in type order, the sorted names `failed_by_type`
    # lists.
    ordered = sorted(failed)
    texts = set(failed.values())
    if len(texts) == 1:
        by_text = {texts.pop(): ordered}
    else:
        by_text = {text: [] for text in texts}
        for node in ordered:
            by_text[failed[node]].append(node)
    groups: dict[str, list[list[str]]] = {}
    for text, nodes in by_text.items():
        for name in reason_types(text):
            groups.setdefault(name, []).append(nodes)
    out = []
    for name in sorted(groups):
        lists = groups[name]
        # A node has one text and a text names a type once: no duplicates to merge away.
        nodes = lists[0] if len(lists) == 1 else sorted(chain.from_iterable(lists))
        out.append(f"{len(nodes)} nodes {name}({','.join(nodes)})")
    out.append(f"no available node, {len(failed)} nodes do not meet")
    return out


FAILURE_TEXTS_KEPT = 16
"""How many no-fit answers keep their FilteringFailed texts for the pod's retries (see
`FailureTexts`)."""


class FailureTexts:
    """`filtering_failed_messages` of recent no-fit answers, reused while the answer is.

    A retried pod's answer is its verdict snapshot's kept encoding (`encode_no_fit`): the same
    bytes object exactly while no verdict changed, and the texts are a function of the same
    verdicts. So the texts are kept by the answer object's identity (the entry holds the answer,
    so its id is not reused while kept)."""

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        # id(FailedNodes answer) -> (that answer, its FilteringFailed texts), most recent last.
        self._kept: OrderedDict[int, tuple[bytes, list[str]]] = OrderedDict()

    def of(self, decision: NoFit, answer: bytes) -> list[str]:
        """The texts of `decision`, whose encoding is `answer`."""
        kept = self._kept
        entry = kept.get(id(answer))
        if entry is not None and entry[0] is answer:
            kept.move_to_end(id(answer))
            return entry[1]
        messages = filtering_failed_messages(decision.failed)
        if decision.source is not None and decision.source.rendered is answer:
            kept[id(answer)] = (answer, messages)
            if len(kept) > FAILURE_TEXTS_KEPT:
                kept.popitem(last=False)
        return messages


def failed_by_type(failed: Mapping[str, str]) -> dict[str, list[str]]:
    """Reason type -> the nodes whose reason names it (HAMi's `ParseReason` grouping)."""
    by_type: dict[str, list[str]] = {}
    for node, reason in failed.items():
        for name in reason_types(reason):
            by_type.setdefault(name, []).append(node)
    return by_type


def failed_type_counts(
    failed: Mapping[str, str], text_counts: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Reason type -> how many nodes' reasons name it: `failed_by_type` without the node lists,
    counted per distinct reason text (a no-fit pod has a few texts for thousands of nodes).
    `text_counts`: how many nodes have each text, when the caller knows it."""
    if text_counts is None:
        text_counts = Counter(failed.values())
    counts: dict[str, int] = {}
    for reason, nodes in text_counts.items():
        for name in reason_types(reason):
            counts[name] = counts.get(name, 0) + nodes
    return counts


_REASON_TYPES: dict[str, tuple[str, ...]] = {}
_REASON_TYPES_MAX = 4096


def reason_types(reason: str) -> tuple[str, ...]:
    """The reason types a reason text names (`parse_reason`'s keys), parsed once per text."""
    types = _REASON_TYPES.get(reason)
    if types is None:
        if len(_REASON_TYPES) >= _REASON_TYPES_MAX:
            _REASON_TYPES.clear()
        types = _REASON_TYPES[reason] = tuple(parse_reason(reason))
    return types


NODE_UNREGISTERED_REASON = "NodeUnregistered"
OTHER_REASON = "Other"


def main_reason(by_type: Mapping[str, list[str]], failed: Mapping[str, str]) -> str:
    """The metric reason of a no-fit decision: the reason type naming the most nodes (ties: the
    first name), else NodeUnregistered when every candidate was unregistered, else Other. Always
    one of a fixed set, never free text or a node name."""
    return _main_reason({name: len(nodes) for name, nodes in by_type.items()}, failed)


def _main_reason(type_counts: Mapping[str, int], failed: Mapping[str, str]) -> str:
    """`main_reason` from `failed_type_counts`."""
    if type_counts:
        return min(type_counts.items(), key=lambda item: (-item[1], item[0]))[0]
    if failed and all(reason == NODE_UNREGISTERED for reason in failed.values()):
        return NODE_UNREGISTERED_REASON
    return OTHER_REASON
