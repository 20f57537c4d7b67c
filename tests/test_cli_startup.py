"""`mlab --help` imports click alone, and a command imports only its own module."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
import tomllib

from mlab.cli.main import COMMANDS, cli, load_command
from tests.fixtures.cli import mlab_in_process

PROBE = ("import sys\nfrom mlab.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
         "print('MODULES', ' '.join(sorted(sys.modules)))")


def imported_by(*args: str) -> set[str]:
    """The modules loaded by the time `mlab ARGS` ends, in a fresh interpreter."""
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return set(result.stdout.rsplit("MODULES ", 1)[1].split())


def test_mlab_help_imports_no_command_module_pydantic_or_rich():
    modules = imported_by("--help")
    heavy = sorted(m for m in modules if m.split(".")[0] in ("pydantic", "rich", "pluggy")
                   or m.startswith("mlab.core") or m.endswith("_cmds"))
    assert heavy == []


def test_a_commands_help_imports_its_own_module_only():
    modules = imported_by("tasks", "--help")
    assert "mlab.cli.inspect_cmds" in modules
    assert sorted(m for m in modules if m.endswith("_cmds")) == ["mlab.cli.inspect_cmds"]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_listing_says_what_each_command_says_of_itself(name):
    command = load_command(name)
    assert command.name == name
    assert COMMANDS[name][2] == command.get_short_help_str(limit=150)


def test_an_unknown_command_is_a_usage_error():
    ctx = click.Context(cli)
    assert cli.get_command(ctx, "nosuch") is None
    result = mlab_in_process("nosuch")
    assert result.returncode == 2 and "No such command" in result.stderr and "Traceback" not in result.stderr


# ---- list-plugins: plugin modules, nothing heavy (issue 14) ----------------------------------------------------
REPO = Path(__file__).resolve().parents[1]
# What listing plugins must not import: the ML stacks and clients plugins use, mlab's models and everything
# under them (runs, sandboxes, LLM clients, task and agent bases), and the two costly general-purpose imports it
# no longer needs (importlib.metadata: core/plugins/discovery.py reads entry points itself; pydantic: nothing
# listed is a model).
DENIED_PACKAGES = ("numpy", "pandas", "sklearn", "scipy", "torch", "litellm", "langchain", "langchain_core",
                   "openai", "matplotlib", "pydantic", "pydantic_core", "yaml")
DENIED_MODULES = ("importlib.metadata", "mlab.core.models", "mlab.core.task", "mlab.core.agent",
                  "mlab.core.actions", "mlab.core.agentkit", "mlab.core.run", "mlab.core.sandbox", "mlab.core.llm",
                  "mlab.core.bench", "mlab.core.declarative")


def denied(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in DENIED_PACKAGES
                  or any(m == d or m.startswith(d + ".") for d in DENIED_MODULES))


def builtin_entry_points() -> dict[str, str]:
    """Entry-point name -> distribution of every plugin shipped in plugins/, read from their pyproject.toml."""
    found = {}
    for pyproject in sorted(REPO.glob("plugins/*/*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        for name in project["entry-points"].get("mlab", {}):  # a bridge registers with another framework only
            found[name] = project["name"]
    return found


def listing(*args: str) -> tuple[str, set[str]]:
    result = subprocess.run([sys.executable, "-c", PROBE, "list-plugins", *args], capture_output=True, text=True,
                            timeout=120, env={k: v for k, v in os.environ.items() if k != "MLAB_LOAD_PLUGINS"},
                            cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    out, modules = result.stdout.rsplit("MODULES ", 1)
    return out, set(modules.split())


def test_list_plugins_imports_nothing_heavy_and_lists_every_builtin_plugin():
    table, modules = listing()
    assert denied(modules) == []
    shipped = builtin_entry_points()
    assert len(shipped) >= 13
    for name, distribution in {**shipped, "local": "mlab"}.items():
        assert any(line.split("│")[1:3] == [f" {name} ".ljust(len(line.split("│")[1])),
                                            f" {distribution} ".ljust(len(line.split("│")[2]))]
                   for line in table.splitlines() if line.count("│") > 3), f"{name} ({distribution}) not listed"

    report, modules = listing("--json")
    assert denied(modules) == []
    plugins = {p["name"]: p for p in json.loads(report)["plugins"]}
    for name, distribution in {**shipped, "local": "mlab"}.items():
        plugin = plugins[name]
        assert plugin["distribution"] == distribution and plugin["error"] is None
        assert any(plugin[kind] for kind in ("tasks", "agents", "llms", "sandboxes")), plugin
    assert "lite/digits" in plugins["lite"]["tasks"] and "research" in plugins["research"]["agents"]


def builtin_registrations() -> list[tuple[str, str, object]]:
    """(kind, plugin, what its hook registered) for every built-in plugin, the example pack's included."""
    from mlab.core.plugins.manager import BUILTIN_PLUGINS
    from mlab.core.plugins.registry import HOOKS

    modules = {**BUILTIN_PLUGINS, "example": "mlab_example_tasks"}
    for pyproject in sorted(REPO.glob("plugins/*/*/pyproject.toml")):
        modules.update(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["entry-points"].get("mlab", {}))
    registered = []
    for plugin, module_name in modules.items():
        module = importlib.import_module(module_name)
        for kind, hook in HOOKS.items():
            if hasattr(module, hook):
                getattr(module, hook)(register=lambda obj, _k=kind, _p=plugin: registered.append((_k, _p, obj)))
    return registered


def test_every_builtin_registration_is_lazy_and_loads_what_it_declares(monkeypatch):
    from mlab.core import Lazy
    from mlab.core.plugins.registry import _load

    monkeypatch.syspath_prepend(str(REPO / "examples" / "task-pack-example"))
    registered = builtin_registrations()
    assert {plugin for _kind, plugin, _obj in registered} >= {*builtin_entry_points(), "local", "example"}
    eager = [f"{plugin}: {obj!r}" for _kind, plugin, obj in registered if not isinstance(obj, Lazy)]
    assert eager == [], "built-in plugins register by name (Lazy), so listing them imports no body"
    for kind, plugin, lazy in registered:
        assert isinstance(lazy, Lazy) and lazy.problem() is None
        loaded = _load(kind, lazy, plugin)  # raises when the target is missing, of the wrong kind or misnamed
        assert loaded.description.strip() and "\n" not in loaded.description, f"{lazy.target}: no one-line description"
