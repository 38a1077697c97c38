"""Node-lock takeovers by cause, for vgpu_scheduler_node_lock_takeovers_total.

NodeLocker notes why it is about to overwrite another holder's lock (`note_takeover`) and reports
each lock write (`lock_written`); a takeover counts only once its guarded write succeeded, so a
write lost to a conflict (409, then a fresh read) is not counted. A vendor's own lock (StampLocker)
counts its takeovers into the same counter once written (`count_takeover`).
"""

from __future__ import annotations

from vgpu_scheduler.cluster.instruments import CounterVec

EXPIRED = "expired"
"""Older than the lock's timeout (`--node-lock-timeout`, or a vendor lock's own expiry)."""
FUTURE = "future"
"""Dated further in the future than the lock's timeout (a writer's clock far ahead, or a hand-written
value): it would otherwise hold the node for as long as that, far beyond any bind."""
UNPARSABLE = "unparsable"
"""A value that does not parse (`,,`, empty, garbage): it names no time, so it never expires (HAMi
fails the bind on it; its failure path clears only a comma-free value or a vendor lock)."""
HOLDER_GONE = "holder_gone"
HOLDER_ELSEWHERE = "holder_elsewhere"
"""The holder pod is bound to another node: this node's device plugin will never release the lock."""
HOLDER_TERMINAL = "holder_terminal"
"""The holder pod has finished (Succeeded or Failed): it needs no device allocation any more."""
HOLDER_BIND_FAILED = "holder_bind_failed"
"""The holder's bind failed after it took the lock (`hami.io/bind-phase: failed`); its release
was lost (a crash, a dropped write)."""
UNNOTED = "other"
"""A takeover no rule noted (a rule added without its note): still counted."""

CAUSES = (EXPIRED, FUTURE, UNPARSABLE, HOLDER_GONE, HOLDER_ELSEWHERE, HOLDER_TERMINAL, HOLDER_BIND_FAILED)


class NodeLockStats:
    __slots__ = ("_noted", "takeovers")

    def __init__(self) -> None:
        self.takeovers = CounterVec(("cause",), known=[(cause,) for cause in CAUSES])
        self._noted: dict[str, str] = {}  # node -> cause of the takeover about to be written

    def note_takeover(self, node: str, cause: str) -> None:
        self._noted[node] = cause

    def lock_written(self, node: str, *, over_another: bool) -> None:
        """The lock on `node` was written; `over_another`: a lock value was there before."""
        cause = self._noted.pop(node, None)
        if over_another:
            self.takeovers.inc((cause or UNNOTED,))

    def count_takeover(self, cause: str) -> None:
        """A takeover already written (a vendor lock's: no note, the write is its own proof)."""
        self.takeovers.inc((cause,))
