"""The package's layers: every import of a project module points down (or sideways within a layer, with
no circle), and no project module is imported inside a function. Read from the source with `ast`, so
imports that only run under TYPE_CHECKING, or in a branch, count too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tinyagent"

#: Module-name prefix -> (layer, room). A module belongs to the longest prefix that names it. Within a
#: layer a room imports only the rooms listed in SIDEWAYS, besides its own.
LAYERS = {
    "tinyagent.text": (0, "leaves"),
    "tinyagent.redaction": (0, "leaves"),
    "tinyagent.jsonhttp": (0, "leaves"),
    "tinyagent.traces": (0, "leaves"),
    "tinyagent.version": (0, "leaves"),
    "tinyagent.format": (1, "format"),
    "tinyagent.engine": (2, "engine"),
    "tinyagent.models": (2, "models"),
    "tinyagent.tools": (2, "tools"),
    "tinyagent.agent": (3, "agent"),
    "tinyagent.runs": (4, "runs"),
    "tinyagent.config": (4, "runs"),
    "tinyagent.eval": (4, "runs"),
    "tinyagent.tutorial": (4, "runs"),
    "tinyagent.store": (4, "runs"),
    "tinyagent.cli": (5, "faces"),
    "tinyagent.web": (5, "faces"),
    "tinyagent.serve": (5, "faces"),
    "tinyagent.__main__": (5, "faces"),
    # the public face sits above everything it names
    "tinyagent": (6, "face"),
}
#: Rooms of one layer that may import each other's modules (one way): the backends run on the engine.
SIDEWAYS = {("models", "engine")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def place(name: str) -> tuple[int, str]:
    """A module's (layer, room): its own entry, or its package's; a new top-level module has none."""
    prefix = max(
        (p for p in LAYERS if name == p or (p != "tinyagent" and name.startswith(p + "."))), key=len, default=None
    )
    if prefix is None:
        raise KeyError(f"{name} has no layer: add it to LAYERS")
    return LAYERS[prefix]


def target(module: str, node: ast.ImportFrom | ast.Import, alias: ast.alias) -> str | None:
    """The project module an import names (a submodule when `from package import submodule`)."""
    if isinstance(node, ast.Import):
        name = alias.name
    else:
        base = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        name = ".".join(p for p in ((base if node.level else ""), node.module or "") if p)
        if f"{name}.{alias.name}" in MODULES:
            name = f"{name}.{alias.name}"
    return name if name in MODULES else None


def imports(module: str, tree: ast.AST | None = None) -> list[tuple[str, int, bool]]:
    """(imported project module, line, inside a function) for every import in `module`."""
    tree = tree or ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                for alias in child.names:
                    name = target(module, child, alias)
                    if name is not None and name != module:
                        found.append((name, child.lineno, in_function))
            visit(child, inside)

    visit(tree, False)
    return found


def problems(edges: dict[str, list[tuple[str, int, bool]]]) -> list[str]:
    """Every upward or forbidden sideways arrow, and every import inside a function."""
    found = []
    for module, targets in edges.items():
        layer, room = place(module)
        for name, line, in_function in targets:
            if in_function:
                found.append(f"{module}:{line} imports {name} inside a function")
            to_layer, to_room = place(name)
            if to_layer > layer or (to_layer == layer and to_room != room and (room, to_room) not in SIDEWAYS):
                found.append(f"{module}:{line} imports {name}: {room} (layer {layer}) -> {to_room} (layer {to_layer})")
    return found


def circles(edges: dict[str, list[tuple[str, int, bool]]]) -> list[list[str]]:
    """The import cycles among modules (strongly connected components of more than one module)."""
    graph = {m: sorted({t for t, _, _ in targets}) for m, targets in edges.items()}
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            connect(v)
    return found


def package_edges() -> dict[str, list[tuple[str, int, bool]]]:
    return {m: imports(m) for m in MODULES}


def test_every_module_has_a_layer():
    assert all(place(m) for m in MODULES)
    with pytest.raises(KeyError, match="tinyagent.newcomer has no layer"):
        place("tinyagent.newcomer")


def names_of(module: str) -> tuple[set[str], set[str]]:
    """(names `module` defines at its top level, names it imports from other project modules)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    defined, imported = set(), set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                defined |= {n.id for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.ImportFrom) and node.level:
            imported |= {a.asname or a.name for a in node.names}
    return defined, imported


def test_no_re_export_chains():
    """A module imports each name from the module that defines it, not through another module that only
    imported it (a package's __init__, the public face, may gather its rooms' names; the deprecated old
    paths re-export by design)."""
    faces = {m for m in MODULES if MODULES[m].name == "__init__.py" or place(m)[0] == 6}
    chains = []
    for module in MODULES:
        tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom):
                continue
            for alias in node.names:
                source = target(module, node, alias)
                if source is None or source in faces or source.endswith("." + alias.name):
                    continue
                defined, imported = names_of(source)
                if alias.name in imported and alias.name not in defined:
                    chains.append(f"{module}:{node.lineno} takes {alias.name} from {source}, which imports it")
    assert chains == []


def test_imports_point_down_and_only_at_module_level():
    assert problems(package_edges()) == []


def test_no_import_circle():
    assert circles(package_edges()) == []


def test_the_check_sees_an_upward_arrow_and_a_circle():
    """What the two tests above would say of a format module importing the agent, inside a function."""
    edges = package_edges()
    planted = ast.parse("def f():\n    from ..agent import loop\n")
    edges["tinyagent.format.prompts"] = edges["tinyagent.format.prompts"] + imports("tinyagent.format.prompts", planted)
    assert problems(edges) == [
        "tinyagent.format.prompts:2 imports tinyagent.agent.loop inside a function",
        "tinyagent.format.prompts:2 imports tinyagent.agent.loop: format (layer 1) -> agent (layer 3)",
    ]
    assert ["tinyagent.agent.loop", "tinyagent.format.prompts"] in [
        [m for m in c if m in ("tinyagent.agent.loop", "tinyagent.format.prompts")] for c in circles(edges)
    ]


@pytest.mark.parametrize("script", sorted(p.stem for p in (ROOT / "bench").glob("*.py")))
def test_bench_scripts_import_each_other_without_a_circle(script):
    """bench/ scripts import each other by plain name (they run with bench/ on sys.path)."""
    scripts = {p.stem: p for p in (ROOT / "bench").glob("*.py")}
    graph = {}
    for name, path in scripts.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[name] = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        graph[name] |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        graph[name] &= set(scripts)
    seen, todo = set(), list(graph[script])
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            todo += graph[name]
    assert script not in seen, f"bench/{script}.py imports itself through {sorted(seen)}"
