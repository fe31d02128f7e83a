"""The house's shape, held by a test: Forge's modules import one way (docs/DESIGN.md §1, "Layers").

The graph is built with ``ast`` from every ``import`` in ``forge_cli/``, wherever it is written:
at the top of a module, inside a function, under ``if TYPE_CHECKING``. It must have no cycle; no
module may import one of a higher layer; an import inside a function is only for what is heavy to
import (a library a base install lacks — :func:`heavy` — or a Forge module that loads one its
importer does not), so that the graph a reader or a linter sees at the top of each file is the
graph; and what the CLI and the plugin host import needs only a base install.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "forge_cli"

# From the ground up (docs/DESIGN.md §1). A module is in the layer of its longest matching prefix.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("forge_cli", "forge_cli.errors", "forge_cli.paths", "forge_cli.console", "forge_cli.names", "forge_cli.token_ids",
              "forge_cli.unions", "forge_cli.configs.common")),
    ("configuration", ("forge_cli.configs", "forge_cli.config")),
    ("contracts", ("forge_cli.specs", "forge_cli.hookspecs", "forge_cli.records", "forge_cli.pool.types",
                   "forge_cli.tasks.types", "forge_cli.sandbox.contract", "forge_cli.plugins")),
    # train.prefix_tree is a pure core (torch only inside its functions) the rollout's summary shares
    ("parts", ("forge_cli.engine", "forge_cli.pool", "forge_cli.toolformats", "forge_cli.tasks", "forge_cli.sandbox",
               "forge_cli.rewards", "forge_cli.installer", "forge_cli.runs", "forge_cli.train.prefix_tree")),
    ("run context", ("forge_cli.run",)),
    ("gateway", ("forge_cli.gateway",)),
    ("rollout", ("forge_cli.rollout",)),
    ("trainer", ("forge_cli.train",)),
    ("reports", ("forge_cli.report",)),
    ("composition and face", ("forge_cli.builtin", "forge_cli.doctor", "forge_cli.commands", "forge_cli.cli",
                              "forge_cli.__main__")),
]

# What a base install has (pyproject.toml's ``dependencies`` and what they bring): every other
# library is heavy, or comes with an optional extra, or both. A module that needs one is imported
# inside the function that uses it, never at the top of a module the CLI or the plugin host loads.
BASE = {"typer", "click", "rich", "pluggy", "pydantic", "pydantic_core", "annotated_types", "typing_extensions",
        "packaging", "tomli"}
LIGHT = set(sys.stdlib_module_names) | BASE | {"__future__"}


def heavy(library: str) -> bool:
    """Whether importing ``library`` needs more than a base install."""
    return library not in LIGHT


@dataclass
class Module:
    name: str
    path: Path
    top: set[str] = field(default_factory=set)        # Forge modules imported when this one is imported
    lazy: set[str] = field(default_factory=set)       # inside a function
    typing: set[str] = field(default_factory=set)     # under ``if TYPE_CHECKING``
    third_party_top: set[str] = field(default_factory=set)

    @property
    def edges(self) -> set[str]:
        return self.top | self.lazy | self.typing


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _targets(node: ast.Import | ast.ImportFrom, here: str, is_package: bool, known: dict[str, Path]) -> tuple[set[str], set[str]]:
    """(Forge modules, third-party top-level names) an import statement names. ``from pkg import
    sub`` names the submodule, not the package."""
    forge, other = set(), set()
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
        for name in names:
            (forge if name.split(".")[0] == "forge_cli" else other).add(name if name.split(".")[0] == "forge_cli" else name.split(".")[0])
        return {n for n in forge if n in known}, other
    if node.level:
        base = here.split(".") if is_package else here.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        module = ".".join(base + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    if module.split(".")[0] != "forge_cli":
        return set(), {module.split(".")[0]}
    plain_names = False
    for alias in node.names:
        sub = f"{module}.{alias.name}"
        if sub in known:
            forge.add(sub)
        else:
            plain_names = True
    if plain_names and module in known:
        forge.add(module)
    return forge, other


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def build_graph() -> dict[str, Module]:
    known = _modules()
    graph = {name: Module(name, path) for name, path in known.items()}
    for name, module in graph.items():
        tree = ast.parse(module.path.read_text(), str(module.path))
        is_package = module.path.name == "__init__.py"

        def visit(node: ast.AST, where: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    forge, other = _targets(child, name, is_package, known)
                    forge.discard(name)
                    getattr(module, where).update(forge)
                    if where == "top":
                        module.third_party_top.update(other)
                    continue
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    visit(child, "lazy")
                elif isinstance(child, ast.If) and _is_type_checking(child.test) and where == "top":
                    for stmt in child.body:
                        visit(ast.Module(body=[stmt], type_ignores=[]), "typing")
                    for stmt in child.orelse:
                        visit(ast.Module(body=[stmt], type_ignores=[]), "top")
                else:
                    visit(child, where)

        visit(tree, "top")
    return graph


def layer_of(name: str) -> int:
    best, best_len = None, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    assert best is not None, f"{name} is in no layer: add it to LAYERS (and to DESIGN.md's table)"
    return best


def heavy_libraries(graph: dict[str, Module]) -> dict[str, set[str]]:
    """For each Forge module, the heavy libraries importing it loads: at its top, through the Forge
    modules it imports at its top, or through the packages that contain them."""
    loads = {name: {lib for lib in m.third_party_top if heavy(lib)} for name, m in graph.items()}
    changed = True
    while changed:
        changed = False
        for name, module in graph.items():
            parents = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)} & set(graph)
            more = set().union(*(loads[m] for m in module.top | parents)) - loads[name]
            if more:
                loads[name] |= more
                changed = True
    return loads


def heavy_modules(graph: dict[str, Module]) -> set[str]:
    """Forge modules whose import loads a heavy library."""
    return {name for name, libs in heavy_libraries(graph).items() if libs}


def find_cycle(graph: dict[str, Module]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node].edges):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = dfs(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for name in sorted(graph):
        if name not in state:
            found = dfs(name)
            if found:
                return found
    return None


GRAPH = build_graph()


def test_the_graph_is_read():
    """The graph sees top-level, function-level and TYPE_CHECKING imports (a guard on the reader)."""
    assert len(GRAPH) > 100
    assert "forge_cli.errors" in GRAPH["forge_cli.config"].top
    assert any(m.lazy for m in GRAPH.values()) and any(m.typing for m in GRAPH.values())
    assert {"forge_cli.train.step", "forge_cli.gateway.app"} <= heavy_modules(GRAPH) and heavy("torch") and not heavy("json")
    assert "forge_cli.config" not in heavy_modules(GRAPH)


def test_no_import_cycle():
    cycle = find_cycle(GRAPH)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_no_module_imports_a_higher_layer():
    wrong = []
    for name, module in sorted(GRAPH.items()):
        for target in sorted(module.edges):
            if layer_of(target) > layer_of(name):
                wrong.append(f"{name} ({LAYERS[layer_of(name)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})")
    assert not wrong, "\n".join(wrong)


def test_a_package_holding_a_lower_layer_imports_nothing_from_outside_it():
    """``forge_cli.tasks`` holds ``tasks.types`` (a contract the plugin host imports): were its
    ``__init__`` to import the plugin host, importing the host would run it half-made. A package
    whose modules are of several layers imports only its own modules in its ``__init__``."""
    wrong = []
    for name, module in sorted(GRAPH.items()):
        if module.path.name != "__init__.py":
            continue
        inside = [m for m in GRAPH if m.startswith(name + ".")]
        if len({layer_of(m) for m in inside} | {layer_of(name)}) == 1:
            continue
        wrong += [f"{name}/__init__.py imports {t}" for t in sorted(module.edges) if not t.startswith(name + ".")]
    assert not wrong, "\n".join(wrong)


def test_imports_inside_functions_are_only_of_heavy_modules():
    """A Forge module imported inside a function must load a heavy library its importer does not
    load already (else the import hides the graph and saves nothing)."""
    loads = heavy_libraries(GRAPH)
    light = [f"{name} imports {target} inside a function" for name, module in sorted(GRAPH.items())
             for target in sorted(module.lazy) if not loads[target] - loads[name]]
    assert not light, "\n".join(light)


SCRIPTS = {"forge_cli.__main__", "forge_cli.sandbox.forward", "forge_cli.sandbox.launch", "forge_cli.sandbox.probe"}


def test_libraries_imported_inside_functions_are_heavy():
    """The standard library and the base install's packages are imported at the top; inside a
    function only a heavy one (or one only some platforms have, under ``try``). The programs that run
    inside a sandbox (``SCRIPTS``) import as they please."""
    found = []
    for name, module in sorted(GRAPH.items()):
        if name in SCRIPTS:
            continue
        tree = ast.parse(module.path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            guarded = {id(n) for t in ast.walk(fn) if isinstance(t, ast.Try) for n in ast.walk(t)}
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in guarded:
                    roots = [a.name.split(".")[0] for a in node.names] if isinstance(node, ast.Import) else \
                        [(node.module or "").split(".")[0]] if not node.level else ["forge_cli"]
                    found += [f"{name}:{node.lineno} imports {root} inside a function" for root in roots
                              if root != "forge_cli" and not heavy(root)]
    assert not found, "\n".join(sorted(set(found)))


# what a base install's `forge --help`, `forge scaffold list` and `forge plugins` import
CLI_MODULES = ("forge_cli.cli", "forge_cli.commands", "forge_cli.builtin", "forge_cli.plugins", "forge_cli.config")


def test_the_cli_and_the_plugin_host_need_only_a_base_install():
    """A base install (``pip install forge-cli``, no extras) runs the CLI and lists what the plugins
    registered: nothing they import at their top needs an extra (the heavy parts are imported where
    they are used). Also what keeps ``forge --help`` fast."""
    loads = heavy_libraries(GRAPH)
    wrong = {name: sorted(libs) for name, libs in sorted(loads.items())
             if libs and any(name == p or name.startswith(p + ".") for p in CLI_MODULES)}
    assert not wrong, "\n".join(f"{name} loads {libs}" for name, libs in wrong.items())


def test_each_module_imports_first():
    """Each module imported first, in a fresh interpreter's order: a cycle through a package's
    ``__init__`` or an import by name (``importlib``) that the graph cannot see fails here with the
    half-made module's ImportError."""
    import subprocess
    import sys

    names = sorted(set(GRAPH) - SCRIPTS)
    code = (
        "import importlib, sys\n"
        f"names = {names!r}\n"
        "loaded = set(sys.modules)\n"
        "for name in names:\n"
        "    for m in [m for m in sys.modules if m.startswith('forge_cli') and m not in loaded]:\n"
        "        del sys.modules[m]\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except Exception as exc:\n"
        "        print(f'{name}: {type(exc).__name__}: {exc}')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr
