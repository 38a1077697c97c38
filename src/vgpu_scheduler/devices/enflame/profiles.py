"""DRS profiles: names such as `3g.20gb` (3 slices, 20 GB), and the choice of one for a request.

HAMi parses every profile name of the node, derives the core share of a profile from its slice
count over the node's largest one (rounded up), sorts by (slices, memory) and takes the first that
matches: the exact slice count of a direct request, or the smallest that covers a memory/core
request (memory in GB, or in MiB when it exceeds twice the largest profile's GB).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from vgpu_scheduler.gocompat.parsing import GoSyntaxError, atoi

GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
    "\u2028\u2029\u202f\u205f\u3000"
"""What Go's `strings.TrimSpace` removes (unicode.IsSpace)."""

MODE_DIRECT = 0
"""`MemPercentagereq` of a request by slice count (memreq = slices)."""
MODE_BY_SPEC = -1
"""`MemPercentagereq` of a request by memory/core (memreq = memory, coresreq = percent)."""


def go_trim(text: str) -> str:
    return text.strip(GO_SPACE)


def go_atoi(text: str) -> int | None:
    try:
        return atoi(text)
    except GoSyntaxError:
        return None


def parse_profile(name: str) -> tuple[int, int]:
    """(slices, memory GB) of a profile name; 0 for a part that does not parse."""
    parts = go_trim(name).lower().split(".")
    if len(parts) < 2:
        return 0, 0
    size_part = go_trim(parts[0])
    size = go_atoi(size_part[:-1] if size_part.endswith("g") else size_part)
    if size is None:
        return 0, 0
    mem_part = go_trim(parts[1])
    mem = go_atoi(mem_part[:-2] if mem_part.endswith("gb") else mem_part)
    return size, mem if mem is not None else 0


@dataclass(slots=True, frozen=True)
class Profile:
    name: str
    id: str
    size: int
    memory_gb: int
    core_percent: int
    request_memory_gb: int = 0
    request_core_percent: int = 0


def candidates(profile_sets: Iterable[tuple[tuple[str, str], ...]], max_slice: int) -> list[Profile]:
    """Every usable profile of the node's devices, sorted by (slices, memory GB).

    `max_slice` is the largest recorded on the devices; when none is, the largest slice count among
    the profile names. A later device's id wins for a name listed twice."""
    sets = list(profile_sets)
    if max_slice <= 0:
        max_slice = max((parse_profile(n)[0] for s in sets for n, _ in s), default=0)
    if max_slice <= 0:
        return []
    seen: dict[str, Profile] = {}
    for profiles in sets:
        for name, pid in profiles:
            size, memory = parse_profile(name)
            if size <= 0 or memory <= 0:
                continue
            core = math.ceil(float(size) * 100 / float(max_slice))
            seen[name] = Profile(name, pid, size, memory, core)
    return sorted(seen.values(), key=lambda p: (p.size, p.memory_gb))


def memory_request_gb(raw: int, max_profile_gb: int) -> int:
    """A memory request in GB: values above twice the largest profile are MiB (rounded up)."""
    if raw <= 0:
        return 0
    if max_profile_gb <= 0:
        return raw
    if raw > max_profile_gb * 2:
        return math.ceil(raw / 1024.0)
    return raw


def select(found: list[Profile], mode: int, memreq: int, coresreq: int) -> Profile | None:
    """The profile for a request (`mode` = its MemPercentagereq), None when none matches."""
    if not found:
        return None
    if mode == MODE_DIRECT:
        return next((p for p in found if p.size == memreq), None)
    want_gb = memory_request_gb(memreq, found[-1].memory_gb)
    for p in found:
        if want_gb > 0 and p.memory_gb < want_gb:
            continue
        if coresreq > 0 and p.core_percent < coresreq:
            continue
        return Profile(p.name, p.id, p.size, p.memory_gb, p.core_percent, want_gb, coresreq)
    return None
