"""The contracts a plugin author reads stand alone, and docs/architecture.md draws the import graph as it is.

The graph is read from the source with `ast`: every import statement of mlab.core and mlab.cli, those inside
functions included (a circle closed by a function-local import is still a circle, only a later one), and the
packages an import runs on the way (`a.b.c` runs `a/b/__init__.py`). Imports under `if TYPE_CHECKING:` never run:
they count for what a contract may name, not for circles.

The core has no circles and no upward imports (an import from a later layer, one inside a circle included): one
that docs/architecture.md lists, with its reason, is the only exception.
"""
from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SOURCES = {"mlab.core": REPO / "core", "mlab.cli": REPO / "cli"}
CONTRACTS = ("mlab.core.task", "mlab.core.agent", "mlab.core.llm.backend", "mlab.core.sandbox.contract")
# The harness and what builds on it: a contract importing any of it could not be read (or imported) alone.
ABOVE_CONTRACTS = ("mlab.core.run", "mlab.core.bench", "mlab.core.sandbox.local", "mlab.core.view", "mlab.cli")
ARCHITECTURE = REPO / "docs" / "architecture.md"
# A newcomer reads the four in about 300 lines; what a plugin author does not implement lives beside them.
CONTRACT_LINES = 310


@dataclass
class Graph:
    files: dict[str, Path]
    runs: dict[str, set[str]] = field(default_factory=dict)  # module -> modules its imports run
    names: dict[str, set[str]] = field(default_factory=dict)  # module -> modules it imports, typing-only included


def module_files(sources: dict[str, Path]) -> dict[str, Path]:
    files = {}
    for package, folder in sources.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            files[".".join([package, *parts])] = path
    return files


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_statements(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement, anywhere in the module, with whether it only runs for a type checker."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def visit(node: ast.AST, typing_only: bool) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append((node, typing_only))
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, typing_only)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, typing_only)

    visit(tree, False)
    return found


def build_graph(sources: dict[str, Path]) -> Graph:
    graph = Graph(module_files(sources))
    trees = {name: ast.parse(path.read_text(encoding="utf-8")) for name, path in graph.files.items()}
    statements = {name: import_statements(tree) for name, tree in trees.items()}

    def source_of(package: str, name: str, seen: frozenset[str] = frozenset()) -> str:
        """The module `from package import name` really imports: a submodule, the module the package's
        __init__ imports the name from (lazily or not), or the one module below it defining the name."""
        if f"{package}.{name}" in graph.files:
            return f"{package}.{name}"
        if package not in trees or package in seen:
            return package
        for node, _ in statements[package]:
            if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == name for a in node.names):
                return source_of(absolute(package, node, is_package=True), name, seen | {package})
        definers = [module for module, tree in trees.items() if module.startswith(package + ".")
                    and any(defines(statement, name) for statement in tree.body)]
        return definers[0] if len(definers) == 1 else package

    def absolute(module: str, node: ast.ImportFrom, is_package: bool) -> str:
        if not node.level:
            return node.module or ""
        base = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        return f"{base}.{node.module}" if node.module else base

    importing = {module for module, found in statements.items() if found}
    for module in trees:
        runs, names = set(), set()
        is_package = graph.files[module].name == "__init__.py"
        for node, typing_only in statements[module]:
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                package = absolute(module, node, is_package)
                targets = [source_of(package, alias.name) for alias in node.names]
            for target in targets:
                # Importing a.b.c runs the packages a and a.b first (those that import anything matter); the
                # module's own packages have run already.
                parents = {".".join(target.split(".")[:i]) for i in range(1, target.count(".") + 1)}
                known = (parents & importing) | ({target} & graph.files.keys())
                known = {m for m in known if not (module + ".").startswith(m + ".")}
                names |= known
                if not typing_only:
                    runs |= known
        graph.runs[module], graph.names[module] = runs, names
    return graph


def defines(statement: ast.stmt, name: str) -> bool:
    if isinstance(statement, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        return statement.name == name
    if isinstance(statement, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in statement.targets)
    if isinstance(statement, ast.AnnAssign):
        return isinstance(statement.target, ast.Name) and statement.target.id == name
    return False


def circles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan), each a set of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                connect(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = set()
            while True:
                other = stack.pop()
                on_stack.discard(other)
                group.add(other)
                if other == node:
                    break
            if len(group) > 1:
                found.append(frozenset(group))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return found


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for other in edges.get(todo.pop(), ()):
            if other not in seen:
                seen.add(other)
                todo.append(other)
    return seen


def is_above(module: str) -> bool:
    return any(module == top or module.startswith(top + ".") for top in ABOVE_CONTRACTS)


def documented(section: str, item: str) -> list[list[str]]:
    """The modules each item of a section of docs/architecture.md names in backquotes before its first colon
    (`- ` bullets, or `1. ` numbered items with their continuation lines), as full module names; an item says
    why after the colon."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    found = re.search(rf"^## {section}\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE)
    assert found, f"docs/architecture.md has no '## {section}' section"
    items = re.findall(rf"^{item} (.*?)(?=^{item} |^\S|\Z)", found.group(1), re.DOTALL | re.MULTILINE)
    unexplained = [entry for entry in items if not entry.partition(":")[2].strip()]
    assert not unexplained, f"docs/architecture.md's '## {section}' gives no reason for {unexplained}"
    return [[n if n.startswith("mlab.") else f"mlab.core.{n}" for n in re.findall(r"`([\w.]+)`", text)]
            for text in (entry.split(":", 1)[0] for entry in items)]


def documented_circles() -> list[frozenset[str]]:
    return [frozenset(names) for names in documented("Circles", "-")]


def documented_layers() -> dict[str, int]:
    """Module or package -> its layer's number, from the numbered list of the Layers section."""
    layers = {"mlab.core": 0}  # the package itself only names its exports (lazily)
    listed = documented("Layers", r"\d+\.")
    assert listed, "docs/architecture.md's '## Layers' lists nothing"
    for number, names in enumerate(listed, start=1):
        layers.update(dict.fromkeys(names, number))
    return layers


def layer_of(module: str, layers: dict[str, int]) -> int:
    placed = [name for name in layers if module == name or module.startswith(name + ".")]
    assert placed, f"docs/architecture.md's layers place no package holding {module}"
    return layers[max(placed, key=len)]


@functools.cache
def core_graph() -> Graph:
    """mlab's own graph, built by the cases that read it (not by every xdist worker's collection: 1.2 CPU-s)."""
    return build_graph(SOURCES)


def test_the_graph_follows_function_local_imports_re_exports_and_packages(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                         "    from pkg.low import Thing\n")
    (package / "low.py").write_text("class Thing: ...\n\ndef later():\n    from pkg.high import use\n")
    (package / "high.py").write_text("from pkg import Thing\n\ndef use(): ...\n")
    (package / "sub" / "__init__.py").write_text("from . import helper\n")
    (package / "sub" / "helper.py").write_text("")
    (package / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                      "    from pkg.sub.helper import x\n")
    graph = build_graph({"pkg": package})
    assert graph.runs["pkg.low"] == {"pkg.high"}  # inside a function
    assert graph.runs["pkg.high"] == {"pkg.low"}  # a re-export is its source
    assert graph.runs["pkg.sub"] == {"pkg.sub.helper"}  # a relative import of a submodule
    assert graph.runs["pkg.typed"] == set() and graph.names["pkg.typed"] == {"pkg.sub", "pkg.sub.helper"}
    (package / "other.py").write_text("import pkg.sub.helper\n")
    assert build_graph({"pkg": package}).runs["pkg.other"] == {"pkg.sub", "pkg.sub.helper"}  # packages on the way
    assert circles(graph.runs) == [frozenset({"pkg.low", "pkg.high"})]


def test_the_four_contracts_read_in_about_300_lines():
    lines = {name: len(core_graph().files[name].read_text(encoding="utf-8").splitlines()) for name in CONTRACTS}
    assert sum(lines.values()) <= CONTRACT_LINES, f"the contracts have {sum(lines.values())} lines: {lines}"


@pytest.mark.parametrize("contract", CONTRACTS)
def test_a_contract_imports_nothing_of_the_harness(contract):
    direct = sorted(m for m in core_graph().names[contract] if is_above(m))
    assert not direct, f"{contract} imports {direct}"
    pulled = sorted(m for m in reachable(core_graph().runs, contract) if is_above(m))
    assert not pulled, f"importing {contract} runs {pulled}"


def test_architecture_lists_every_circle_and_only_those():
    actual = set(circles(core_graph().runs))
    listed = documented_circles()
    assert len(listed) == len(set(listed)), "a circle is listed twice"
    missing = [sorted(c) for c in actual - set(listed)]
    stale = [sorted(c) for c in set(listed) - actual]
    assert not missing, f"circles in the code that docs/architecture.md does not list: {missing}"
    assert not stale, f"circles docs/architecture.md lists that the code no longer has: {stale}"


def test_architecture_lists_every_upward_import_and_only_those():
    """Every import from a later layer, one inside a circle or a function included."""
    layers = documented_layers()
    upward = {(module, target) for module, targets in core_graph().runs.items() for target in targets
              if layer_of(target, layers) > layer_of(module, layers)}
    listed = []
    for names in documented("Upward imports", "-"):
        assert len(names) == 2, f"an upward import names an importer and what it imports, not {names}"
        listed.append((names[0], names[1]))
    missing = sorted(upward - set(listed))
    stale = sorted(set(listed) - upward)
    assert not missing, f"upward imports docs/architecture.md does not list: {missing}"
    assert not stale, f"upward imports docs/architecture.md lists that the code no longer has: {stale}"
