"""Builds the plugin manager: mlab's built-in plugins and the entry points of group 'mlab', loaded one by one
so one broken plugin breaks nothing else."""
from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pluggy

from mlab.core import hookspecs
from mlab.core.errors import MlabError
from mlab.core.plugins.discovery import distribution_version, entry_points

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
    return distribution_version(BUILTIN_DISTRIBUTION) or "?"


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
    installed = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
    if allowed is not None:
        known = set(BUILTIN_PLUGINS) | {ep.name for ep in installed}
        unknown = sorted(allowed - known)
        if unknown:
            raise MlabError(f"MLAB_LOAD_PLUGINS names {', '.join(map(repr, unknown))}, which "
                            f"{'is' if len(unknown) == 1 else 'are'} not installed"
                            f"{''.join(_did_you_mean(name, sorted(known)) for name in unknown)}; installed plugins: "
                            f"{', '.join(sorted(known))}")
    for ep in installed:
        if allowed is not None and ep.name not in allowed:
            continue
        info = PluginInfo(name=ep.name, distribution=ep.distribution, version=ep.version, module=ep.value)
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
    if hasattr(module, "__path__") and not hookspecs.has_hooks(module):
        # A package without hooks may be a declarative pack: a folder of task folders (task.yaml each).
        from mlab.core.declarative.pack import as_plugin

        module = as_plugin(module, info.name)
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
        info.error = f"invalid hook implementation: {_explained(exc)}"
        return
    info.hooks = sorted(caller.name for caller in pm.get_hookcallers(module) or [])


def _explained(exc: pluggy.PluginValidationError) -> str:
    """pluggy's complaint in one line, with the hook or argument the author probably meant."""
    hooks = sorted(name for name in dir(hookspecs) if hasattr(getattr(hookspecs, name), f"{hookspecs.PROJECT}_spec"))
    unknown_hook = re.search(r"unknown hook '(\w+)'", str(exc))
    if unknown_hook:
        name = unknown_hook.group(1)
        return f"unknown hook '{name}'{_did_you_mean(name, hooks)}; hooks: {', '.join(hooks)}"
    bad_args = re.search(r"for hook '(\w+)'.*Argument\(s\) \{(.*?)\} are declared", str(exc), re.S)
    if bad_args and bad_args.group(1) in hooks:
        hook = bad_args.group(1)
        valid = list(inspect.signature(getattr(hookspecs, hook)).parameters)
        args = re.findall(r"'(\w+)'", bad_args.group(2))
        hints = "".join(_did_you_mean(a, valid) for a in args)
        return (f"{hook}() takes no argument {', '.join(map(repr, args))}{hints}; its arguments: "
                f"{', '.join(valid)}")
    return " ".join(str(exc).split())


def _did_you_mean(name: str, names: list[str]) -> str:
    import difflib  # only when something is wrong: listing plugins does without it

    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _unregister_quietly(pm: pluggy.PluginManager, plugin: object) -> None:
    # register() may have refused the plugin before registering it (an argument the hook does not have)
    if pm.is_registered(plugin):
        pm.unregister(plugin)
