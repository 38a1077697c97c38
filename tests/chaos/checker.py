"""The rules a chaos run must keep, checked over its whole history (history.py), not one snapshot.

* `overcommit`: at no moment do the live pods holding a device use more than its count, memory or
  cores (read against the node's inventory of that moment);
* `exclusive`: no device held by a pod using all its cores is shared with another pod;
* `wrong-node`: no pod carries a device of another node than the one it is bound to, and its
  `hami.io/vgpu-node` names that node; `bad-annotation`: its allocation decodes;
* `stale-lock`: no node lock outlives its timeout (plus `grace`) while nothing excuses it: no fault
  overlapped its life, and its pod was neither deleted nor bound elsewhere (a dangling lock, which
  the next bind takes over);
* `stale-leader-write`: a replica woken from a pause longer than its lease writes nothing (Events
  aside) while another replica holds the Lease, until it holds it again;
* `unsettled` (from the final state, `final_problems`): every pod is bound and confirmed, or pending
  with a FailedScheduling reason that is a verdict of the filter, not an error; an unscheduled pod
  being deleted (a DELETE cut by a kube-apiserver kill between setting its deletionTimestamp and
  removing it) is neither: kube-scheduler skips it, and a cluster's PodGC (no controller-manager
  here) force-deletes it;
* `not-converged`: that final state was reached within `converge_limit` seconds of the faults
  stopping.

Pure functions over records: tests/chaos/test_checker.py feeds them synthetic histories.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from history import Device, FaultRecord, History, NodeSeen, PodSeen, WriteSeen

from vgpu_scheduler.cluster.nodelock import NodeLockError, parse_lock

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
VERDICT = re.compile(r"^\d+/\d+ nodes are available")
"""A FailedScheduling note that is the filter's answer (no node fits), not an error of a call."""


@dataclass(frozen=True, slots=True)
class Violation:
    kind: str
    t: float
    message: str


@dataclass
class Verdict:
    violations: list[Violation] = field(default_factory=list)
    recovery: dict[str, list[float]] = field(default_factory=dict)
    """Fault kind -> seconds from each fault's end until a pod bound after it is confirmed."""
    placed: int = 0
    """Pods seen confirmed at least once."""

    def kinds(self) -> dict[str, int]:
        out: dict[str, int] = defaultdict(int)
        for v in self.violations:
            out[v.kind] += 1
        return dict(out)


def check(history: History, *, lock_timeout: float, grace: float = 5.0) -> Verdict:
    """Every rule over the history (the final-state rules are `final_problems`)."""
    verdict = Verdict()
    verdict.violations.extend(allocation_violations(history))
    verdict.violations.extend(lock_violations(history, lock_timeout=lock_timeout, grace=grace))
    verdict.violations.extend(stale_leader_writes(history))
    verdict.recovery = recovery_times(history)
    verdict.placed = len({p.pod for p in history.pods if p.phase == "success"})
    return verdict


def _merged(history: History) -> list[PodSeen | NodeSeen]:
    events: list[PodSeen | NodeSeen] = [*history.pods, *history.nodes]
    # Stable on ties: a node (re)registration before the pods seen at the same instant.
    events.sort(key=lambda e: (e.t, 0 if isinstance(e, NodeSeen) else 1))
    return events


def allocation_violations(history: History) -> list[Violation]:
    """overcommit, exclusive, wrong-node and bad-annotation, replayed in time order."""
    out: list[Violation] = []
    inventory: dict[str, dict[str, Device]] = {}  # node -> uuid -> device, as registered now
    owners: dict[str, set[str]] = defaultdict(set)  # uuid -> every node that ever registered it
    pods: dict[str, PodSeen] = {}  # live pods holding devices
    holders: dict[str, set[str]] = defaultdict(set)  # uuid -> pods
    reported: set[tuple[str, str]] = set()  # (kind, subject): one violation per device or pod

    def report(kind: str, subject: str, t: float, message: str) -> None:
        if (kind, subject) not in reported:
            reported.add((kind, subject))
            out.append(Violation(kind, t, message))

    def audit(uuid: str, t: float) -> None:
        names = holders.get(uuid) or set()
        if not names:
            return
        node = pods[next(iter(names))].node
        dev = inventory.get(node, {}).get(uuid)
        if dev is None:
            return  # the node is gone (its pods go too) or never had it: wrong-node says so
        uses = [u for name in names for u in pods[name].devices if u.uuid == uuid]
        mem, cores = sum(u.mem for u in uses), sum(u.cores for u in uses)
        if len(uses) > dev.count or mem > dev.mem or cores > dev.cores:
            report("overcommit", uuid, t, f"{uuid} on {node}: {len(uses)} pods, {mem} MiB, {cores}% "
                   f"> {dev.count}, {dev.mem} MiB, {dev.cores}% by {sorted(names)}")
        if len(uses) > 1 and dev.cores > 0 and any(u.cores >= dev.cores for u in uses):
            report("exclusive", uuid, t, f"{uuid} on {node}: held exclusively and shared by {sorted(names)}")

    for e in _merged(history):
        if isinstance(e, NodeSeen):
            inventory[e.node] = {} if e.deleted else {d.uuid: d for d in e.devices}
            for d in e.devices:
                owners[d.uuid].add(e.node)
                audit(d.uuid, e.t)
            continue
        old = pods.pop(e.pod, None)
        if old is not None:
            for u in old.devices:
                holders[u.uuid].discard(e.pod)
        if e.bad:
            report("bad-annotation", e.pod, e.t, f"{e.pod}: {e.bad}")
        if e.deleted or e.done or not e.node or not e.devices:
            continue  # unbound (its annotations are a proposal a new filter may replace) or ended
        pods[e.pod] = e
        if e.vgpu_node and e.vgpu_node != e.node:
            report("wrong-node", e.pod, e.t, f"{e.pod}: bound to {e.node}, vgpu-node says {e.vgpu_node}")
        for u in e.devices:
            if e.node not in owners.get(u.uuid, ()):
                where = sorted(owners.get(u.uuid, ())) or "no node"
                report("wrong-node", e.pod, e.t, f"{e.pod}: on {e.node} with device {u.uuid} of {where}")
            holders[u.uuid].add(e.pod)
        for uuid in {u.uuid for u in e.devices}:
            audit(uuid, e.t)
    return out


def _overlaps(faults: Iterable[FaultRecord], start: float, end: float, grace: float) -> bool:
    return any(f.start <= end and (f.end or float("inf")) + grace >= start for f in faults)


def lock_violations(history: History, *, lock_timeout: float, grace: float) -> list[Violation]:
    """stale-lock: each lock value's life on its node, from first seen to gone or changed."""
    out: list[Violation] = []
    end_of_history = max((e.t for e in [*history.pods, *history.nodes]), default=0.0)
    lives: list[tuple[str, str, float, float]] = []  # node, value, since, until
    current: dict[str, tuple[str, float]] = {}
    for n in sorted(history.nodes, key=lambda e: e.t):
        value = "" if n.deleted else n.lock
        held = current.get(n.node)
        if held is not None and held[0] != value:
            lives.append((n.node, held[0], held[1], n.t))
            del current[n.node]
        if value and n.node not in current:
            current[n.node] = (value, n.t)
    lives.extend((node, value, since, end_of_history) for node, (value, since) in current.items())
    pod_states = _pod_timelines(history.pods)
    for node, value, since, until in lives:
        if until - since <= lock_timeout + grace:
            continue
        if _overlaps(history.faults, since, since + lock_timeout + grace, grace):
            continue
        try:
            lock = parse_lock(value)
        except NodeLockError:
            continue  # an unparsable lock is taken over at once: not held
        holder = f"{lock.namespace}/{lock.pod}"
        if _dangling(pod_states.get(holder, []), node, since + lock_timeout):
            continue
        out.append(Violation("stale-lock", since + lock_timeout + grace,
                             f"{node}: lock {value!r} held {until - since:.0f}s (timeout {lock_timeout:g}s)"))
    return out


def _pod_timelines(pods: Iterable[PodSeen]) -> dict[str, list[PodSeen]]:
    out: dict[str, list[PodSeen]] = defaultdict(list)
    for p in pods:
        out[p.pod].append(p)
    return out


def _dangling(states: list[PodSeen], node: str, at: float) -> bool:
    """The lock's pod was deleted, or bound to another node, by `at`: nobody will release it."""
    before = [s for s in states if s.t <= at]
    if not states or not before:
        return not states  # never seen: created and deleted between two watch events
    last = before[-1]
    return last.deleted or bool(last.node and last.node != node)


def stale_leader_writes(history: History, *, grace: float = 1.0) -> list[Violation]:
    """Writes of a replica woken from a pause while another replica held the Lease, before it
    held it again. A replica the Lease still named when it woke (nobody took over meanwhile)
    leads again once it renews: its writes count only while the Lease names another one. `grace`:
    the recorder sees a Lease change one watch hop late, as the replica does."""
    out: list[Violation] = []
    leaders = sorted(history.leaders, key=lambda ls: ls.t)

    def holder_at(t: float) -> str:
        current = ""
        for ls in leaders:
            if ls.t > t:
                break
            current = ls.replica
        return current

    for fault in history.faults:
        if fault.kind != "leader-pause" or not fault.end:
            continue
        back = next((ls.t for ls in leaders if ls.t > fault.end and ls.replica == fault.target),
                    float("inf"))
        for w in history.writes:
            if not (w.replica == fault.target and fault.end <= w.t < back and _counts(w)):
                continue
            if holder_at(w.t) != w.replica and holder_at(w.t + grace) != w.replica:
                out.append(Violation("stale-leader-write", w.t,
                                     f"{w.replica} woke at {fault.end:.1f} and sent {w.method} {w.path} "
                                     f"while {holder_at(w.t) or 'nobody'} held the Lease"))
    return out


def _counts(w: WriteSeen) -> bool:
    return w.method in WRITE_METHODS and "/events" not in w.path


def recovery_times(history: History) -> dict[str, list[float]]:
    """For each healed fault, seconds from its end until the first pod bound after it is seen
    confirmed: scheduling works again end to end (a bind in flight before the end does not count,
    so a killed leader's recovery includes the takeover)."""
    bound_at: dict[str, float] = {}
    confirmed: list[tuple[float, float]] = []  # (bound at, confirmed at)
    for p in sorted(history.pods, key=lambda e: e.t):
        if p.deleted:
            bound_at.pop(p.pod, None)
            continue
        if p.node and p.pod not in bound_at:
            bound_at[p.pod] = p.t
        if p.phase == "success" and p.pod in bound_at:
            confirmed.append((bound_at.pop(p.pod), p.t))
            bound_at[p.pod] = float("inf")  # counted once
    out: dict[str, list[float]] = defaultdict(list)
    for fault in history.faults:
        if not fault.end:
            continue
        after = min((c for b, c in confirmed if b >= fault.end), default=None)
        if after is not None:
            out[fault.kind].append(after - fault.end)
    return dict(out)


def final_problems(
    pods: Iterable[Mapping[str, object]], reasons: Mapping[str, str], *, t: float = 0.0
) -> list[Violation]:
    """unsettled: pods (API objects) neither bound and confirmed nor pending with a verdict."""
    out: list[Violation] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        assert isinstance(meta, Mapping)
        name = str(meta.get("name"))
        spec = pod.get("spec") or {}
        assert isinstance(spec, Mapping)
        node = spec.get("nodeName")
        if not node and meta.get("deletionTimestamp"):
            continue  # terminating, never to be scheduled: PodGC's to remove
        phase = (meta.get("annotations") or {}).get("hami.io/bind-phase")
        if node and phase != "success":
            out.append(Violation("unsettled", t, f"{name}: bound to {node}, bind-phase {phase}"))
        elif not node and not VERDICT.match(reasons.get(name, "")):
            out.append(Violation("unsettled", t, f"{name}: pending, last reason {reasons.get(name)!r}"))
    return out


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]
