"""Leadership by observing kube-scheduler's Lease (§8.2), with the captured Lease objects."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.builders import api_pod, container
from vgpu_scheduler.cluster.client import KubeClient
from vgpu_scheduler.cluster.leader import LeaderTracker, holder_is
from vgpu_scheduler.cluster.registration import RegistrationLoop
from vgpu_scheduler.cluster.store import Store
from vgpu_scheduler.devices.registry import build
from vgpu_scheduler.engine.state import SchedulerState
from vgpu_scheduler.standin.memory import MemoryCluster
from vgpu_scheduler.standin.transport import MemoryTransport
from vgpu_scheduler.wire import keys

Obj = dict[str, Any]
T0 = datetime(2026, 11, 29, 21, 5, 40, tzinfo=UTC)
HOST = "vm"  # the fixture's holder is "vm_87acf6b1-..."
NS, NAME = "hami-system", "hami-scheduler"


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> datetime:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += timedelta(seconds=seconds)


@dataclass
class Env:
    cluster: MemoryCluster
    client: KubeClient
    clock: Clock
    lease: Obj
    stream: list[Obj]
    trackers: list[LeaderTracker] = field(default_factory=list)

    def tracker(self, hostname: str = HOST, **kw: Any) -> LeaderTracker:
        params: dict[str, Any] = {
            "lease_name": NAME,
            "lease_namespace": NS,
            "now": self.clock,
            "poll_interval": 0.005,
        }
        params.update(kw)
        t = LeaderTracker(self.client, hostname=hostname, **params)
        self.trackers.append(t)
        return t

    def set_spec(self, **spec: Any) -> None:
        current = self.cluster.get("leases", NAME, NS)
        current["spec"].update(spec)
        self.cluster.update("leases", current)


def micro_time(moment: datetime) -> str:
    """A Lease's MicroTime text."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def eventually(cond: Callable[[], bool]) -> None:
    for _ in range(400):
        if cond():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached")


@pytest.fixture
async def env(fx: Any) -> AsyncIterator[Env]:
    cluster = MemoryCluster(seed=5)
    lease = fx.json("api/lease.hami-scheduler.raw.json")
    stream = [
        json.loads(line)["object"] for line in fx.text("api/watch-lease.stream.jsonl").splitlines() if line
    ]
    cluster.seed_from_list([lease])
    client = KubeClient(MemoryTransport(cluster))
    e = Env(cluster, client, Clock(), lease, stream)
    yield e
    for t in e.trackers:
        await t.stop()
    await client.close()


@pytest.mark.parametrize(
    ("holder", "hostname", "expected"),
    [
        ("vm_87acf6b1-cee0-4f9e-b7be-2e05de374587", "vm", True),
        ("vm", "vm", True),
        ("vm2_87acf6b1", "vm", False),  # HAMi's bare prefix test would say True
        ("other_1", "vm", False),
        ("", "vm", False),
        ("vm_1", "", False),
        ("hami-scheduler-7d9c8-abcde_1f2e", "hami-scheduler-7d9c8-abcde", True),
    ],
)
def test_holder_is(holder: str, hostname: str, expected: bool) -> None:
    assert holder_is(holder, hostname) is expected


def test_empty_hostname_is_refused() -> None:
    with pytest.raises(ValueError, match="hostname"):
        LeaderTracker(KubeClient(MemoryTransport(MemoryCluster())), hostname="")


async def test_disabled_is_always_leader(env: Env) -> None:
    t = env.tracker(enabled=False)
    t.start()  # nothing to watch
    assert t.reflector is None and t.has_synced
    assert t.is_leader()
    env.clock.advance(10**6)
    assert t.is_leader()


async def test_real_lease_makes_its_holder_leader(env: Env) -> None:
    changes: list[bool] = []
    t = env.tracker()
    other = env.tracker("somebody-else")
    t.add_listener(changes.append)
    assert not t.is_leader()  # nothing observed yet
    t.start()
    other.start()
    await eventually(lambda: t.has_synced and other.has_synced)
    assert t.is_leader() and not other.is_leader()
    assert changes == [True]
    assert t.holder == env.lease["spec"]["holderIdentity"]
    assert t.lease_duration == 15 and t.observed == T0
    assert t.expires_at() == T0 + timedelta(seconds=15)


async def test_expiry_renewal_and_deletion(env: Env) -> None:
    changes: list[bool] = []
    t = env.tracker()
    t.add_listener(changes.append)
    t.start()
    await eventually(t.is_leader)

    # Renewals (the captured MODIFIED events' specs, renewed now) push the deadline forward.
    for obj in env.stream:
        env.clock.advance(10)
        env.set_spec(**{**obj["spec"], "renewTime": micro_time(env.clock.t)})
        await eventually(lambda: t.observed == env.clock.t)
        assert t.is_leader()

    # No renewal seen for the lease duration: the timer steps down without any call from us.
    env.clock.advance(15)
    await eventually(lambda: changes == [True, False])
    assert not t.is_leader()

    # A renewal seen again: leader again.
    env.set_spec(renewTime=micro_time(env.clock.t))
    await eventually(lambda: changes == [True, False, True])

    # Another holder takes over.
    env.set_spec(holderIdentity="vm-2_0c1d")
    await eventually(lambda: changes == [True, False, True, False])

    # Back to us, then the Lease is deleted.
    env.set_spec(holderIdentity="vm_0c1d")
    await eventually(lambda: changes[-1] is True)
    env.cluster.delete("leases", NAME, NS)
    await eventually(lambda: changes[-1] is False)
    assert t.observed is None and t.holder == ""


async def test_a_renewal_read_after_the_process_stood_still_counts_from_its_renew_time(env: Env) -> None:
    """SIGSTOPped past its lease, a replica reads its own renewal from before the pause (it waited
    in the socket): that renewal must not make it the leader for another lease from now."""
    changes: list[bool] = []
    t = env.tracker()
    t.add_listener(changes.append)
    env.set_spec(renewTime=micro_time(env.clock.t))
    t.start()
    await eventually(t.is_leader)
    renewed_before_the_pause = micro_time(env.clock.t)

    env.clock.advance(20)  # stood still past the 15 s lease
    env.set_spec(renewTime=renewed_before_the_pause, leaseTransitions=7)  # delivered at wake-up
    await eventually(lambda: t.observed is not None and t.observed < env.clock.t)
    assert not t.is_leader()
    assert t.observed == T0 and changes == [True, False]

    # A renewal written after the wake-up counts as usual.
    env.clock.advance(0.5)
    env.set_spec(renewTime=micro_time(env.clock.t))
    await eventually(t.is_leader)
    assert t.observed == env.clock.t and changes == [True, False, True]


async def test_a_renewal_dated_ahead_counts_from_when_it_was_read(env: Env) -> None:
    """The writer's clock may run ahead of ours: after a stall, `renewTime` is used only when it
    is earlier than now, so such a renewal counts from now as any other."""
    t = env.tracker()
    t.start()
    await eventually(t.is_leader)
    env.clock.advance(20)
    env.set_spec(renewTime=micro_time(env.clock.t + timedelta(seconds=30)))
    await eventually(lambda: t.observed == env.clock.t)
    assert t.is_leader()


async def test_other_leases_in_the_namespace_are_ignored(env: Env) -> None:
    t = env.tracker()
    obj = copy.deepcopy(env.stream[0])
    obj["metadata"]["name"] = "kube-scheduler"
    t.on_add(obj)
    assert t.observed is None and not t.is_leader()
    t.on_add(env.stream[0])
    assert t.is_leader()
    t.on_delete(obj)
    assert t.is_leader()


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"holderIdentity": "vm_1"}, id="no duration"),
        pytest.param({"holderIdentity": "vm_1", "leaseDurationSeconds": "15"}, id="duration a string"),
        pytest.param({"holderIdentity": None, "leaseDurationSeconds": 15}, id="holder null"),
        pytest.param({"holderIdentity": 7, "leaseDurationSeconds": 15}, id="holder a number"),
    ],
)
async def test_malformed_lease_never_makes_a_leader(env: Env, spec: Obj) -> None:
    t = env.tracker()
    t.on_add({"metadata": {"name": NAME, "namespace": NS}, "spec": spec})
    assert not t.is_leader()


def pod(name: str, role: str | None = None, component: str = "hami-scheduler") -> Obj:
    labels = {"app.kubernetes.io/component": component}
    if role is not None:
        labels[keys.SCHEDULER_ROLE_LABEL] = role
    return api_pod(name, namespace=NS, labels=labels, containers=[container("c", image="x")])


def roles(cluster: MemoryCluster) -> dict[str, str | None]:
    return {
        p["metadata"]["name"]: (p["metadata"].get("labels") or {}).get(keys.SCHEDULER_ROLE_LABEL)
        for p in cluster.objects("pods", NS)
    }


def patches(cluster: MemoryCluster) -> int:
    return sum(1 for verb, _, path in cluster.request_log if verb == "patch" and "/pods/" in path)


async def test_leader_labels_scheduler_pods(env: Env) -> None:
    for p in (pod("me"), pod("peer-1", "leader"), pod("peer-2", "follower"), pod("web", component="other")):
        env.cluster.create("pods", p)
    t = env.tracker(pod_name="me", pod_namespace=NS)
    t.start()
    await eventually(t.is_leader)
    await t.label_pods()
    assert roles(env.cluster) == {"me": "leader", "peer-1": "follower", "peer-2": "follower", "web": None}
    assert patches(env.cluster) == 2  # peer-2 already had the right label
    await t.label_pods()
    assert patches(env.cluster) == 2  # nothing differs any more


async def test_follower_and_unconfigured_do_not_label(env: Env) -> None:
    env.cluster.create("pods", pod("me"))
    follower = env.tracker("someone", pod_name="me", pod_namespace=NS)
    follower.start()
    await eventually(lambda: follower.has_synced)
    await follower.label_pods()
    no_env = env.tracker(enabled=False)
    await no_env.label_pods()
    assert roles(env.cluster) == {"me": None} and patches(env.cluster) == 0


async def test_label_errors_are_logged_not_raised(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    env.cluster.create("pods", pod("me"))
    env.cluster.create("pods", pod("peer"))
    t = env.tracker(enabled=False, pod_name="me", pod_namespace=NS)
    env.cluster.fail_next("list", 1, 503, resource="pods")
    await t.label_pods()
    assert "listing scheduler pods" in caplog.text
    env.cluster.fail_next("patch", 1, 500, resource="pods")
    await t.label_pods()
    assert "labelling pod" in caplog.text
    await t.label_pods()
    assert roles(env.cluster) == {"me": "leader", "peer": "follower"}


async def test_leadership_drives_the_registration_loop(env: Env) -> None:
    """Gaining leadership runs a pass at once; losing it clears synced and stops passes."""
    env.cluster.create("pods", pod("me"))
    t = env.tracker(pod_name="me", pod_namespace=NS)
    loop = RegistrationLoop(
        env.client,
        SchedulerState(build()),
        Store(),
        now=env.clock,
        tz=UTC,
        interval=3600,
        is_leader=t.is_leader,
        on_pass=t.label_pods,
    )
    t.add_listener(loop.on_leader_change)
    env.set_spec(holderIdentity="someone_1")
    loop.start()
    t.start()
    try:
        await eventually(lambda: t.has_synced)
        await asyncio.sleep(0.02)
        assert loop.passes == 0 and not loop.synced.is_set()
        env.set_spec(holderIdentity="vm_2")
        await eventually(lambda: loop.synced.is_set())
        assert loop.passes == 1
        await eventually(lambda: roles(env.cluster) == {"me": "leader"})
        env.clock.advance(16)
        await eventually(lambda: not loop.synced.is_set())
        assert loop.passes == 1
    finally:
        await loop.stop()
