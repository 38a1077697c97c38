"""Per-device failure reasons and HAMi's reason string (§5.3).

The names are part of the wire contract: kube-scheduler shows them in FailedNodes and HAMi's
events/metrics are keyed by them, so they are spelled exactly as HAMi spells them.
"""

from __future__ import annotations

from collections.abc import Mapping

CARD_TYPE_MISMATCH = "CardTypeMismatch"
CARD_UUID_MISMATCH = "CardUuidMismatch"
CARD_TIME_SLICING_EXHAUSTED = "CardTimeSlicingExhausted"
CARD_COMPUTE_UNITS_EXHAUSTED = "CardComputeUnitsExhausted"
CARD_INSUFFICIENT_MEMORY = "CardInsufficientMemory"
CARD_INSUFFICIENT_CORE = "CardInsufficientCore"
CARD_NOT_HEALTH = "CardNotHealth"
CARD_CORDONED = "CardCordoned"
NUMA_NOT_FIT = "NumaNotFit"
EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT = "ExclusiveDeviceAllocateConflict"
CARD_NOT_FOUND_CUSTOM_FILTER_RULE = "CardNotFoundCustomFilterRule"
CARD_MIG_TOPOLOGY_INFEASIBLE = "CardMigTopologyInfeasible"
NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
ALLOCATED_CARDS_INSUFFICIENT_REQUEST = "AllocatedCardsInsufficientRequest"
RESOURCE_QUOTA_NOT_FIT = "ResourceQuotaNotFit"
MODE_NOT_FIT = "ModeNotFit"
# Metax-only names, kept so every reason HAMi can emit has a constant.
CARD_UNHEALTHY = "CardUnhealthy"
CARD_QOS_POLICY_MISMATCH = "CardQosPolicyMismatch"
CARD_APP_CLASS_MISMATCH = "CardAppClassMismatch"

ALL_REASONS: frozenset[str] = frozenset(
    {
        CARD_TYPE_MISMATCH,
        CARD_UUID_MISMATCH,
        CARD_TIME_SLICING_EXHAUSTED,
        CARD_COMPUTE_UNITS_EXHAUSTED,
        CARD_INSUFFICIENT_MEMORY,
        CARD_INSUFFICIENT_CORE,
        CARD_NOT_HEALTH,
        CARD_CORDONED,
        NUMA_NOT_FIT,
        EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT,
        CARD_NOT_FOUND_CUSTOM_FILTER_RULE,
        CARD_MIG_TOPOLOGY_INFEASIBLE,
        NODE_INSUFFICIENT_DEVICE,
        ALLOCATED_CARDS_INSUFFICIENT_REQUEST,
        RESOURCE_QUOTA_NOT_FIT,
        MODE_NOT_FIT,
        CARD_UNHEALTHY,
        CARD_QOS_POLICY_MISMATCH,
        CARD_APP_CLASS_MISMATCH,
    }
)


def gen_reason(counts: Mapping[str, int], total: int) -> str:
    """`"<count>/<total> <Reason>"` entries, sorted as strings, joined with ", ".

    HAMi iterates a Go map (random order) and then sorts the formatted entries, so the sort is
    over the whole entry text (count first), not over the reason name.
    """
    return ", ".join(sorted(f"{count}/{total} {reason}" for reason, count in counts.items()))


def parse_reason(reason: str) -> dict[str, int]:
    """Reason name -> count of a `gen_reason` string; unknown words (free-form errors) are dropped.

    Used to group failed nodes per reason type for events (HAMi's `ParseReason`).
    """
    out: dict[str, int] = {}
    for part in reason.split(","):
        count_total, _, name = part.strip().partition(" ")
        count, slash, _total = count_total.partition("/")
        if slash and name in ALL_REASONS and count.isdigit():
            out[name] = out.get(name, 0) + int(count)
        elif not slash and count_total in ALL_REASONS and not name:
            out[count_total] = out.get(count_total, 0) + 1
    return out
