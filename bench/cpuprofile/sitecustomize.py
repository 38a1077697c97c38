"""CPU-time sampling of a server process under a bench (`bench/burst.py --cpu-profile FILE`).

Put on PYTHONPATH of the processes to profile, with VGPU_CPU_PROFILE=FILE: in a process whose
command line names our server or the bench's floor extender, SIGPROF fires every millisecond of the
process's CPU time (ITIMER_PROF: user + system) and the Python stack at that moment is counted. A
process waiting for a core is not sampled (py-spy's wall-time samples count it where it stood), and
time in C code (OpenSSL, socket calls, msgspec) is charged to the Python frame that called it.
Collapsed stacks ("frame;frame;... count", flamegraph's input) go to FILE.<pid> every few seconds
and at exit; `python bench/cpuprofile/report.py FILE.<pid>` prints the shares.
"""

from __future__ import annotations

import atexit
import collections
import os
import signal
import sys
import time
import types

PROFILED = ("vgpu-scheduler", "vgpu_scheduler", "floor_extender")
INTERVAL = 0.001  # seconds of CPU time between samples
FLUSH_EVERY = 3.0  # seconds of wall time between writes of the file


def _install(path: str) -> None:
    counts: collections.Counter[str] = collections.Counter()
    last_flush = [time.monotonic()]
    busy = [False]

    def flush() -> None:
        with open(path, "w") as out:
            for stack, n in list(counts.items()):
                out.write(f"{stack} {n}\n")

    def sample(_signum: int, frame: types.FrameType | None) -> None:
        # A signal handler is Python code the next signal can interrupt, and whatever it raises
        # surfaces in the code it interrupted (a request handler): never re-enter, never raise.
        if busy[0]:
            return
        busy[0] = True
        try:
            parts = []
            while frame is not None:
                code = frame.f_code
                parts.append(f"{code.co_name} ({os.path.basename(code.co_filename)})")
                frame = frame.f_back
            counts[";".join(reversed(parts))] += 1
            now = time.monotonic()
            if now - last_flush[0] > FLUSH_EVERY:
                last_flush[0] = now
                flush()
        except Exception:  # a full disk, say: lose the profile, not a request
            pass
        finally:
            busy[0] = False

    signal.signal(signal.SIGPROF, sample)
    signal.siginterrupt(signal.SIGPROF, False)  # restart system calls the signal interrupts
    signal.setitimer(signal.ITIMER_PROF, INTERVAL, INTERVAL)
    atexit.register(flush)


_target = os.environ.get("VGPU_CPU_PROFILE")
if _target and any(name in " ".join(sys.argv) for name in PROFILED):
    _install(f"{_target}.{os.getpid()}")
