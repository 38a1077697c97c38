"""`--profiling`: a /debug/pprof/ tree shaped like Go's net/http/pprof, with Python's equivalents.

HAMi mounts Go's pprof handlers. Go profiles mean nothing for a Python process, so the paths stay
(scrapers and runbooks keep working) and answer with what helps debug this process: the command
line, the live asyncio tasks with their stacks, and a cProfile of the event loop for N seconds.
"""

from __future__ import annotations

import asyncio
import cProfile
import io
import pstats
import sys

from aiohttp import web

INDEX = """/debug/pprof/

Types of profiles available:
  cmdline    The command line invocation of the current program
  goroutine  Stack traces of all current asyncio tasks (Python)
  profile    cProfile of the process for ?seconds=N (default 30), as text (Python)
"""


async def index(_request: web.Request) -> web.Response:
    return web.Response(text=INDEX)


async def cmdline(_request: web.Request) -> web.Response:
    # Go writes os.Args joined by NUL bytes.
    return web.Response(text="\x00".join(sys.argv), content_type="text/plain")


async def tasks(_request: web.Request) -> web.Response:
    out = io.StringIO()
    for task in sorted(asyncio.all_tasks(), key=lambda t: t.get_name()):
        out.write(f"task {task.get_name()}:\n")
        task.print_stack(file=out)
        out.write("\n")
    return web.Response(text=out.getvalue())


async def profile(request: web.Request) -> web.Response:
    try:
        seconds = float(request.query.get("seconds", "30"))
    except ValueError:
        return web.Response(status=400, text="invalid seconds\n")
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        await asyncio.sleep(max(0.0, min(seconds, 300.0)))
    finally:
        profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(60)
    return web.Response(text=out.getvalue())


def add_pprof_routes(app: web.Application) -> None:
    # HAMi routes GET /debug/pprof/*suffix only (httprouter: no implicit HEAD).
    app.router.add_get("/debug/pprof/cmdline", cmdline, allow_head=False)
    app.router.add_get("/debug/pprof/profile", profile, allow_head=False)
    app.router.add_get("/debug/pprof/goroutine", tasks, allow_head=False)
    app.router.add_get("/debug/pprof/{tail:.*}", index, allow_head=False)
