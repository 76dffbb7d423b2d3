"""The import graph of the veotrace package: circles between files and arrows between packages.

Every import counts, at module level or inside a function (an import inside a function still ties
the two files together; it only defers the cost). ``from veotrace.x import y`` is an arrow to the
module ``veotrace.x.y`` when that is a module, else to ``veotrace.x``. Imports under
``if TYPE_CHECKING:`` are left out: they are never executed.

    python3 tools/import_graph.py            # circles, then the arrows between packages
    python3 tools/import_graph.py --check    # exit 1 on a circle or an upward arrow (tests/test_layers.py)
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "veotrace"

#: Layers from the bottom up. A package may import its own layer and the ones below, never above.
#: The bottom layer imports nothing of veotrace's but itself (errors, defaults, output safety, the
#: registry, which names every part by reference only). The run layer is the only one that joins
#: readers, analyses and engines; render/plot show results; the report and the CLI call the runs.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "defaults", "units", "outputs", "registry", "replay_limits"),
    ("schemas",),
    ("synth",),
    ("sources",),
    ("frag",),  # fragmentation's state and rules import only the layers below: attribution replays segments with them
    ("analysis", "attribution", "findings"),
    ("allocators",),
    ("tuning",),
    ("engine", "live"),
    ("gating",),
    ("render", "plot", "viewer"),
    ("runs",),
    ("comparison",),
    ("reporting",),
    ("cli", "mcp", "__main__", "__init__"),
)


def modules() -> dict[str, Path]:
    """Every module by dotted name; a C extension (``_csvscan.c``) is a module too, one that imports nothing."""
    out = {}
    for path in [*ROOT.rglob("*.py"), *ROOT.rglob("*.c")]:
        rel = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in node.body:
                for n in ast.walk(sub):
                    if hasattr(n, "lineno"):
                        lines.add(n.lineno)
    return lines


def graph() -> dict[str, set[str]]:
    mods = modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        if path.suffix == ".c":
            continue
        tree = ast.parse(path.read_text())
        skip = _type_checking_lines(tree)
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = name.split(".") if is_pkg else name.split(".")[:-1]
                    pkg = pkg[: len(pkg) - node.level + 1]
                    base = ".".join(pkg + ([base] if base else []))
                for a in node.names:
                    full = f"{base}.{a.name}"
                    targets.append(full if full in mods else base)
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t.startswith("veotrace") and t != name:
                    edges[name].add(t)
    for name in mods:
        edges.setdefault(name, set())
    return edges


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def package(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def layer(pkg: str) -> int:
    for i, names in enumerate(LAYERS):
        if pkg in names:
            return i
    raise KeyError(f"package {pkg!r} has no layer in tools/import_graph.py LAYERS")


def upward(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) pairs where a lower layer imports a higher one."""
    out = []
    for a, targets in sorted(edges.items()):
        for b in sorted(targets):
            if b == "veotrace":
                continue
            if layer(package(a)) < layer(package(b)):
                out.append((a, b))
    return out


def main() -> int:
    edges = graph()
    found = circles(edges)
    up = upward(edges)
    for comp in found:
        print("circle:", " <-> ".join(comp))
    for a, b in up:
        print(f"upward: {a} -> {b}")
    if "--check" not in sys.argv:
        arrows = defaultdict(int)
        for a, targets in edges.items():
            for b in targets:
                if package(a) != package(b):
                    arrows[(package(a), package(b))] += 1
        for (a, b), n in sorted(arrows.items()):
            print(f"  {a} -> {b}: {n}")
    print(f"{len(found)} circles, {len(up)} upward arrows")
    return 1 if (found or up) else 0


if __name__ == "__main__":
    raise SystemExit(main())
