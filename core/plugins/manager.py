"""Builds the plugin manager: entry points of group 'mlab', loaded one by one so one broken plugin breaks nothing else."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from importlib.metadata import entry_points

import pluggy

from mlab.core import hookspecs

ENTRY_POINT_GROUP = "mlab"
REGISTRATION_HOOKS = ("register_tasks", "register_agents", "register_llms", "register_sandboxes")


@dataclass
class PluginInfo:
    name: str
    distribution: str
    version: str
    module: str
    error: str | None = None
    hooks: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)
    llms: list[str] = field(default_factory=list)
    sandboxes: list[str] = field(default_factory=list)


def _allowed_names() -> set[str] | None:
    """MLAB_LOAD_PLUGINS limits loading to a comma list of entry-point names; empty means none."""
    value = os.environ.get("MLAB_LOAD_PLUGINS")
    if value is None:
        return None
    return {name.strip() for name in value.split(",") if name.strip()}


def build_plugin_manager() -> tuple[pluggy.PluginManager, list[PluginInfo]]:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    infos: list[PluginInfo] = []
    allowed = _allowed_names()
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if allowed is not None and ep.name not in allowed:
            continue
        dist = ep.dist
        info = PluginInfo(name=ep.name, distribution=dist.metadata["Name"] if dist else "?",
                          version=dist.version if dist else "?", module=ep.value)
        infos.append(info)
        try:
            module = ep.load()
        except BaseException as exc:  # a plugin's import may raise anything, SystemExit included
            info.error = f"import failed: {type(exc).__name__}: {exc}"
            continue
        if pm.is_registered(module):
            info.error = f"module {ep.value} is already registered by another entry point"
            continue
        try:
            pm.register(module, name=ep.name)
            pm.check_pending()
        except pluggy.PluginValidationError as exc:
            _unregister_quietly(pm, module)
            info.error = f"invalid hook implementation: {exc}"
            continue
        info.hooks = sorted(caller.name for caller in pm.get_hookcallers(module) or [])
    return pm, infos


def _unregister_quietly(pm: pluggy.PluginManager, plugin) -> None:
    try:
        pm.unregister(plugin)
    except ValueError:
        pass
