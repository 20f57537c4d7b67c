"""Collects what plugins register, validates it, and finds things by name."""
from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pluggy

from mlab.core.agent import Agent
from mlab.core.errors import MlabError
from mlab.core.llm.backend import LLM
from mlab.core.plugins.manager import PluginInfo, build_plugin_manager
from mlab.core.sandbox.contract import Sandbox
from mlab.core.task import Task

KINDS = {"tasks": "task", "agents": "agent", "llms": "LLM backend", "sandboxes": "sandbox"}


# A task is PACK/NAME: the pack is the entry-point name of the plugin registering it, so names are unique across
# distributions and a third-party pack cannot claim another pack's tasks (lite/digits).
NAME_PART = r"[a-z0-9]+(?:-[a-z0-9]+)*"
TASK_NAME = re.compile(rf"{NAME_PART}/{NAME_PART}")


def task_name_problem(name: str, plugin: str) -> str | None:
    """Why a plugin may not register a task under this name, or None."""
    if not TASK_NAME.fullmatch(name):
        return (f"task name {name!r} is not PACK/NAME in lowercase letters, digits and single hyphens "
                f"(e.g. '{plugin}/my-task')")
    pack = name.split("/", 1)[0]
    if pack != plugin:
        return (f"task {name!r} is outside its pack: plugin {plugin!r} (its entry-point name) may register only "
                f"'{plugin}/...' tasks")
    return None


def _validate_task(obj: Any, plugin: str) -> str | None:
    if not isinstance(obj, Task):
        return f"register_tasks got {type(obj).__name__}, not a Task instance"
    for attr in ("name", "description", "research_problem"):
        if not isinstance(getattr(obj, attr, None), str) or not getattr(obj, attr).strip():
            return f"task {getattr(obj, 'name', '?')!r} has no {attr}"
    return task_name_problem(obj.name, plugin)


def _validate_class(base: type, hook: str) -> Callable[[Any, str], str | None]:
    def check(obj: Any, _plugin: str) -> str | None:
        if not (isinstance(obj, type) and issubclass(obj, base)):
            return f"{hook} got {obj!r}, not a {base.__name__} subclass"
        name = getattr(obj, "name", None)
        if not isinstance(name, str) or not name.strip():
            return f"{obj.__name__} has no name"
        return None
    return check


_VALIDATORS = {
    "tasks": ("register_tasks", _validate_task),
    "agents": ("register_agents", _validate_class(Agent, "register_agents")),
    "llms": ("register_llms", _validate_class(LLM, "register_llms")),
    "sandboxes": ("register_sandboxes", _validate_class(Sandbox, "register_sandboxes")),
}


@dataclass
class Registry:
    plugins: list[PluginInfo]
    items: dict[str, dict[str, Any]] = field(default_factory=lambda: {k: {} for k in KINDS})
    providers: dict[str, dict[str, str]] = field(default_factory=lambda: {k: {} for k in KINDS})
    conflicts: list[str] = field(default_factory=list)
    contested: dict[str, dict[str, str]] = field(default_factory=lambda: {k: {} for k in KINDS})
    pm: Any = None
    load_filter: str | None = None  # MLAB_LOAD_PLUGINS when it was set: it may explain a missing name

    def get(self, kind: str, name: str) -> Any:
        """Find by exact name, or by the part after 'pack/' when only one item has it."""
        items = self.items[kind]
        full = name if name in items else None
        if full is None:
            short = [key for key in items if key.split("/")[-1] == name]
            if len(short) > 1:
                raise MlabError(f"{KINDS[kind]} name {name!r} is ambiguous: {', '.join(sorted(short))}")
            if not short:
                valid = ", ".join(sorted(items)) or "(none installed)"
                why = "" if self.load_filter is None else \
                    f" (only the plugins named in MLAB_LOAD_PLUGINS={self.load_filter!r} were loaded)"
                raise MlabError(f"unknown {KINDS[kind]} {name!r}; valid: {valid}{why}{self._failed_note()}")
            full = short[0]
        if full in self.contested[kind]:
            raise MlabError(self.contested[kind][full])
        return items[full]

    def _failed_note(self) -> str:
        """Plugins that failed to load may be the ones that would have provided a missing name."""
        failed = [p for p in self.plugins if p.error]
        if not failed:
            return ""
        names = ", ".join(f"{p.name} ({p.distribution})" for p in failed)
        return f"; {len(failed)} plugin(s) failed to load or register and may have provided it: {names} " \
               "(see: mlab list-plugins)"

    def conflict(self, kind: str, name: str) -> str | None:
        """Why a name is contested (two distributions registered it), or None."""
        return self.contested[kind].get(name)

    def plugin_errors(self) -> list[str]:
        """Every plugin's load or registration error, one line each, for listings."""
        return [f"plugin {p.name} ({p.distribution} {p.version}): {p.error}" for p in self.plugins if p.error]

    def provider(self, kind: str, name: str) -> str:
        return self.providers[kind].get(name, "?")


def _collect(registry: Registry, info_by_name: dict[str, PluginInfo], kind: str, obj: Any, plugin_name: str,
             dist: str) -> None:
    hook, validate = _VALIDATORS[kind]
    problem = validate(obj, plugin_name)
    info = info_by_name.get(plugin_name)
    if problem:
        if info is not None:
            info.error = "; ".join(filter(None, [info.error, f"invalid registration: {problem}"]))
        return
    name = obj.name
    existing = registry.providers[kind].get(name)
    if existing is not None:
        message = f"{KINDS[kind]} {name!r} is registered twice: by {existing} and by {dist}"
        registry.conflicts.append(message)
        registry.contested[kind][name] = message
        for other in info_by_name.values():
            if name in getattr(other, kind) or other.name == plugin_name:
                other.error = "; ".join(filter(None, [other.error, message]))
        return
    registry.items[kind][name] = obj
    registry.providers[kind][name] = dist
    if info is not None:
        getattr(info, kind).append(name)


def plugins_in_call_order(pm: pluggy.PluginManager, hook: str) -> list[str]:
    """The plugins implementing hook (wrappers aside) in the order pluggy calls them: tryfirst ones first,
    trylast ones last, the others last registered first."""
    names: list[str] = []
    for impl in reversed(getattr(pm.hook, hook).get_hookimpls()):
        if not (impl.hookwrapper or impl.wrapper) and impl.plugin_name not in names:
            names.append(impl.plugin_name)
    return names


@functools.lru_cache(maxsize=1)
def load_registry() -> Registry:
    pm, infos = build_plugin_manager()
    registry = Registry(plugins=infos, pm=pm, load_filter=os.environ.get("MLAB_LOAD_PLUGINS"))
    info_by_name = {info.name: info for info in infos}
    for kind, (hook, _validate) in _VALIDATORS.items():
        implementers = plugins_in_call_order(pm, hook)
        for plugin_name in implementers:
            info = info_by_name.get(plugin_name)
            dist = f"{info.distribution} {info.version}" if info else plugin_name
            # One plugin per call, through pluggy (wrappers included), so an error is this plugin's alone.
            others = [pm.get_plugin(name) for name in implementers if name != plugin_name]
            call = pm.subset_hook_caller(hook, remove_plugins=others)
            try:
                call(register=lambda obj, _k=kind, _p=plugin_name, _d=dist:
                     _collect(registry, info_by_name, _k, obj, _p, _d))
            except BaseException as exc:
                if info is not None:
                    info.error = "; ".join(filter(None, [info.error, f"{hook} raised {type(exc).__name__}: {exc}"]))
    return registry
