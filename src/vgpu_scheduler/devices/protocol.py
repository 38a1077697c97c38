"""The device protocol: everything the engine and the cluster layer ask of one vendor backend.

HAMi's `Devices` interface (pkg/device/devices.go) in Python. A vendor is an object with the
attributes and methods of `Vendor`; `Vendors` is the registered set, in registration order, that
the composition builds once (`devices.registry.build`) and hands to the engine and the cluster
layer. The engine imports this module and nothing else of `devices`: it never names a vendor,
and no vendor imports the engine.

Besides the protocol this module holds the small data shapes the calls exchange: the per-pod fit
context, a fit result, a health verdict, the resource names and the errors a vendor raises.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo
from typing import Any, Protocol

from vgpu_scheduler.model import (
    ContainerDevice,
    ContainerDeviceRequest,
    ContainerDevices,
    DeviceInfo,
    DeviceUsage,
    MigAllocation,
    PodSingleDevice,
)

Obj = Mapping[str, Any]

NodeBound = Callable[[Mapping[str, str], Sequence[DeviceInfo], Sequence[DeviceUsage]], float | None]
QuickJudge = Callable[
    [Sequence[DeviceInfo], Sequence[DeviceUsage], Sequence[int], frozenset[str]], str | None
]
"""`Vendor.quick_verdict` of one request for one pod, as a function of (devices, usage, positions,
cordoned)."""
"""A vendor's score bound on one node, from its annotations, devices and usage (`node_score_bound`)."""


@dataclass(slots=True, frozen=True)
class MemoryShortfall:
    """A request's verdict on a node no device of which has `need` memory free, while every device
    of the node is of the request's vendor, healthy, uncordoned, MIG-free and has a free slot: then
    every device fails the memory check and the reason is `text(device count)` (`memory_shortfall`)."""

    need: int
    text: Callable[[int], str]


@dataclass(slots=True, frozen=True)
class Pinned:
    """A request restricted to some device ids (the pod's use-uuid filter, `Vendor.pinned_devices`)."""

    ids: frozenset[str]
    elsewhere: Hashable
    """Equal for two requests whose verdicts agree on every node holding none of either's ids
    (what the verdict there reads of the request: its count and type filters, not its uuids)."""


class VendorFlags:
    """The command-line flags vendors read (§1.2): the enable gates that are on and the legacy
    per-vendor flags, both by option name (`VendorFlags(enable_ascend=True)`). Which options
    exist is each vendor's declaration (`devices.spec.VendorSpec`)."""

    __slots__ = ("gates", "legacy")

    def __init__(self, *, legacy: Mapping[str, object] | None = None, **gates: bool) -> None:
        self.gates: frozenset[str] = frozenset(name for name, on in gates.items() if on)
        """The gate options set (`enable_ascend`, …)."""
        self.legacy: Mapping[str, object] = dict(legacy or {})
        """Legacy per-vendor flags by option name (`dcu_name`, `metax_vcount`, …). HAMi overwrites
        them with the configuration file's values, so they matter only where a vendor says so."""

    def enabled(self, gate: str) -> bool:
        """True when the gate option `gate` is on ("" is no gate: always on)."""
        return not gate or gate in self.gates

    def __repr__(self) -> str:
        return f"VendorFlags(gates={sorted(self.gates)}, legacy={dict(self.legacy)})"


class VendorConfigError(ValueError):
    """A vendor's configuration section cannot be used (the process stops, as HAMi's does).

    `key` is the path of the offending key (the registry prefixes the section name)."""

    def __init__(self, problem: str, key: str = "") -> None:
        super().__init__(f"{key}: {problem}" if key else problem)
        self.problem = problem
        self.key = key


class MutationError(ValueError):
    """A container a backend's MutateAdmission rejects: the webhook answers 500 with the message."""


class UsageError(ValueError):
    """A backend's AddResourceUsage refused a chosen device (the node then fails with the text)."""


@dataclass(slots=True, frozen=True)
class ResourceNames:
    """HAMi's `ResourceNames`: what quotas and the simulator know of a vendor's resources."""

    count: str
    memory: str = ""
    cores: str = ""
    memory_factor: int = 1
    """Requests are scaled by it, so ResourceQuota memory limits are scaled the same (§5.8)."""


@dataclass(slots=True, frozen=True)
class NodeLockSpec:
    """The node lock a vendor takes at bind (§6.2), as the bind and the device plugin handle it.

    Default: the shared owner-format mutex `<RFC3339>,<namespace>,<pod>` (`hami.io/mutex.lock`),
    re-entrant, released by its holder, expiring after the scheduler's `--node-lock-timeout`.
    `names_holder=False`: a vendor's own lock whose value is a bare RFC 3339 time naming no pod,
    taken over once older than `expiry_seconds`, deleted by the vendor's device plugin after
    Allocate whoever wrote it. Several vendors naming one key share one lock."""

    key: str
    names_holder: bool = True
    expiry_seconds: float = 0.0
    """Age after which a lock without holder is taken over (unused for the shared mutex)."""
    busy_message: str = ""
    """The bind's error while a lock without holder is live; `{node}` is the node name."""


@dataclass(slots=True, frozen=True)
class Health:
    """A vendor's CheckHealth for one node (§3.4)."""

    healthy: bool
    need_update: bool
    """The inventory must be (re-)read and stored."""
    write_requesting: bool = False
    """The caller must merge-patch `Requesting_<now>` into the vendor's handshake annotation."""


class QuotaCheck(Protocol):
    """ResourceQuota test used inside fit (§5.8 FitQuota)."""

    def fits(self, namespace: str, vendor: str, memory: int, cores: int) -> bool: ...


@dataclass(slots=True)
class FitResult:
    """One container's request of one vendor fitted on a node (HAMi `Fit`)."""

    ok: bool
    devices: ContainerDevices = field(default_factory=list)
    """Chosen devices, in the order Fit took them."""
    positions: list[int] = field(default_factory=list)
    """Node positions of `devices`."""
    reason: str = ""
    """GenReason string on failure ("" on success)."""
    adjust: bool = False
    """AddResourceUsage changes the entries (e.g. a MIG profile is chosen), so it must run even
    when nothing is fitted after this container."""


@dataclass(slots=True)
class PodFitContext:
    """Everything a fit needs from the pod, computed once per Filter (not per node).

    The engine builds it (`engine.fit.pod_fit_context`); a vendor reads the policy flags and asks
    for its own annotation filters through `filters`, parsed once per pod and cached here.
    """

    vendors: Vendors = field(default_factory=lambda: Vendors(()))
    annotations: Mapping[str, str] = field(default_factory=dict)
    namespace: str = ""
    policy: str = "spread"
    numa_bind: bool = False
    """`nvidia.com/numa-bind` is Go-true: devices sort NUMA first (§5.6); vendors may group (§5.3)."""
    mutex: bool = False
    topology: bool = False
    weights: tuple[int, int, int] = (1, 1, 1)
    quota: QuotaCheck | None = None
    n_init: int = 0
    _filters: dict[str, Hashable] = field(default_factory=dict, repr=False)
    _plans: list[Any] = field(default_factory=list, repr=False)

    def filters(self, vendor: Vendor) -> Hashable:
        """`vendor.pod_filters(annotations)`, parsed once per pod."""
        cached = self._filters.get(vendor.key)
        if cached is None:
            cached = self._filters[vendor.key] = vendor.pod_filters(self.annotations)
        return cached


class Vendor(Protocol):
    """One device backend (HAMi's `Devices`), in the order a pod meets it.

    Properties are plain values fixed at construction (from the device configuration). Methods
    are pure unless said otherwise: nothing here does I/O; the cluster layer performs the writes
    (handshake stamps, cleanup, node lock) a vendor asks for.
    """

    @property
    def key(self) -> str:
        """The vendor key (`CommonWord`): request type, allocation entry type, PodDevices key."""
        ...

    @property
    def names(self) -> ResourceNames:
        """Count, memory and core resource names and the memory factor (quotas, §5.8)."""
        ...

    @property
    def managed_resources(self) -> frozenset[str]:
        """Every resource name the vendor owns (count, memory, cores, percentage, priority, …): the
        extender's `managedResources`, what kube-scheduler leaves to us."""
        ...

    @property
    def allocation_keys(self) -> tuple[str, str]:
        """(to-allocate, allocated) pod annotation keys (§4.4); to-allocate may be ""."""
        ...

    @property
    def handshake_key(self) -> str | None:
        """Node annotation the scheduler stamps `Requesting_<now>` on, None for vendors without one."""
        ...

    @property
    def cleanup_key(self) -> str | None:
        """Node annotation NodeCleanUp deletes when the vendor turns unhealthy on a node (usually
        the handshake; AMD: its register annotation); None for nothing."""
        ...

    @property
    def lock_key(self) -> str | None:
        """Node lock annotation taken at bind when a regular container asks for this vendor (§6.2),
        None for vendors that never lock."""
        ...

    @property
    def node_lock(self) -> NodeLockSpec | None:
        """How that lock is taken and released (`lock_key` is its key); None = never locks."""
        ...

    @property
    def inventory_keys(self) -> tuple[str, ...]:
        """Node annotations `node_devices` reads; its result is cached per distinct values of them
        (empty: never cached, e.g. an inventory read from node capacity)."""
        ...

    @property
    def prefilter(self) -> bool:
        """True when a request's nums, memreq (or percentage) and cores are lower bounds of what one
        device must have free, so the engine may skip a node whose summary cannot meet them."""
        ...

    @property
    def scores_nodes(self) -> bool:
        """False when `score_node` is always 0 (the engine may then pick nodes by usage alone)."""
        ...

    @property
    def counted_pod_keys(self) -> frozenset[str]:
        """Annotations of counted pods that `fit` or `score_node` read (through
        `DeviceUsage.pod_infos`, e.g. Metax's app class); the ledger keeps only these of each pod."""
        ...

    # -- requests (§5.1) ----------------------------------------------------------------------

    def request(self, container: Obj) -> ContainerDeviceRequest | None:
        """GenerateResourceRequests: what one container asks of this vendor, None for nothing."""
        ...

    # -- registration (§3, §8.3) ---------------------------------------------------------------

    def node_devices(self, node: Obj) -> list[DeviceInfo]:
        """GetNodeDevices: the node's inventory; raises `wire.inventory.InventoryError`."""
        ...

    def check_health(self, node: Obj, now: datetime, tz: tzinfo | None) -> Health:
        """CheckHealth for one node; may keep per-node state (forgotten by `forget_node`)."""
        ...

    def forget_node(self, name: str) -> None:
        """The node was deleted or cleaned up: drop any per-node state."""
        ...

    # -- fit (§5.3) ------------------------------------------------------------------------------

    def pod_filters(self, annotations: Mapping[str, str]) -> Hashable:
        """The pod's selection annotations this vendor's fit reads (type/uuid/mode filters), as
        one hashable value: equal values mean equal fits (the engine's verdict cache keys on it)."""
        ...

    def fit(
        self,
        request: ContainerDeviceRequest,
        devices: Sequence[DeviceInfo],
        usage: Sequence[DeviceUsage],
        order: Sequence[int],
        *,
        ctx: PodFitContext,
        cordoned: frozenset[str],
        allocated: Sequence[ContainerDevices],
    ) -> FitResult:
        """HAMi `Fit`: examine `order` (this vendor's node positions, policy-sorted) from the END.
        `allocated` is this vendor's allocation list of the pod built so far: one entry per earlier
        container of the same phase (HAMi's `devinput`), always passed (quota, and rules over the
        pod's earlier containers such as Metax GPU's and Mthreads' one-device rule)."""
        ...

    def quick_verdict(
        self,
        request: ContainerDeviceRequest,
        devices: Sequence[DeviceInfo],
        usage: Sequence[DeviceUsage],
        positions: Sequence[int],
        *,
        ctx: PodFitContext,
        cordoned: frozenset[str],
    ) -> str | None:
        """`fit`'s outcome without sorting when it cannot depend on the order: "" = fits, else
        the reason string; None when the order matters. A node that does not fit is then decided
        without scores or sorting (the engine sorts and calls `fit` only when this says ""). It
        sees no `allocated`: the engine asks it only where the pod's earlier containers took no
        device of this vendor."""
        ...

    def quick_judge(self, request: ContainerDeviceRequest, ctx: PodFitContext) -> QuickJudge | None:
        """`quick_verdict` of `request` for the pod of `ctx` with the pod's part worked out once (the
        engine judges thousands of nodes per pod); None when that verdict is always None."""
        ...

    def memory_shortfall(self, request: ContainerDeviceRequest, ctx: PodFitContext) -> MemoryShortfall | None:
        """The verdict of `request` on a node whose usable devices all lack its memory, from the
        node's summary instead of a device walk (the engine meets thousands of such nodes for a pod
        asking more memory than any device has free); None when the verdict is not that simple."""
        ...

    def pinned_devices(self, request: ContainerDeviceRequest, ctx: PodFitContext) -> Pinned | None:
        """The device ids `request` is restricted to (the pod's use-uuid filter) when the vendor's
        verdict on a node holding none of them reads only that node's inventory (devices, health,
        cordon, MIG conflict flags), never its usage, annotations or the vendor's own state noted
        at filter time (`DeviceLedger.touch`); else None. The engine then re-judges such a
        node for the pod only when its inventory changed (most retries of a pinned pod otherwise
        re-judge every node whose usage moved), and shares those verdicts between pinned pods."""
        ...

    def may_exceed_devices(
        self, request: ContainerDeviceRequest, devices: Sequence[DeviceInfo], positions: Sequence[int],
        ctx: PodFitContext,
    ) -> bool:
        """True when `request.nums` may exceed the device count (one device holds several
        instances, e.g. MIG): the engine then skips its NodeInsufficientDevice pre-check."""
        ...

    def add_usage(
        self,
        device: DeviceInfo,
        usage: DeviceUsage,
        entry: ContainerDevice,
        *,
        container_index: int,
        device_index: int,
        migs: list[MigAllocation],
    ) -> ContainerDevice:
        """AddResourceUsage: count `entry` in `usage` (a private copy) and return the entry as it
        is to be recorded; placements made on the way are appended to `migs`. Raises UsageError."""
        ...

    # -- annotations, score, admission ----------------------------------------------------------

    def patch_annotations(
        self,
        per_container: PodSingleDevice,
        migs: Sequence[MigAllocation],
        *,
        node: str,
        now: int,
        pod: Obj | None = None,
    ) -> dict[str, str]:
        """PatchAnnotations: the pod annotations of this vendor's allocation on `node`, decided at
        unix time `now` (§4.1, §4.4); `pod` is the pod being placed (its containers, init first,
        are the allocation's), None when the caller has none."""
        ...

    def score_node(
        self,
        per_container: PodSingleDevice,
        *,
        annotations: Mapping[str, str],
        devices: Sequence[DeviceInfo],
        previous: Sequence[DeviceUsage],
        policy: str,
    ) -> float:
        """ScoreNode: added to the node score of a node the pod fits (§5.5); `annotations` and
        `devices` are the node's, `previous` its usage before the pod, `policy` the node policy."""
        ...

    def score_bound(
        self,
        requests: Sequence[ContainerDeviceRequest],
        *,
        pod_annotations: Mapping[str, str],
        policy: str,
        annotations: Mapping[str, str] | None = None,
        devices: Sequence[DeviceInfo] = (),
        previous: Sequence[DeviceUsage] = (),
    ) -> float | None:
        """The most favourable value `score_node` may return for a pod whose requests of this
        vendor are `requests` (one per container asking it), whatever devices its fit takes: an
        upper bound under binpack (the highest total wins), a lower bound under spread. With
        `annotations` None the bound holds on every node; else on the node with these annotations,
        devices and usage before the pod. None: no bound known (the engine then fits every node).
        The engine visits nodes best bound first and stops once no unvisited node can win."""
        ...

    def score_bound_key(
        self,
        requests: Sequence[ContainerDeviceRequest],
        *,
        pod_annotations: Mapping[str, str],
        policy: str,
    ) -> Hashable | None:
        """What the per-node `score_bound` of `requests` depends on besides the node: two pods
        with equal keys under the same policy have equal bounds on every node, so the engine may
        rank nodes by them once for both. None: no such key (the bounds are not shared)."""
        ...

    def node_score_bound(
        self,
        requests: Sequence[ContainerDeviceRequest],
        *,
        pod_annotations: Mapping[str, str],
        policy: str,
    ) -> NodeBound:
        """`score_bound` of these requests on one node, as a function of the node's (annotations,
        devices, usage): equal to `score_bound(requests, ..., annotations=, devices=, previous=)`,
        with the work that depends on the pod alone done once (the engine calls it per node)."""
        ...

    def node_bound_class(self, annotations: Mapping[str, str]) -> Hashable | None:
        """What the functions of `node_score_bound` read of a node when that is only its
        annotations: on two nodes of equal classes they are equal for every pod, so the engine
        works them out once per class (the ledger groups nodes by class at registration). None:
        they read more (devices, usage)."""
        ...

    def mutate(self, container: dict[str, Any], pod: dict[str, Any]) -> bool:
        """MutateAdmission on one container (mutated in place): True when it asks for this vendor.
        Raises MutationError to reject the pod."""
        ...


class Vendors:
    """The registered vendors, in registration order (HAMi's `DevicesToHandle`), by key."""

    __slots__ = ("_all", "_by_key", "_classing", "allocation_keys", "counted_pod_keys")

    def __init__(self, vendors: Sequence[Vendor]) -> None:
        self._all: tuple[Vendor, ...] = tuple(vendors)
        self._by_key: dict[str, Vendor] = {}
        for vendor in self._all:
            if vendor.key in self._by_key:
                raise ValueError(f"vendor key {vendor.key!r} registered twice")
            self._by_key[vendor.key] = vendor
        self.allocation_keys: dict[str, tuple[str, str]] = {v.key: v.allocation_keys for v in self._all}
        """Vendor key -> (to-allocate, allocated) annotation keys."""
        self.counted_pod_keys: frozenset[str] = frozenset().union(*(v.counted_pod_keys for v in self._all))
        """Every vendor's `counted_pod_keys`."""
        self._classing = tuple(v for v in self._all if v.scores_nodes)

    def __iter__(self) -> Iterator[Vendor]:
        return iter(self._all)

    def __len__(self) -> int:
        return len(self._all)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def get(self, key: str) -> Vendor | None:
        return self._by_key.get(key)

    def __getitem__(self, key: str) -> Vendor:
        return self._by_key[key]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self._by_key)

    def managed_resources(self) -> frozenset[str]:
        """Every resource name of every vendor (the chart's extender `managedResources`)."""
        return frozenset(name for v in self._all for name in v.managed_resources if name)

    def bound_class(self, annotations: Mapping[str, str]) -> tuple[tuple[str, Hashable], ...]:
        """A node's bound class: (vendor key, `node_bound_class`) of each scoring vendor that
        has one for these annotations (a vendor missing from it bounds per node)."""
        return tuple((v.key, c) for v in self._classing if (c := v.node_bound_class(annotations)) is not None)
