"""Plugins and examples use mlab's public API only, and CONTRIBUTING.md lists exactly that API.

The public API is what `mlab.core` exports in `__all__`, plus the names exported by the few submodules listed
in PUBLIC_MODULES (`mlab.core.agentkit` for agents, `mlab.core.bridge` for bridges). Everything else in the core
is internal: a plugin reaching into it would break whenever the core is reorganised, so these checks read every
plugin's source, bridges included (with `ast`, importing nothing of it).
"""
from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Collection
from pathlib import Path

import pytest

import mlab.core
import mlab.core.agentkit
import mlab.core.bridge

REPO = Path(__file__).resolve().parents[1]
SCANNED = [REPO / "plugins", REPO / "examples"]  # bridges too: they drive a run through mlab.core.bridge
SKIPPED_PARTS = {"__pycache__", "build", "dist"}
# Modules a plugin may import from, with the names each one exports.
PUBLIC_MODULES: dict[str, set[str]] = {
    "mlab.core": set(mlab.core.__all__),
    "mlab.core.agentkit": set(mlab.core.agentkit.__all__),
    "mlab.core.bridge": set(mlab.core.bridge.__all__),
}


def plugin_sources() -> list[Path]:
    files = []
    for root in SCANNED:
        for path in sorted(root.rglob("*.py")):
            parts = set(path.relative_to(REPO).parts)
            if not parts & SKIPPED_PARTS and not any(p.endswith(".egg-info") for p in parts):
                files.append(path)
    return files


def own_packages(path: Path) -> set[str]:
    """The import packages of the distribution holding path (the folder with its pyproject.toml)."""
    for folder in path.parents:
        if (folder / "pyproject.toml").is_file():
            return {p.name for p in folder.iterdir() if (p / "__init__.py").is_file()}
    return set()


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` for a chain of attribute reads on a name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _check_module(module: str) -> str | None:
    if module in PUBLIC_MODULES:
        return None
    return f"imports the internal module {module}"


def _check_name(module: str, name: str) -> str | None:
    if name == "*" or name in PUBLIC_MODULES[module] or f"{module}.{name}" in PUBLIC_MODULES:
        return None
    return f"imports {name} from {module}, which does not export it"


def api_violations(source: str, own: Collection[str] = ()) -> list[str]:
    """What in this source reaches past the public API, or into another plugin, one line each."""
    problems: list[tuple[int, str]] = []

    def mlab_module(module: str, line: int) -> None:
        if module == "mlab" or module.startswith("mlab."):
            problem = _check_module(module)
            if problem:
                problems.append((line, problem))
        elif module.startswith("mlab_") and module.split(".")[0] not in own:
            problems.append((line, f"imports {module}, a package of another plugin"))

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                mlab_module(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "mlab":  # `from mlab import core`: the module itself must be public
                for alias in node.names:
                    mlab_module(f"mlab.{alias.name}", node.lineno)
            elif node.module in PUBLIC_MODULES:
                for alias in node.names:
                    problem = _check_name(node.module, alias.name)
                    if problem:
                        problems.append((node.lineno, problem))
            else:
                mlab_module(node.module, node.lineno)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            # `mlab.core.run.taskdata.x` after `import mlab.core`: the attribute after a public module
            dotted = _dotted(node)
            for module in PUBLIC_MODULES:
                if dotted and dotted.startswith(module + ".") and dotted.count(".") == module.count(".") + 1:
                    problem = _check_name(module, dotted.rsplit(".", 1)[1])
                    if problem:
                        problems.append((node.lineno, problem))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            called = _dotted(node.func)
            if called in ("importlib.import_module", "import_module", "__import__") \
                    and isinstance(node.args[0].value, str):
                mlab_module(node.args[0].value, node.lineno)
    return [f"line {line}: {what}" for line, what in sorted(set(problems))]


def test_the_scan_covers_every_plugin_and_the_example():
    files = plugin_sources()
    rel = {f.relative_to(REPO).as_posix() for f in files}
    assert len(files) > 40
    for expected in ("plugins/agents/research/mlab_agent_research/agent.py",
                     "plugins/llms/scripted/mlab_llm_scripted/__init__.py",
                     "plugins/bridges/inspect/mlab_bridge_inspect/sandbox.py",
                     "plugins/bridges/inspect/mlab_bridge_inspect/registry.py",
                     "examples/task-pack-example/mlab_example_tasks/line_fit.py",
                     "examples/task-pack-example/tests/test_line_fit.py"):
        assert expected in rel


@pytest.mark.parametrize("path", plugin_sources(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_plugins_and_examples_import_only_the_public_api(path):
    problems = api_violations(path.read_text(encoding="utf-8"), own_packages(path))
    assert not problems, f"{path.relative_to(REPO)}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("source, problem", [
    ("from mlab.core.run import taskdata", "internal module mlab.core.run"),
    ("from mlab.core.sandbox.local import LocalSandbox", "internal module mlab.core.sandbox.local"),
    ("import mlab.core.run.environment", "internal module mlab.core.run.environment"),
    ("from mlab import cli", "internal module mlab.cli"),
    ("from mlab.core import taskdata", "imports taskdata from mlab.core"),
    ("from mlab.core.agentkit import _chunks", "imports _chunks from mlab.core.agentkit"),
    ("from mlab.core.agentkit.options import pick_actions", "internal module mlab.core.agentkit.options"),
    ("import mlab.core\nmlab.core.run.taskdata.prepare(t)", "imports run from mlab.core"),
    ("def f():\n    from mlab.core.llm.client import LLMClient", "internal module mlab.core.llm.client"),
    ("import importlib\nimportlib.import_module('mlab.core.run.runner')", "internal module mlab.core.run.runner"),
    ("from mlab_agent_research.agent import DEFAULT_ACTIONS", "a package of another plugin"),
    ("from mlab.core.bridge import Harness", "imports Harness from mlab.core.bridge"),
    ("from mlab.core.run.harness import Harness", "internal module mlab.core.run.harness"),
])
def test_the_check_catches_reaching_past_the_api(source, problem):
    problems = api_violations(source, own={"mlab_agent_autogpt"})
    assert len(problems) == 1 and problem in problems[0], problems


def test_the_check_accepts_the_public_api():
    source = ("from mlab.core import Agent, LLMClient, hookimpl\nfrom mlab.core.agentkit import loads_lenient\n"
              "import mlab.core\nfrom mlab.core import agentkit\nmlab.core.Task\nfrom . import prompts\n"
              "from mlab_agent_autogpt.x import y\nfrom mlab.core.bridge import BridgedRun\n")
    assert api_violations(source, own={"mlab_agent_autogpt"}) == []


def test_every_exported_name_exists():
    for module, names in PUBLIC_MODULES.items():
        imported = importlib.import_module(module)
        assert len(names) == len(imported.__all__), f"{module}.__all__ has duplicates"
        missing = sorted(n for n in names if not hasattr(imported, n))
        assert not missing, f"{module}.__all__ names what it does not define: {missing}"


# ---- CONTRIBUTING.md ----------------------------------------------------------------------------------------
def documented_imports(module: str) -> list[str]:
    """The names of the `from MODULE import (...)` block in CONTRIBUTING.md's Python examples."""
    text = (REPO / "CONTRIBUTING.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    found = [block for block in blocks if block.lstrip().startswith(f"from {module} import (")]
    assert len(found) == 1, f"CONTRIBUTING.md should have one block starting `from {module} import (`"
    [statement] = ast.parse(found[0]).body
    assert isinstance(statement, ast.ImportFrom)
    return [alias.name for alias in statement.names]


@pytest.mark.parametrize("module", sorted(PUBLIC_MODULES))
def test_contributing_lists_exactly_the_public_api(module):
    documented = documented_imports(module)
    assert len(documented) == len(set(documented)), "a name is listed twice"
    exported = PUBLIC_MODULES[module]
    assert not set(documented) - exported, f"documented but not exported: {sorted(set(documented) - exported)}"
    assert not exported - set(documented), f"exported but not documented: {sorted(exported - set(documented))}"
