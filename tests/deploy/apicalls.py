"""Which Kubernetes API calls the code makes, read from its source (AST), for the RBAC check.

A call is (apiGroup, resource[/subresource], verb) as RBAC names it. Found in each module:
* `<x>.<verb>(api.CONST, ...)` for KubeClient's generic verbs (get, list, list_all, watch, create,
  replace, patch, delete), `subresource="..."` giving `resource/sub`;
* `<x>.<helper>(...)` for KubeClient's typed helpers (get_pod, patch_node, bind_pod, ...), each
  expanded by reading its body in cluster/client.py the same way (`_call("POST",
  api.resource_path(api.PODS, ns, name, "binding"))` is pods/binding create);
* `Reflector(client, "<plural>" | api.CONST, ...)`: list and watch.
A receiver is never resolved: a generic verb counts only when its first argument is an `api.`
resource constant, which no dict or mapping `.get` passes.
"""

from __future__ import annotations

import ast
from pathlib import Path

from vgpu_scheduler.cluster import api
from vgpu_scheduler.cluster.api import ResourceType

SRC = Path(api.__file__).resolve().parents[1]  # src/vgpu_scheduler
CLIENT = SRC / "cluster" / "client.py"
GENERIC = {"get": "get", "list": "list", "list_all": "list", "watch": "watch", "create": "create",
           "replace": "update", "patch": "patch", "delete": "delete"}
HTTP_VERB = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}
# Code that talks only to the in-memory API server (embedded cluster, simulator), or defines the client.
NOT_PRODUCTION = (
    "standin/memory/", "standin/fakeapi.py", "standin/embedded/", "simulate/", "cluster/client.py",
)

Call = tuple[str, str, str]  # (apiGroup, resource, verb)


def _resource(node: ast.expr) -> ResourceType | None:
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "api":
        value = getattr(api, node.attr, None)
        return value if isinstance(value, ResourceType) else None
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return api.resource_type(node.value)
        except ValueError:
            return None
    return None


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _generic(call: ast.Call, method: str) -> set[Call]:
    rt = _resource(call.args[0]) if call.args else None
    if rt is None:
        return set()
    sub = _kw(call, "subresource")
    plural = rt.plural
    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
        plural = f"{rt.plural}/{sub.value}"
    return {(rt.group, plural, GENERIC[method])}


def _raw(call: ast.Call) -> set[Call]:
    """`self._call("POST", api.resource_path(api.PODS, ns, name, "binding"), ...)`."""
    if len(call.args) < 2 or not isinstance(call.args[0], ast.Constant):
        return set()
    path = call.args[1]
    if not (isinstance(path, ast.Call) and isinstance(path.func, ast.Attribute)
            and path.func.attr == "resource_path" and path.args):
        return set()
    rt = _resource(path.args[0])
    if rt is None:
        return set()
    plural = rt.plural
    if len(path.args) >= 4 and isinstance(path.args[3], ast.Constant):
        plural = f"{rt.plural}/{path.args[3].value}"
    return {(rt.group, plural, HTTP_VERB[str(call.args[0].value)])}


def _helpers() -> dict[str, set[Call]]:
    """KubeClient's typed helpers, each with the calls its body makes (helpers may call helpers)."""
    tree = ast.parse(CLIENT.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KubeClient")
    bodies = {f.name: f for f in cls.body if isinstance(f, ast.AsyncFunctionDef | ast.FunctionDef)}
    helpers = {n for n in bodies if n not in GENERIC and not n.startswith("_") and n != "close"}
    resolved: dict[str, set[Call]] = {}

    def resolve(name: str) -> set[Call]:
        if name in resolved:
            return resolved[name]
        found: set[Call] = set()
        for node in ast.walk(bodies[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                attr = node.func.attr
                if attr in GENERIC:
                    found |= _generic(node, attr)
                elif attr == "_call":
                    found |= _raw(node)
                elif attr in helpers and attr != name:
                    found |= resolve(attr)
        resolved[name] = found
        return found

    return {name: resolve(name) for name in helpers}


def calls_in(paths: list[Path]) -> dict[Call, list[str]]:
    """Every API call made in these files, with where (file:line) it is made."""
    helpers = _helpers()
    found: dict[Call, list[str]] = {}
    for path in paths:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            calls: set[Call] = set()
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in GENERIC:
                calls = _generic(node, func.attr)
            elif isinstance(func, ast.Attribute) and func.attr in helpers:
                calls = helpers[func.attr]
            elif isinstance(func, ast.Name) and func.id == "Reflector" and len(node.args) >= 2:
                rt = _resource(node.args[1])
                calls = {(rt.group, rt.plural, v) for v in ("list", "watch")} if rt else set()
            where = f"{path.relative_to(SRC)}:{node.lineno}"
            for c in calls:
                found.setdefault(c, []).append(where)
    return found


def production_files(under: str = "") -> list[Path]:
    """The package's modules that run against a real cluster (optionally only those under a folder)."""
    out = []
    for path in sorted((SRC / under).rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if not any(rel.startswith(p) or rel == p for p in NOT_PRODUCTION):
            out.append(path)
    return out
