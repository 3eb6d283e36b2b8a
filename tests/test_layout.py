"""The tree matches docs/design.md: layers import only downwards, no import cycles, a deferred import says
why, the CLI uses only the public API, and the engine never imports torch or the architectures."""

from __future__ import annotations

import ast
import pathlib

import networkx as nx
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "costmodel"

#: Module prefix → rank; a module imports only modules of its rank or below (docs/design.md, "Layers"). The
#: folders are the stages of the pipeline: choices → formulas → graph ‖ devices → families, memory → tracer,
#: timing → sections (a run prepared once, its quantities) → render → verbs → kit, testing → cli.
RANKS = [
    ("costmodel.errors", 0),
    ("costmodel.dtypes", 0),
    ("costmodel.sizes", 0),
    ("costmodel.symbols", 0),
    ("costmodel.expr", 0),
    ("costmodel.files", 0),
    ("costmodel.version", 0),
    ("costmodel.units", 0),
    ("costmodel.options", 1),
    ("costmodel.conventions", 2),
    ("costmodel.formulas", 2),
    ("costmodel.graph", 3),
    ("costmodel.devices", 3),
    ("costmodel.families", 4),
    ("costmodel.memory", 4),
    ("costmodel.tracer", 5),
    ("costmodel.timing", 5),
    ("costmodel.sections", 6),
    ("costmodel.render", 7),
    ("costmodel.serving", 7),
    ("costmodel.verbs", 8),
    ("costmodel.kit", 9),
    ("costmodel.testing", 9),
    ("costmodel.cli", 10),
    ("costmodel.__main__", 10),
    ("costmodel", 10),
]

#: Folders that may not import each other although they share a rank (parallel stages).
APART = [
    ("costmodel.graph", "costmodel.devices"),
    ("costmodel.families", "costmodel.memory"),
    ("costmodel.render", "costmodel.serving"),
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
    type_only = {  # ``if TYPE_CHECKING:`` imports are annotations, not imports that run
        id(n)
        for stmt in tree.body
        if isinstance(stmt, ast.If) and ast.unparse(stmt.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for n in ast.walk(stmt)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
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


def folder(module: str) -> str:
    """The stage a module belongs to: its RANKS prefix."""
    for prefix, _ in RANKS:
        if module == prefix or module.startswith(prefix + "."):
            return prefix
    raise AssertionError(f"{module} is in no layer of docs/design.md")


def import_graph() -> tuple[nx.DiGraph, list[str]]:
    """Every import between costmodel's modules, deferred ones (inside functions) included, and the imports
    that go up a layer or across parallel stages."""
    mods = modules()
    graph = nx.DiGraph()
    wrong = []
    apart = {frozenset(pair) for pair in APART}
    for module, path in mods.items():
        graph.add_node(module)
        for name, _, line in imports(module, path):
            target = resolve(name, set(mods))
            if target is None or target == module or target == "costmodel":
                continue  # the package's own __init__ (the public verbs) is imported lazily by name
            if rank(target) > rank(module):
                wrong.append(f"{module}:{line} imports {target} (a higher layer)")
            if frozenset((folder(module), folder(target))) in apart:
                wrong.append(f"{module}:{line} imports {target} (a parallel stage)")
            if module != "costmodel":
                graph.add_edge(module, target)
    return graph, wrong


def test_layers_import_only_downwards():
    _, wrong = import_graph()
    assert not wrong, "\n".join(wrong)


def test_no_module_imports_in_a_cycle_deferred_imports_included():
    graph, _ = import_graph()
    cycles = sorted(sorted(c) for c in nx.simple_cycles(graph))
    assert not cycles, "\n".join(" → ".join(c) for c in cycles[:10])


def test_every_package_is_ranked_and_every_rank_exists():
    mods = modules()
    for module in mods:
        rank(module)  # raises for a module in no layer
    for prefix, _ in RANKS:
        assert prefix in mods, f"RANKS names {prefix}, which is not a module or package of costmodel"


def test_docs_design_names_every_module():
    text = (ROOT / "docs" / "design.md").read_text()
    missing = [
        named
        for module, path in modules().items()
        if not module.startswith("costmodel.cli.") and module != "costmodel"
        for named in [str(path.relative_to(PKG))]
        if f"`{named}`" not in text and not (path.parent != PKG and path.name == "__init__.py")
    ]
    assert not missing, "docs/design.md does not name: " + ", ".join(missing)


def test_no_folder_holds_more_than_a_fifth_of_the_engine():
    sizes: dict[str, int] = {}
    for module, path in modules().items():
        sizes[folder(module)] = sizes.get(folder(module), 0) + len(path.read_text().splitlines())
    total = sum(sizes.values())
    big = {k: round(v / total, 3) for k, v in sizes.items() if v > 0.21 * total}
    assert not big, big


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
        if module.startswith("costmodel.tracer"):
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


def test_every_module_and_public_definition_has_a_docstring():
    """docs/design.md, "One docstring style": prose docstrings on every module and public definition (a
    subcommand's ``add``/``run``, the CLI's protocol, excepted)."""
    missing = []
    for module, path in modules().items():
        tree = ast.parse(path.read_text())
        if not ast.get_docstring(tree):
            missing.append(module)
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) or node.name.startswith("_"):
                continue
            if module.startswith("costmodel.cli.") and node.name in ("add", "run", "text"):
                continue
            if not ast.get_docstring(node):
                missing.append(f"{module}.{node.name}")
    assert not missing, "no docstring: " + ", ".join(missing)
