"""Leadership by Lease observation (§8.2).

The extender runs no election of its own: kube-scheduler, in the same pod, holds the Lease
`--leader-elect-resource-name` in `--leader-elect-resource-namespace` with identity
`<hostname>_<uuid>`. We watch that Lease and are the leader while its holder is our hostname and
the last time *we saw* it change (`observedTime`, local) plus `leaseDurationSeconds` is in the
future — so a leader whose watch goes quiet steps down by itself once the lease would have expired.
One exception: a Lease change read just after this process stood still (SIGSTOPped, or its loop
blocked, for longer than `STALL`) may have waited in the socket all that time, so it counts from
its own `renewTime` when that is earlier: a replica paused past its lease, woken by its own stale
renewal, must not think it leads for another lease (its writes would land after another's).
A timer re-evaluates that deadline; listeners hear every change (the registration loop runs a pass
at once on gaining leadership and clears `synced` on losing it).

Without `--leader-elect` the instance is always the leader.

While leader, `label_pods()` (run after every registration pass) labels the scheduler pods of
`$POD_NAMESPACE` (`app.kubernetes.io/component=hami-scheduler`) `hami.io/scheduler-role=leader` for
`$POD_NAME` and `follower` for the others, patching only the ones whose label differs; the chart's
Service selects `hami.io/scheduler-role: leader`, so this is what steers traffic to the leader.

One deliberate tightening: HAMi accepts any holder that *starts with* the hostname; here the
holder must be the hostname itself or `<hostname>_...`, so pod `sched-1` never takes the lease of
`sched-10`. With kube-scheduler's `<hostname>_<uuid>` identities both rules agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.errors import ApiConnectionError, ApiError
from vgpu_scheduler.cluster.reflector import Reflector
from vgpu_scheduler.gocompat.gotime import GoTimeParseError, parse_rfc3339
from vgpu_scheduler.wire import keys, objects

log = logging.getLogger(__name__)

Obj = dict[str, Any]

COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT_VALUE = "hami-scheduler"
ROLE_LEADER = "leader"
ROLE_FOLLOWER = "follower"


STALL = timedelta(seconds=2)
"""A gap this long between two turns of the tracker (its timer turns at least every second) means
the process stood still; Lease changes read in the next `SUSPECT` may have waited meanwhile."""
SUSPECT = timedelta(seconds=1)


def utc_now() -> datetime:
    return datetime.now(UTC)


def holder_is(holder: str, hostname: str) -> bool:
    """Does the Lease holder identity name this host? (`<hostname>_<uuid>` for kube-scheduler.)"""
    return bool(hostname) and (holder == hostname or holder.startswith(hostname + "_"))


def _renew_time(obj: Mapping[str, Any]) -> datetime | None:
    """The Lease's `spec.renewTime` (MicroTime), None when absent or unreadable."""
    value = objects.spec(obj).get("renewTime")
    if not isinstance(value, str):
        return None
    try:
        return parse_rfc3339(value)
    except GoTimeParseError:
        return None


def _lease_fields(obj: Mapping[str, Any]) -> tuple[str, str, int]:
    """(name, holderIdentity, leaseDurationSeconds) of a Lease dict; bad fields read as empty/0."""
    spec = objects.spec(obj)
    holder = spec.get("holderIdentity")
    duration = spec.get("leaseDurationSeconds")
    return (
        objects.name(obj),
        holder if isinstance(holder, str) else "",
        duration if isinstance(duration, int) and not isinstance(duration, bool) else 0,
    )


class LeaderTracker:
    def __init__(
        self,
        client: KubeClient,
        *,
        hostname: str,
        enabled: bool = True,
        lease_name: str = "",
        lease_namespace: str = "",
        pod_name: str | None = None,
        pod_namespace: str | None = None,
        now: Callable[[], datetime] = utc_now,
        poll_interval: float = 1.0,
    ) -> None:
        """enabled: --leader-elect. lease_name/lease_namespace: --leader-elect-resource-name and
        --leader-elect-resource-namespace. pod_name/pod_namespace: $POD_NAME/$POD_NAMESPACE (labels
        are not written when either is empty). now: aware clock for observedTime and expiry.
        poll_interval: upper bound between two re-evaluations of the expiry."""
        if not hostname:
            raise ValueError("hostname is empty: it is the leader identity")
        self.client = client
        self.hostname = hostname
        self.enabled = enabled
        self.lease_name = lease_name
        self.lease_namespace = lease_namespace
        self.pod_name = pod_name or ""
        self.pod_namespace = pod_namespace or ""
        self.now = now
        self.poll_interval = poll_interval
        self.holder = ""
        self.lease_duration = 0
        self.observed: datetime | None = None
        self._last_turn: datetime | None = None  # the tracker's last timer turn or observation
        self._suspect_until: datetime | None = None  # observations until then may be stale
        self._leader = not enabled
        self._listeners: list[Callable[[bool], None]] = []
        self._poke = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self.reflector: Reflector | None = None
        if enabled:
            self.reflector = Reflector(
                client,
                api.LEASES,
                namespace=lease_namespace or None,
                field_selector=f"metadata.name={lease_name}" if lease_name else None,
                handler=self,
            )

    # -- state -----------------------------------------------------------------------------------

    def add_listener(self, listener: Callable[[bool], None]) -> None:
        """Called with the new value on every leadership change (from the event loop thread)."""
        self._listeners.append(listener)

    def expires_at(self) -> datetime | None:
        if self.observed is None:
            return None
        return self.observed + timedelta(seconds=self.lease_duration)

    def _compute(self) -> bool:
        if not self.enabled:
            return True
        expiry = self.expires_at()
        return expiry is not None and holder_is(self.holder, self.hostname) and expiry > self.now()

    def evaluate(self) -> bool:
        """Re-evaluate at `now()`; tell the listeners if leadership changed. Returns it."""
        leader = self._compute()
        if leader != self._leader:
            self._leader = leader
            if leader:
                log.info(
                    "became the leader (lease %s/%s held by %s)",
                    self.lease_namespace,
                    self.lease_name,
                    self.holder,
                )
            else:
                log.info("not the leader any more (lease holder %r)", self.holder)
            for listener in list(self._listeners):
                try:
                    listener(leader)
                except Exception:
                    log.exception("leadership listener failed")
        return leader

    def is_leader(self) -> bool:
        return self.evaluate()

    @property
    def has_synced(self) -> bool:
        return self.reflector is None or self.reflector.has_synced

    # -- Reflector handler -----------------------------------------------------------------------

    def on_add(self, obj: Obj) -> None:
        self._observe(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        self._observe(new)

    def on_delete(self, obj: Obj) -> None:
        name, _, _ = _lease_fields(obj)
        if name != self.lease_name:
            return
        self.holder, self.lease_duration, self.observed = "", 0, None
        self.evaluate()
        self._poke.set()

    def _observe(self, obj: Obj) -> None:
        name, holder, duration = _lease_fields(obj)
        if name != self.lease_name:
            return
        now = self._turn()
        observed = now
        if self._suspect_until is not None and now <= self._suspect_until:
            renewed = _renew_time(obj)
            if renewed is not None and renewed < now:
                observed = renewed
        self.holder, self.lease_duration, self.observed = holder, duration, observed
        self.evaluate()
        self._poke.set()

    def _turn(self) -> datetime:
        """Now, noting a stall since the last turn (see STALL)."""
        now = self.now()
        last, self._last_turn = self._last_turn, now
        if last is not None and now - last > STALL:
            log.info("the process stood still for %.1fs: Lease changes read now count from their renewTime",
                     (now - last).total_seconds())
            self._suspect_until = now + SUSPECT
        return now

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        if self.reflector is None:
            return
        self.reflector.start()
        if self._timer is None or self._timer.done():
            self._timer = asyncio.get_running_loop().create_task(self._run_timer(), name="lease expiry")

    async def stop(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None and not timer.done():
            timer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await timer
        if self.reflector is not None:
            await self.reflector.stop()

    async def _run_timer(self) -> None:
        while True:
            self._poke.clear()
            self._turn()
            leader = self.evaluate()
            delay = self.poll_interval
            expiry = self.expires_at()
            if leader and expiry is not None:
                delay = min(delay, max((expiry - self.now()).total_seconds(), 0.0))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poke.wait(), delay)

    # -- role labels -----------------------------------------------------------------------------

    async def label_pods(self) -> None:
        """While leader: `hami.io/scheduler-role` = leader on our pod, follower on the other
        scheduler pods, patched only where it differs. Errors are logged."""
        if not self.pod_name or not self.pod_namespace or not self.is_leader():
            return
        try:
            pods = await self.client.list_pods(
                self.pod_namespace, label_selector=f"{COMPONENT_LABEL}={COMPONENT_VALUE}"
            )
        except (ApiError, ApiConnectionError) as exc:
            log.warning("listing scheduler pods in %s failed: %s", self.pod_namespace, exc)
            return
        for pod in pods:
            name = objects.name(pod)
            if not name:
                continue
            role = ROLE_LEADER if name == self.pod_name else ROLE_FOLLOWER
            labels = objects.labels(pod)
            if labels.get(keys.SCHEDULER_ROLE_LABEL) == role:
                continue
            try:
                await self.client.patch_pod_labels(
                    self.pod_namespace, name, {keys.SCHEDULER_ROLE_LABEL: role}
                )
                log.info(
                    "pod %s/%s labelled %s=%s", self.pod_namespace, name, keys.SCHEDULER_ROLE_LABEL, role
                )
            except (ApiError, ApiConnectionError) as exc:
                log.warning("labelling pod %s/%s %s failed: %s", self.pod_namespace, name, role, exc)
