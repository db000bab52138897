"""The library's floors (docs/architecture.md): each package imports only from its own floor or
the floors below, no import loop crosses packages, and the library never imports a service.

Imports are read from the source (every ``import`` statement, at module level or inside a
function, under ``TYPE_CHECKING`` or not), so a local import cannot hide an arrow that points up.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "libs" / "edgetune"

#: Floor by floor, bottom first: a package may import its own floor and the floors below.
FLOORS: list[set[str]] = [
    {"errors", "validation", "stopping", "schemas", "parent_death", "base", "__init__"},
    {"powermodes", "physics", "tables", "store"},
    {"telemetry", "workloads", "devices", "estimation"},
    {"profiling", "optimization", "planning"},
    {"tuning"},
    {"proto", "identity"},
    {"clients"},
    {"control", "agent"},
    {"online", "integrations", "cli", "demo", "localrun", "bench"},
]
#: Siblings on one floor that must not know each other in either direction.
APART = [("devices", "estimation")]
#: The core: the wire's generated messages stay out of it (clients and services use them, through serde).
CORE = {"control", "tuning", "estimation", "optimization", "devices", "profiling", "online", "planning", "store",
        "agent", "base", "workloads", "telemetry", "physics", "powermodes"}


def floor_of(package: str) -> int:
    for i, members in enumerate(FLOORS):
        if package in members:
            return i
    raise AssertionError(f"edgetune.{package} has no floor: add it to FLOORS and docs/architecture.md")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(LIB).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["edgetune", *parts])


def _is_module(name: str) -> bool:
    return (LIB / f"{name}.py").exists() or (LIB / name).is_dir()


def imports() -> list[tuple[str, str, int]]:
    """(importing module, imported module, line) for every edgetune import in the library."""
    found = []
    for path in sorted(LIB.rglob("*.py")):
        if "proto/v1" in path.as_posix():
            continue
        me = _module_name(path)
        package = me.split(".") if path.name == "__init__.py" else me.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found += [(me, a.name, node.lineno) for a in node.names if a.name.startswith("edgetune")]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target == "edgetune":  # from edgetune import validation (a module) or __version__ (a name)
                    found += [(me, f"edgetune.{a.name}" if _is_module(a.name) else "edgetune", node.lineno)
                              for a in node.names]
                elif target.startswith("edgetune."):
                    found.append((me, target, node.lineno))
    return found


def top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_import_points_down_or_across_a_floor():
    up = [f"{me}:{line} imports {target} (floor {floor_of(top(target))} > {floor_of(top(me))})"
          for me, target, line in imports()
          if top(target) != top(me) and top(target) != "services" and floor_of(top(target)) > floor_of(top(me))]
    assert up == []


def test_the_library_never_imports_a_service():
    assert [f"{me}:{line} imports {t}" for me, t, line in imports() if top(t) == "services"] == []


def test_no_import_loop_crosses_packages():
    graph: dict[str, set[str]] = defaultdict(set)
    for me, target, _ in imports():
        if top(me) != top(target):
            graph[top(me)].add(top(target))
    # Tarjan's strongly connected components: any component of more than one package is a loop
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                loops.append(sorted(component))

    for v in list(graph):
        if v not in index:
            visit(v)
    assert loops == []


def test_siblings_kept_apart_do_not_import_each_other():
    pairs = {frozenset(p) for p in APART}
    bad = [f"{me}:{line} imports {t}" for me, t, line in imports()
           if frozenset((top(me), top(t))) in pairs and top(me) != top(t)]
    assert bad == []


def test_the_core_imports_no_generated_messages():
    bad = [f"{me}:{line} imports {t}" for me, t, line in imports()
           if top(me) in CORE and (t.startswith("edgetune.proto") or t.endswith(("_pb2", "_pb2_grpc")))]
    assert bad == []
