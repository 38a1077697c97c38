"""Every parametrized case has an id that says what it tests: no `case3-True-x1`.

pytest names a case from its values when it can (strings, numbers, enums, classes); for any
other value (a dict, a list, a dataclass, a lambda) it falls back to `<argname><index>`. The
suite is collected in a subprocess with tests/readable_ids.py, which marks those fallbacks.
"""

import enum
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.readable_ids import UNNAMED, needs_name

ROOT = Path(__file__).resolve().parent.parent


def collect(*args: str, cwd: Path = ROOT) -> list[str]:
    """The ids `pytest --collect-only -q` lists with the plugin loaded (it must succeed)."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "tests.readable_ids",
               "-p", "no:cacheprovider", *args]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [line for line in done.stdout.splitlines() if "::" in line]


class Colour(enum.Enum):
    RED = 1


@pytest.mark.parametrize(
    ("value", "unnamed"),
    [
        pytest.param("short", False, id="short string"),
        pytest.param("x" * 101, True, id="string past 100 characters"),
        pytest.param(b"raw", False, id="bytes"),
        pytest.param(3, False, id="int"),
        pytest.param(1.5, False, id="float"),
        pytest.param(True, False, id="bool"),
        pytest.param(None, False, id="None"),
        pytest.param(Colour.RED, False, id="enum member"),
        pytest.param(dict, False, id="a class, by its name"),
        pytest.param(needs_name, False, id="a function, by its name"),
        pytest.param(lambda: 0, True, id="a lambda"),
        pytest.param({"a": 1}, True, id="dict"),
        pytest.param([1], True, id="list"),
        pytest.param((1, 2), True, id="tuple"),
        pytest.param(Colour, False, id="an enum class, by its name"),
        pytest.param(object(), True, id="an object"),
    ],
)
def test_needs_name_mirrors_what_pytest_cannot_name(value: object, unnamed: bool) -> None:
    assert needs_name(value) is unnamed


def test_the_plugin_marks_unnamed_cases(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(
        textwrap.dedent(
            """
            import pytest

            @pytest.mark.parametrize(("shape", "n"), [({"a": 1}, 1), pytest.param({"b": 2}, 2, id="named")])
            def test_shapes(shape, n):
                pass
            """
        )
    )
    ids = collect(str(tmp_path / "test_sample.py"), "--rootdir", str(tmp_path), cwd=tmp_path)
    assert [i.split("::", 1)[1] for i in ids] == [f"test_shapes[{UNNAMED}(shape)-1]", "test_shapes[named]"]


@pytest.mark.slow
def test_every_parametrized_case_has_a_readable_id() -> None:
    unnamed = [i for i in collect("tests") if UNNAMED in i]
    assert not unnamed, (
        "pytest names these cases after the argument and an index; give each one an id that says what it"
        " tests (pytest.param(..., id=...) or ids=...):\n" + "\n".join(unnamed)
    )
