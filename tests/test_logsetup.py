"""klog-like logging: header format, -v levels, stderr vs file routing."""

from __future__ import annotations

import dataclasses
import io
import logging
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vgpu_scheduler.logsetup import (
    KlogFormatter,
    klog_file_header,
    log_file_path,
    setup_logging,
    shutdown_logging,
    v_enabled,
    verbosity,
)
from vgpu_scheduler.scheduler.options import SchedulerOptions

HEADER = re.compile(r"[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} [ \d]{7} [^ ]+:\d+\] ")


def record(level: int, msg: str, created: float, pid: int = 12345) -> logging.LogRecord:
    rec = logging.LogRecord("t", level, "/src/pkg/webhook.py", 123, msg, None, None)
    rec.created = created
    rec.process = pid
    return rec


@pytest.fixture
def logger() -> Iterator[logging.Logger]:
    log = logging.getLogger("vgpu-test-logsetup")
    log.propagate = False
    yield log
    shutdown_logging()


@pytest.mark.parametrize(
    ("level", "letter"),
    [
        (logging.DEBUG, "I"),
        (logging.INFO, "I"),
        (logging.WARNING, "W"),
        (logging.ERROR, "E"),
        (logging.CRITICAL, "F"),
    ],
)
def test_header_format(level: int, letter: str) -> None:
    created = time.mktime((2026, 11, 29, 22, 38, 54, 0, 0, -1)) + 0.123456
    text = KlogFormatter().format(record(level, "hello", created))
    assert text == f"{letter}1129 22:38:54.123456   12345 webhook.py:123] hello"


def test_header_variants() -> None:
    created = time.mktime((2026, 1, 2, 3, 4, 5, 0, 0, -1))
    assert KlogFormatter(skip_headers=True).format(record(logging.INFO, "m", created)) == "m"
    assert KlogFormatter(add_dir_header=True).format(record(logging.INFO, "m", created, pid=7)) == (
        "I0102 03:04:05.000000       7 pkg/webhook.py:123] m"
    )


def test_exception_text_follows_message() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        rec = logging.LogRecord(
            "t", logging.ERROR, "/x/y.py", 1, "failed", None, sys.exc_info()
        )
    text = KlogFormatter().format(rec)
    assert HEADER.match(text)
    assert "failed\nTraceback" in text and "ValueError: boom" in text


@pytest.mark.parametrize(("v", "debug_shown"), [(0, False), (3, False), (4, True), (10, True)])
def test_verbosity_maps_to_debug(logger: logging.Logger, v: int, debug_shown: bool) -> None:
    out = io.StringIO()
    setup_logging(dataclasses.replace(SchedulerOptions(), v=v), stream=out, logger=logger)
    logger.debug("dbg")
    logger.info("inf")
    lines = out.getvalue().splitlines()
    assert ("dbg" in out.getvalue()) is debug_shown
    assert all(HEADER.match(line) for line in lines)
    assert verbosity() == v
    assert v_enabled(v) and not v_enabled(v + 1)


def test_setup_twice_replaces_handlers(logger: logging.Logger) -> None:
    out = io.StringIO()
    setup_logging(SchedulerOptions(), stream=out, logger=logger)
    setup_logging(SchedulerOptions(), stream=out, logger=logger)
    logger.info("once")
    assert out.getvalue().count("once") == 1


def test_log_file_with_threshold(logger: logging.Logger, tmp_path: Path) -> None:
    path = tmp_path / "logs" / "sched.log"
    out = io.StringIO()
    opts = dataclasses.replace(SchedulerOptions(), logtostderr=False, log_file=str(path))
    setup_logging(opts, stream=out, logger=logger)
    logger.info("to file only")
    logger.error("to both")
    shutdown_logging()
    content = path.read_text()
    assert content.startswith("Log file created at: ")
    assert "Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg\n" in content
    assert "to file only" in content and "to both" in content
    assert "to file only" not in out.getvalue()
    assert "to both" in out.getvalue()


def test_log_file_alsologtostderr_and_skip_log_headers(logger: logging.Logger, tmp_path: Path) -> None:
    path = tmp_path / "s.log"
    out = io.StringIO()
    opts = dataclasses.replace(
        SchedulerOptions(), logtostderr=False, alsologtostderr=True, skip_log_headers=True, log_file=str(path)
    )
    setup_logging(opts, stream=out, logger=logger)
    logger.info("everywhere")
    shutdown_logging()
    assert path.read_text().startswith("I")
    assert "everywhere" in out.getvalue()


def test_logtostderr_ignores_log_file(logger: logging.Logger, tmp_path: Path) -> None:
    path = tmp_path / "unused.log"
    out = io.StringIO()
    setup_logging(dataclasses.replace(SchedulerOptions(), log_file=str(path)), stream=out, logger=logger)
    logger.info("stderr")
    assert not path.exists()
    assert "stderr" in out.getvalue()


def test_log_file_path() -> None:
    assert (
        log_file_path(dataclasses.replace(SchedulerOptions(), log_file="/a/b.log", log_dir="/c"))
        == "/a/b.log"
    )
    assert log_file_path(dataclasses.replace(SchedulerOptions(), log_dir="/c")) == "/c/vgpu-scheduler.log"


def test_file_header_names_runtime() -> None:
    header = klog_file_header(0.0)
    assert header.splitlines()[2].startswith("Binary: Built with ")
    assert len(header.splitlines()) == 4
