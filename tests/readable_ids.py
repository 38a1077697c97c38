"""A pytest plugin for tests/test_readable_ids.py: it names every parametrized value that pytest
would otherwise call `<argname><index>` (`case3`, `devs0`), so that a collection shows them.

Loaded only in that test's subprocess (`-p tests.readable_ids`): ordinary runs keep their ids.
"""

import enum
import re
from typing import Any

import pytest

UNNAMED = "UNNAMED-ID"
LONG_STR = 100  # pytest's default `parametrize_long_str_id_strategy` ("short") gives up past this


def needs_name(value: object) -> bool:
    """True when pytest cannot turn `value` into an id that shows it (mirrors its IdMaker), or
    when it would show only `<lambda>`."""
    if isinstance(value, str | bytes):
        return len(value) > LONG_STR
    if value is None or isinstance(value, int | float | complex | re.Pattern | enum.Enum):
        return False
    name = getattr(value, "__name__", None)
    return not isinstance(name, str) or name == "<lambda>"


def pytest_make_parametrize_id(config: pytest.Config, val: object, argname: str) -> Any:
    # Called only for values without an explicit id (pytest.param(id=...), ids=[...] or ids=fn).
    return f"{UNNAMED}({argname})" if needs_name(val) else None
