"""klog-like logging on top of the stdlib `logging` module (the klog flags of §1.2).

Operators grep HAMi's logs by klog's header, `I1129 22:38:54.123456   12345 file.go:123] msg`, and
set verbosity with `-v` (the chart passes `-v=4`), so we keep both:

* `-v` ≥ 4 turns on DEBUG records; `v_enabled(n)` answers klog's `V(n).Enabled()` for callers that
  want finer levels;
* `--logtostderr` (default true) writes everything to stderr; with `--logtostderr=false` records
  go to `--log_file` (else `<--log_dir>/vgpu-scheduler.log`, else the temp dir), rotated at
  `--log_file_max_size` MB, with klog's file header unless `--skip_log_headers`; stderr then gets
  only records at or above `--stderrthreshold` (everything with `--alsologtostderr`);
* `--skip_headers` drops the header, `--add_dir_header` adds the file's directory to it.

`--vmodule`, `--log_backtrace_at` and `--one_output` are accepted and ignored: they have no
counterpart in Python's logging that is worth the code.
"""

from __future__ import annotations

import io
import logging
import logging.handlers
import os
import socket
import sys
import tempfile
import time
from typing import TextIO

from vgpu_scheduler.scheduler.options import SchedulerOptions
from vgpu_scheduler.version import build_info

DEBUG_VERBOSITY = 4  # `-v` at which DEBUG records are emitted
LOG_FILE_NAME = "vgpu-scheduler.log"

# klog severity numbers (as used by --stderrthreshold) -> logging levels.
_THRESHOLD_LEVELS = {0: logging.DEBUG, 1: logging.WARNING, 2: logging.ERROR, 3: logging.CRITICAL}

_verbosity = 0
_installed: list[tuple[logging.Logger, logging.Handler]] = []


def verbosity() -> int:
    """The configured `-v` level."""
    return _verbosity


def v_enabled(level: int) -> bool:
    """klog's `V(level).Enabled()`."""
    return _verbosity >= level


def _severity_letter(levelno: int) -> str:
    if levelno >= logging.CRITICAL:
        return "F"
    if levelno >= logging.ERROR:
        return "E"
    if levelno >= logging.WARNING:
        return "W"
    return "I"


class KlogFormatter(logging.Formatter):
    """`Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg`, klog's header (local time, pid as threadid)."""

    def __init__(self, *, skip_headers: bool = False, add_dir_header: bool = False) -> None:
        super().__init__()
        self.skip_headers = skip_headers
        self.add_dir_header = add_dir_header

    def header(self, record: logging.LogRecord) -> str:
        t = time.localtime(record.created)
        micros = round((record.created - int(record.created)) * 1e6)
        if micros >= 1_000_000:  # rounding reached the next second
            t = time.localtime(int(record.created) + 1)
            micros = 0
        source = record.filename
        if self.add_dir_header:
            directory = os.path.basename(os.path.dirname(record.pathname))
            source = f"{directory}/{source}" if directory else source
        return (
            f"{_severity_letter(record.levelno)}{time.strftime('%m%d %H:%M:%S', t)}.{micros:06d} "
            f"{record.process or 0:7d} {source}:{record.lineno}] "
        )

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            text = f"{text}\n{record.exc_text}"
        if record.stack_info:
            text = f"{text}\n{self.formatStack(record.stack_info)}"
        return text if self.skip_headers else self.header(record) + text


def klog_file_header(now: float | None = None) -> str:
    """The lines klog writes at the top of every log file it opens."""
    info = build_info()
    stamp = time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(now))
    return (
        f"Log file created at: {stamp}\n"
        f"Running on machine: {socket.gethostname()}\n"
        f"Binary: Built with {info.compiler} {info.go_version} for {info.platform}\n"
        "Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg\n"
    )


class _KlogFileHandler(logging.handlers.RotatingFileHandler):
    """A size-rotated file (one backup, `<file>.1`) that starts with klog's header."""

    def __init__(self, path: str, max_bytes: int, write_header: bool) -> None:
        self.write_header = write_header
        super().__init__(path, maxBytes=max_bytes, backupCount=1 if max_bytes > 0 else 0, encoding="utf-8")

    def _open(self) -> io.TextIOWrapper:
        stream = super()._open()
        if self.write_header:
            stream.write(klog_file_header())
            stream.flush()
        return stream


def log_file_path(opts: SchedulerOptions) -> str:
    """Where records go when `--logtostderr=false`."""
    if opts.log_file:
        return opts.log_file
    return os.path.join(opts.log_dir or tempfile.gettempdir(), LOG_FILE_NAME)


def shutdown_logging() -> None:
    """Remove and close every handler `setup_logging` installed."""
    while _installed:
        logger, handler = _installed.pop()
        logger.removeHandler(handler)
        handler.close()


def setup_logging(
    opts: SchedulerOptions,
    *,
    stream: TextIO | None = None,
    logger: logging.Logger | None = None,
) -> list[logging.Handler]:
    """Configure `logger` (default: the root logger) from the klog flags; returns the new handlers.

    Calling it again replaces the handlers of the previous call.
    """
    global _verbosity
    shutdown_logging()
    _verbosity = opts.v
    target = logger if logger is not None else logging.getLogger()
    target.setLevel(logging.DEBUG if opts.v >= DEBUG_VERBOSITY else logging.INFO)
    formatter = KlogFormatter(skip_headers=opts.skip_headers, add_dir_header=opts.add_dir_header)
    err_stream = stream if stream is not None else sys.stderr

    handlers: list[logging.Handler] = []
    if opts.logtostderr:
        handlers.append(logging.StreamHandler(err_stream))
    else:
        path = log_file_path(opts)
        directory = os.path.dirname(path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        handlers.append(
            _KlogFileHandler(path, opts.log_file_max_size * 1024 * 1024, not opts.skip_log_headers)
        )
        echo = logging.StreamHandler(err_stream)
        if not opts.alsologtostderr:
            echo.setLevel(_THRESHOLD_LEVELS.get(min(max(opts.stderrthreshold, 0), 3), logging.ERROR))
        handlers.append(echo)
    for handler in handlers:
        handler.setFormatter(formatter)
        target.addHandler(handler)
        _installed.append((target, handler))
    return handlers
