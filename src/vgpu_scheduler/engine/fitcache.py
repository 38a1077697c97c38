"""Cache of the node scores of fits, for decisions that evaluate every node (`walk_all`, `walk_bounded`).

A pod asking a vendor whose ScoreNode is not always 0 (or a call with `evaluate_all`) is placed by
the best total score over the candidate nodes it fits (visited best bound first, or all of them).
Between two decisions for pods of the same shape most nodes did not change, so their outcome did
not either. The outcome on one node — the
pod fits with total score S, or fails with reason R — is a pure function of

* the pod's fit fingerprint (`verdicts.pod_fingerprint`) and the namespace's quota token
  (`verdicts.quota_token`): everything the fit reads of the pod and of the quota, as for verdicts;
* the node's generation: inventory, cordon, node annotations, usage (hence the default score and
  the `previous` usage a ScoreNode reads), and — since `decide` touches the chosen node after the
  vendors' PatchAnnotations — any per-device state a vendor records when it places a pod there;
* for the vendor part of the score: the node policy (binpack/spread, from the pod annotation or
  the default) and the pod's annotations. A vendor's ScoreNode may read pod annotations outside
  its fit filters (e.g. a topology opt-in carried by its allocation entries), and the engine does
  not know which, so the whole (string) annotation set is part of the key. Replicas of one
  workload share their annotations, so this costs little sharing in practice.

Failures are kept in the state's verdict cache (keyed by fingerprint alone: a reason does not
depend on the node policy or the other annotations); fits are kept here as group -> node ->
(generation, total score), grouped by `fit_key`. Only the score is kept, never the NodeFit: the
decision fits the chosen node once more for the pod at hand (its allocation entries may carry the
pod's own annotations), so a cached decision returns exactly what an uncached one returns.

The size is bounded the same way as the verdicts (`VerdictCache`: LRU of groups, scan-resistant,
entries of a removed node dropped).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from vgpu_scheduler.engine.verdicts import PodFingerprint, VerdictCache

DEFAULT_MAX_ENTRIES = 200_000
"""(node, score) entries over all groups: ~40 shapes of pods over 5,000 nodes."""

FitScores = VerdictCache[float]


def fit_scores_cache(max_entries: int = DEFAULT_MAX_ENTRIES) -> FitScores:
    return VerdictCache(max_entries)


def fit_key(
    fingerprint: PodFingerprint, *, node_policy: str, annotations: Mapping[str, str], scored: bool
) -> Hashable:
    """The group key of a pod's fit scores. Without a scoring vendor the total score is the node
    default score alone, so neither the node policy nor the annotations matter."""
    if not scored:
        return (fingerprint, None, None)
    return (fingerprint, node_policy, frozenset(annotations.items()))
