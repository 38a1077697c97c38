"""The in-memory kube-apiserver, split by concern; see `cluster.MemoryCluster` for the entry point.

Importers keep using `vgpu_scheduler.standin.memory`: the public names are re-exported here so the
package split changed no import path.
"""

from vgpu_scheduler.standin.memory.cluster import MemoryCluster
from vgpu_scheduler.standin.memory.fanout import INITIAL_EVENTS_END
from vgpu_scheduler.standin.memory.watch import MemoryWatch, WatchDropped

__all__ = ["INITIAL_EVENTS_END", "MemoryCluster", "MemoryWatch", "WatchDropped"]
