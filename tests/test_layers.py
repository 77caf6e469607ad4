"""The library's layers, read from its import graph: tools below kernel families below studies.

Every ``import`` of an attnlab module counts, at module level or inside a function (a lazy import
is still a dependency). A tool imports no family or study; a family imports no study; and no two
modules import each other, directly or around a loop. Notebooks and scripts sit on top.
"""

import ast
from pathlib import Path

import pytest

LIB = Path(__file__).resolve().parents[1] / "lib" / "attnlab"

LAYERS = {
    # tools: know nothing of attention kernels
    "tool": {"paths", "arrays", "compile", "static", "timing", "results", "env", "occupancy", "ncu", "report",
             "nb", "seed", "tuned", "cluster", "tma"},
    # kernel families: registry, launchers, float64 references, NumPy models of the kernels
    "family": {"attention", "attention.kernels", "attention.reference", "attention.models",
               "delta", "delta.naive", "delta.chunk", "delta.kernels", "delta.model", "delta.tf32"},
    # studies: the measurements and verdicts the notebooks show
    "study": {"ladder", "banks", "attention.bench", "tile_scan", "flash", "roofline", "delta.bench", "delta.fast", "cross_gpu",
              "steps", "delta.timeline"},
}
RANK = {"tool": 0, "family": 1, "study": 2}


def _module(path: Path) -> str:
    rel = path.relative_to(LIB).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts) or "__init__"


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in LIB.rglob("*.py"):
        mod = _module(path)
        package = mod.split(".")[:-1] if path.name != "__init__.py" else mod.split(".")
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                    names = [target] if node.module else [".".join(base + [a.name]) for a in node.names]
                elif node.module and node.module.startswith("attnlab"):
                    names = [node.module.removeprefix("attnlab").lstrip(".")]
                else:
                    continue
            elif isinstance(node, ast.Import):
                names = [a.name.removeprefix("attnlab").lstrip(".") for a in node.names
                         if a.name.startswith("attnlab")]
            else:
                continue
            deps |= {n for n in names if n and n != mod}
        graph[mod] = deps
    return graph


def _layer(mod: str) -> str | None:
    for name, mods in LAYERS.items():
        if mod in mods:
            return name
    return None


def test_every_module_has_a_layer():
    unplaced = sorted(m for m in import_graph() if m != "__init__" and _layer(m) is None)
    assert not unplaced, f"modules with no layer (add them to LAYERS in {Path(__file__).name}): {unplaced}"


def test_no_upward_import():
    bad = []
    for mod, deps in import_graph().items():
        if mod == "__init__":
            continue
        for dep in deps:
            if _layer(dep) is not None and RANK[_layer(dep)] > RANK[_layer(mod)]:
                bad.append(f"{mod} ({_layer(mod)}) imports {dep} ({_layer(dep)})")
    assert not bad, "upward imports:\n" + "\n".join(sorted(bad))


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d in graph and not state.get(d):
                found = visit(d)
                if found:
                    return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if not state.get(n):
            found = visit(n)
            if found:
                return found
    return None


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_checks_can_fail():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("mod", sorted(LAYERS["tool"]))
def test_tools_know_no_kernel_family(mod):
    deps = import_graph().get(mod, set())
    assert not {d for d in deps if _layer(d) in ("family", "study")}, f"{mod} imports {deps}"
