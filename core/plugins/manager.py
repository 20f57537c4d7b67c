"""Builds the plugin manager: mlab's built-in plugins and the entry points of group 'mlab', loaded one by one
so one broken plugin breaks nothing else."""
from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, entry_points, version

import pluggy

from mlab.core import hookspecs

ENTRY_POINT_GROUP = "mlab"
# Plugins inside mlab itself (name -> module), loaded before installed ones and named in MLAB_LOAD_PLUGINS alike.
BUILTIN_PLUGINS = {"local": "mlab.core.plugins.builtin"}
BUILTIN_DISTRIBUTION = "mlab"


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


def allowed_names() -> set[str] | None:
    """MLAB_LOAD_PLUGINS limits loading to a comma list of plugin names; empty means none, unset means all."""
    value = os.environ.get("MLAB_LOAD_PLUGINS")
    if value is None:
        return None
    return {name.strip() for name in value.split(",") if name.strip()}


def _mlab_version() -> str:
    try:
        return version(BUILTIN_DISTRIBUTION)
    except PackageNotFoundError:
        return "?"


def build_plugin_manager() -> tuple[pluggy.PluginManager, list[PluginInfo]]:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    infos: list[PluginInfo] = []
    allowed = allowed_names()
    for name, module_name in BUILTIN_PLUGINS.items():
        if allowed is not None and name not in allowed:
            continue
        info = PluginInfo(name=name, distribution=BUILTIN_DISTRIBUTION, version=_mlab_version(), module=module_name)
        infos.append(info)
        _load(pm, info, functools.partial(importlib.import_module, module_name))
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if allowed is not None and ep.name not in allowed:
            continue
        dist = ep.dist
        info = PluginInfo(name=ep.name, distribution=dist.metadata["Name"] if dist else "?",
                          version=dist.version if dist else "?", module=ep.value)
        infos.append(info)
        _load(pm, info, ep.load)
    return pm, infos


def _load(pm: pluggy.PluginManager, info: PluginInfo, load: Callable[[], object]) -> None:
    """Import one plugin and register it under info.name; what goes wrong is written to info.error."""
    try:
        module = load()
    except BaseException as exc:  # a plugin's import may raise anything, SystemExit included
        info.error = f"import failed: {type(exc).__name__}: {exc}"
        return
    if pm.is_registered(module):
        info.error = f"module {info.module} is already registered by another entry point"
        return
    if pm.get_plugin(info.name) is not None:
        info.error = f"the plugin name {info.name!r} is taken by another plugin"
        return
    try:
        pm.register(module, name=info.name)
        pm.check_pending()
    except pluggy.PluginValidationError as exc:
        _unregister_quietly(pm, module)
        info.error = f"invalid hook implementation: {exc}"
        return
    info.hooks = sorted(caller.name for caller in pm.get_hookcallers(module) or [])


def _unregister_quietly(pm: pluggy.PluginManager, plugin: object) -> None:
    try:
        pm.unregister(plugin)
    except ValueError:
        pass
