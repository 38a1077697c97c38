"""No function of the engine is longer than a screen (issue 29 item 1): a longer one is split into
steps with names, as the decision's walks are (`engine/walk_*.py`).

Counted: every line from `def` to the function's last line, docstring and nested functions included.
"""

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "src" / "vgpu_scheduler" / "engine"
MAX_LINES = 60


def long_functions(source: str) -> list[tuple[str, int, int]]:
    """(name, first line, lines) of each function of `source` longer than `MAX_LINES`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            if lines > MAX_LINES:
                out.append((node.name, node.lineno, lines))
    return out


def test_the_check_finds_a_long_function() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))
    assert long_functions(f"def short():\n    pass\n\n\ndef long():\n{body}") == [("long", 5, MAX_LINES + 1)]


def test_no_engine_function_is_longer_than_a_screen() -> None:
    offenders = [
        f"{path.name}:{line} {name} ({lines} lines)"
        for path in sorted(ENGINE.glob("*.py"))
        for name, line, lines in long_functions(path.read_text())
    ]
    assert not offenders, f"split these (at most {MAX_LINES} lines each):\n" + "\n".join(offenders)
