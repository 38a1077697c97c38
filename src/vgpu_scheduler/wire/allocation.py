"""Pod allocation annotations (§4.4, §4.5).

Encoding, identical for every vendor:

* one device: `<uuid>,<TYPE>,<MEM>,<CORES>:` (TYPE is the vendor key, e.g. `NVIDIA`);
* one container: its devices concatenated, then `;` — an empty container is just `;`;
* containers in "init containers first, then app containers" order.

Padding contract (§4.5 "Padding subtlety"): for every vendor present in a pod, the list has one
entry per container that was processed (init first), empty for containers that got nothing of
that vendor — e.g. `;uuid1,NVIDIA,1000,30:;;` for [no GPU, GPU, no GPU]. This matches every HAMi
unit test and keeps MIG `containerIndex` and the device plugin's init-container handling right.
`pad_pod_devices` builds such per-vendor lists; the encoders write whatever lists they are given.

Decoding keeps empty entries, so indices survive; because every container is *terminated* by
`;`, decoding a list of N containers yields N+1 entries (the last one empty), exactly as HAMi's
`strings.Split` does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from sys import intern

from vgpu_scheduler.gocompat import parsing as sc

from ..model import ContainerDevice, ContainerDevices, PodDevices, PodSingleDevice
from .keys import ALLOCATION_KEYS

DEVICE_SEP = ":"
CONTAINER_SEP = ";"

MISSING_FIELDS = "pod annotation format error; information missing, please do not use nodeName field in task"
"""HAMi's message for a device entry with fewer than four fields."""


class AllocationError(ValueError):
    """An allocation annotation that cannot be decoded; the pod is ignored by the usage ledger."""


def encode_container_devices(devices: ContainerDevices) -> str:
    return "".join(f"{d.uuid},{d.type},{d.usedmem},{d.usedcores}:" for d in devices)


def encode_container_list(per_container: PodSingleDevice) -> str:
    """One vendor's list: every container, empty ones included, terminated by `;`."""
    return "".join(encode_container_devices(c) + CONTAINER_SEP for c in per_container)


def decode_container_devices(value: str) -> ContainerDevices:
    """The devices of one container. Parts without `,` are ignored; extra fields are ignored."""
    if not value:
        return []
    out: ContainerDevices = []
    for i, part in enumerate(value.split(DEVICE_SEP)):
        if "," not in part:
            continue
        fields = part.split(",")
        if len(fields) < 4:
            raise AllocationError(MISSING_FIELDS)
        try:
            mem = sc.parse_int32(fields[2])
        except sc.GoSyntaxError as exc:
            raise AllocationError(f"parse device memory {sc.go_quote(fields[2])}: {exc}") from None
        try:
            cores = sc.parse_int32(fields[3])
        except sc.GoSyntaxError as exc:
            raise AllocationError(f"parse device cores {sc.go_quote(fields[3])}: {exc}") from None
        # idx = position of the entry in the container, as HAMi numbers it (MIG deviceIndex). The
        # uuid and type are interned: a fleet's pods name the same devices, and a ledger holding
        # 400,000 allocations would otherwise keep a copy of both strings per pod.
        uuid, kind = intern(fields[0]), intern(fields[1])
        out.append(ContainerDevice(uuid=uuid, type=kind, usedmem=mem, usedcores=cores, idx=i))
    return out


def decode_container_list(value: str) -> PodSingleDevice:
    """Split on `;` keeping empty entries (a trailing `;` gives one extra empty container)."""
    return [decode_container_devices(part) for part in value.split(CONTAINER_SEP)]


def pad_pod_devices(per_container: Sequence[Mapping[str, ContainerDevices]]) -> PodDevices:
    """Turn per-container grants (init containers first) into padded per-vendor lists.

    Every vendor granted to at least one container gets exactly `len(per_container)` entries,
    with an empty entry for each container that has nothing of that vendor.
    """
    vendors: list[str] = []
    for grants in per_container:
        for vendor, devices in grants.items():
            if devices and vendor not in vendors:
                vendors.append(vendor)
    return {vendor: [list(grants.get(vendor, ())) for grants in per_container] for vendor in vendors}


def encode_pod_devices(
    devices: PodDevices, allocation_keys: Mapping[str, tuple[str, str]] = ALLOCATION_KEYS
) -> dict[str, str]:
    """Annotations for a pod's grants: both the to-allocate and the allocated key per vendor.

    A vendor with an empty list is skipped (HAMi writes nothing for it); a vendor without known
    annotation keys is a programming error and raises `AllocationError`.
    """
    out: dict[str, str] = {}
    for vendor, per_container in devices.items():
        if not per_container:
            continue
        keys = allocation_keys.get(vendor)
        if keys is None:
            raise AllocationError(f"no allocation annotation keys for vendor {vendor!r}")
        to_allocate, allocated = keys
        encoded = encode_container_list(per_container)
        if to_allocate:  # some vendors only have an "allocated" key (§4.4)
            out[to_allocate] = encoded
        out[allocated] = encoded
    return out


def decode_pod_devices(
    annotations: Mapping[str, str], allocation_keys: Mapping[str, tuple[str, str]] = ALLOCATION_KEYS
) -> PodDevices:
    """Grants recorded in the `-allocated` key of every known vendor present on the pod
    (`allocation_keys`: vendor key -> (to-allocate, allocated), the registered vendors')."""
    out: PodDevices = {}
    for vendor, (_, allocated) in allocation_keys.items():
        value = annotations.get(allocated)
        if value is None:
            continue
        try:
            out[vendor] = decode_container_list(value)
        except AllocationError as exc:
            raise AllocationError(f"annotation {allocated}: {exc}") from None
    return out
