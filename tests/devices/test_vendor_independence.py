"""No vendor backend imports another, directly or through a chain: a vendor is one module (or
package) that can be read, changed or removed alone. The vendors are the registry's, so a new one
is covered without editing this test or the import-linter contract (which lists today's)."""

from __future__ import annotations

import itertools

import grimp

from vgpu_scheduler.devices.registry import REGISTRY

PACKAGE = "vgpu_scheduler.devices"


def _vendor_modules() -> list[str]:
    """Each registry line's top-level module under devices/ (a vendor may be a package)."""
    tops = set()
    for spec in REGISTRY:
        module = spec.module if "." in spec.module else f"{PACKAGE}.{spec.module}"
        assert module.startswith(PACKAGE + "."), module
        tops.add(".".join(module.split(".")[:3]))
    return sorted(tops)


def test_the_registry_names_every_vendor_package() -> None:
    assert len(_vendor_modules()) == len(REGISTRY) >= 13


def test_no_vendor_imports_another() -> None:
    graph = grimp.build_graph("vgpu_scheduler")
    vendors = _vendor_modules()
    chains = []
    for importer, imported in itertools.permutations(vendors, 2):
        chain = graph.find_shortest_chain(importer=importer, imported=imported, as_packages=True)
        if chain is not None:
            chains.append(" -> ".join(chain))
    assert not chains, chains
