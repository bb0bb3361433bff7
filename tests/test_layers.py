"""The packages point one way: a floor (``eqsat.core``) that imports nothing of the project, extraction
(``eqsat.extract``) that imports only the floor, and no pair of packages importing each other."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "engine", "fx", "library", "kernels", "cost", "tools", "graphfile", "rewrites", "extract")
ALLOWED = {  # what each package may import, besides itself (the pipeline's top modules may import any)
    "core": set(),
    "extract": {"core"},
    "library": {"core"},
    "kernels": {"core", "library"},
    "rewrites": {"core", "kernels"},
    "cost": {"core", "kernels"},
    "fx": {"core", "kernels"},
    "graphfile": {"core", "kernels"},
    "engine": {"core", "kernels", "fx", "cost"},
}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in PACKAGES else "top"


def _modules() -> dict[str, Path]:
    out = {}
    for top in ("eqsat", "rewrites", "extract"):
        for path in (ROOT / top).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[0] != "eqsat":
                parts.insert(0, "eqsat")
            out[".".join(parts).removesuffix(".__init__")] = path
    return out


def imports() -> dict[str, set[tuple[str, str]]]:
    """Package -> the (other package, importing module) pairs of its project imports."""
    edges: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for module, path in _modules().items():
        mine = _package(module)
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.split(".")[0] == "eqsat" and name != "eqsat":
                    other = _package(name)
                    if other != mine and not (other == "top" and name.count(".") > 1):
                        edges[mine].add((other, module))
    return edges


def test_each_package_imports_only_what_lies_below_it():
    edges = imports()
    for package, allowed in ALLOWED.items():
        wrong = sorted((other, m) for other, m in edges.get(package, ()) if other not in allowed)
        assert not wrong, f"{package} imports {wrong}"


def test_no_two_packages_import_each_other():
    edges = imports()
    both = sorted({tuple(sorted((a, b))) for a, out in edges.items() for b, _ in out
                   if any(x == a for x, _ in edges.get(b, ()))})
    assert not both, both
