"""The engine's modules import each other without a cycle (issue 29 item 1), counting imports
under `if TYPE_CHECKING:` too: each module can be read, and loaded, after the ones it names."""

import ast
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "src" / "vgpu_scheduler" / "engine"
PACKAGE = "vgpu_scheduler.engine"


def engine_imports(source: str) -> set[str]:
    """The engine modules (short names) `source` imports, wherever the import statement is."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
            out.add((node.module or "").split(".")[2])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[2] for a in node.names if a.name.startswith(PACKAGE + "."))
    return out


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """Some cycle of `graph` (module -> modules it imports), or None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module):], module]
        if module in done:
            return None
        for dep in sorted(graph.get(module, ())):
            found = visit(dep, [*path, module])
            if found is not None:
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module, [])
        if found is not None:
            return found
    return None


def test_the_check_finds_a_cycle() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert engine_imports("if TYPE_CHECKING:\n    from vgpu_scheduler.engine.state import S\n") == {"state"}


def test_engine_modules_import_no_cycle() -> None:
    graph = {path.stem: engine_imports(path.read_text()) for path in ENGINE.glob("*.py")}
    assert cycle(graph) is None, " -> ".join(cycle(graph) or [])
