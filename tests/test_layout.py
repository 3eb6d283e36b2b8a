"""The tree matches docs/design.md: layers import only downwards, no import cycles, a deferred import says
why, the CLI uses only the public API, and the engine never imports torch or the architectures."""

from __future__ import annotations

import ast
import pathlib

import networkx as nx
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "costmodel"

#: Module prefix → rank; a module imports only modules of its rank or below (docs/design.md, "Layers").
RANKS = [
    ("costmodel.errors", 0),
    ("costmodel.dtypes", 0),
    ("costmodel.sizes", 0),
    ("costmodel.symbols", 0),
    ("costmodel.expr", 0),
    ("costmodel.files", 0),
    ("costmodel.memory.policies", 0),
    ("costmodel.formulas", 0),
    ("costmodel.version", 0),
    ("costmodel.units", 0),
    ("costmodel.records", 1),
    ("costmodel.options", 1),
    ("costmodel.conventions", 1),
    ("costmodel.graph", 2),
    ("costmodel.memory", 3),
    ("costmodel.devices", 4),
    ("costmodel.families", 5),
    ("costmodel.reports", 6),
    ("costmodel.trace", 6),
    ("costmodel.kit", 7),
    ("costmodel.cli", 8),
    ("costmodel.__main__", 8),
    ("costmodel", 8),
]


def rank(module: str) -> int:
    for prefix, r in RANKS:
        if module == prefix or module.startswith(prefix + "."):
            return r
    raise AssertionError(f"{module} is in no layer of docs/design.md")


def modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(module: str, path: pathlib.Path) -> list[tuple[str, bool, int]]:
    """(imported costmodel module, at module level?, line) for every import of ``path``."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    top_level = {id(n) for n in tree.body} | {
        id(n) for stmt in tree.body if isinstance(stmt, (ast.If, ast.Try)) for n in ast.walk(stmt)
    }
    found = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            names = ([base] if node.module else []) + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            if name == "costmodel" or name.startswith("costmodel."):
                found.append((name, id(node) in top_level, node.lineno))
    return found


def resolve(name: str, known: set[str]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def test_layers_import_only_downwards_and_no_module_imports_in_a_cycle():
    mods = modules()
    graph = nx.DiGraph()
    wrong = []
    for module, path in mods.items():
        graph.add_node(module)
        for name, top, line in imports(module, path):
            target = resolve(name, set(mods))
            if target is None or target == module:
                continue
            if rank(target) > rank(module):
                wrong.append(f"{module}:{line} imports {target} (a higher layer)")
            if top and not (module == "costmodel" or target in ("costmodel",)):
                graph.add_edge(module, target)
    assert not wrong, "\n".join(wrong)
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, cycles[:5]


def test_a_deferred_import_says_why():
    silent = []
    for module, path in modules().items():
        lines = path.read_text().splitlines()
        tree = ast.parse("\n".join(lines))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    line, before = lines[node.lineno - 1], lines[node.lineno - 2].strip()
                    if "#" not in line and not before.startswith("#"):
                        silent.append(f"{module}:{node.lineno}: {line.strip()}")
    assert not silent, "a deferred import says why (a comment on its line):\n" + "\n".join(silent)


def test_the_cli_is_a_client_of_the_public_api():
    import costmodel

    for path in (PKG / "cli").glob("*.py"):
        for name, _, line in imports(f"costmodel.cli.{path.stem}", path):
            if name.startswith("costmodel.cli"):
                continue
            head = name.split(".")
            assert name == "costmodel" or (
                len(head) == 2 and (head[1] in costmodel.__all__ or head[1] == "__version__")
            ), f"cli/{path.name}:{line} imports {name}; expected only the public API (costmodel.__all__)"


@pytest.mark.parametrize("forbidden", ["torch", "transformers", "costmodel_graphs", "graphs"])
def test_the_engine_imports_no_torch_and_no_architectures_at_module_level(forbidden):
    for module, path in modules().items():
        if module.startswith("costmodel.trace"):
            continue  # the tracer imports torch inside its functions
        tree = ast.parse(path.read_text())
        for node in tree.body:
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            assert not any(n == forbidden or n.startswith(forbidden + ".") for n in names), (module, forbidden)


def test_public_surface_leads_with_the_verbs():
    import costmodel

    assert costmodel.__all__[:10] == [
        "estimate",
        "derive",
        "compare",
        "sweep",
        "roofline",
        "fit",
        "report",
        "load",
        "hardware",
        "models",
    ]
    for name in costmodel.__all__:
        assert getattr(costmodel, name) is not None
