"""Functions with five or more parameters take the extra ones by keyword (issue 8 item 4).

Counted: positional-or-keyword parameters (positional-only included), `self`/`cls` left out.
Five or more of them fail: call sites of long signatures must name what they pass.
"""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "vgpu_scheduler"
MAX_POSITIONAL = 4

# Files another change is rewriting right now; exempt until it lands. The lead empties this list.
ALLOWLIST: frozenset[str] = frozenset()


def _positional(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    names = [a.arg for a in (*fn.args.posonlyargs, *fn.args.args)]
    return names[1:] if names[:1] in (["self"], ["cls"]) else names


def test_long_signatures_are_keyword_only() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in ALLOWLIST:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names = _positional(node)
                if len(names) > MAX_POSITIONAL:
                    offenders.append(f"{rel}:{node.lineno} {node.name}({', '.join(names)})")
    assert not offenders, "put a `*` before the fifth parameter:\n" + "\n".join(offenders)


def test_allowlist_names_existing_files() -> None:
    assert all((SRC / rel).is_file() for rel in ALLOWLIST)
