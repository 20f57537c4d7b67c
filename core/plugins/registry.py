"""Collects what plugins register, validates it, and finds things by name."""
from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, ItemsView, Iterator, MutableMapping, ValuesView
from dataclasses import dataclass, field
from typing import Any

import pluggy

from mlab.core.errors import MlabError
from mlab.core.hookspecs import task_name_problem
from mlab.core.plugins.lazy import Lazy
from mlab.core.plugins.manager import PluginInfo, build_plugin_manager

KINDS = {"tasks": "task", "agents": "agent", "llms": "LLM backend", "sandboxes": "sandbox"}


HOOKS = {"tasks": "register_tasks", "agents": "register_agents", "llms": "register_llms",
         "sandboxes": "register_sandboxes"}


def _base_class(kind: str) -> type:
    """The class a kind's objects derive from, imported only when an object is checked: listing plugins that
    register by name (Lazy) imports none of them."""
    if kind == "tasks":
        from mlab.core.task import Task
        return Task
    if kind == "agents":
        from mlab.core.agent import Agent
        return Agent
    if kind == "llms":
        from mlab.core.llm.backend import LLM
        return LLM
    from mlab.core.sandbox.contract import Sandbox
    return Sandbox


def _object_problem(kind: str, obj: Any, plugin: str) -> str | None:
    """Why a registered object (not a Lazy) is refused, or None."""
    base = _base_class(kind)
    if kind == "tasks":
        if not isinstance(obj, base):
            return f"register_tasks got {type(obj).__name__}, not a Task instance"
        for attr in ("name", "description", "research_problem"):
            if not isinstance(getattr(obj, attr, None), str) or not getattr(obj, attr).strip():
                return f"task {getattr(obj, 'name', '?')!r} has no {attr}"
        return task_name_problem(getattr(obj, "name", ""), plugin)
    if not (isinstance(obj, type) and issubclass(obj, base)):
        return f"{HOOKS[kind]} got {obj!r}, not a {base.__name__} subclass"
    name = getattr(obj, "name", None)
    if not isinstance(name, str) or not name.strip():
        return f"{obj.__name__} has no name"
    return None


def _registration_problem(kind: str, obj: Any, plugin: str) -> str | None:
    """Why a registration is refused when the hook makes it: a Lazy is checked without importing anything."""
    if not isinstance(obj, Lazy):
        return _object_problem(kind, obj, plugin)
    return obj.problem() or (task_name_problem(obj.name, plugin) if kind == "tasks" else None)


class LoadError(MlabError):
    """A Lazy registration whose object could not be imported, or is not what it was declared to be."""


def _load(kind: str, lazy: Lazy, plugin: str) -> Any:
    """The object behind a Lazy registration, checked as an eagerly registered one would be."""
    try:
        obj = lazy.load()
        if kind == "tasks" and isinstance(obj, type) and issubclass(obj, _base_class("tasks")):
            obj = obj()  # a pack registers each task once, as one instance
    except (Exception, SystemExit) as exc:  # a plugin's import may raise anything
        raise LoadError(f"loading {lazy.target} failed: {type(exc).__name__}: {exc}") from exc
    problem = _object_problem(kind, obj, plugin)
    if problem is None and obj.name != lazy.name:
        problem = f"registered as {lazy.name!r}, but {lazy.target} is named {obj.name!r}"
    if problem:
        raise LoadError(problem)
    return obj


class Items(MutableMapping[str, Any]):
    """One kind's registered objects by name. A Lazy registration is imported on first access to its value and
    replaced by its object; names, `in` and `len` never import anything.

    An object that fails to load is dropped and becomes its plugin's error: reading it raises LoadError (one
    line), and iterating values() or items() leaves it out, so one broken registration hides nothing else."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._objects: dict[str, Any] = {}
        self._owners: dict[str, str] = {}  # name -> plugin that registered it, for the checks at load time
        self._failed: dict[str, str] = {}  # name -> why it could not be loaded
        self._lock = threading.RLock()  # bench threads may ask for the same task at once: it loads once
        self.on_failure: Callable[[str, str], None] = lambda plugin, message: None

    def register(self, name: str, obj: Any, plugin: str) -> None:
        self[name] = obj
        self._owners[name] = plugin

    def is_loaded(self, name: str) -> bool:
        return not isinstance(self._objects[name], Lazy)

    def failure(self, name: str) -> str | None:
        """Why the object registered as name could not be loaded, or None."""
        return self._failed.get(name)

    def failed_names(self) -> list[str]:
        return list(self._failed)

    def __getitem__(self, name: str) -> Any:
        if name in self._failed:
            raise LoadError(self._failed[name])
        value = self._objects[name]
        return self._resolve(name, value) if isinstance(value, Lazy) else value

    def _resolve(self, name: str, lazy: Lazy) -> Any:
        with self._lock:
            if self._objects.get(name) is not lazy:  # another thread loaded it (or it failed) meanwhile
                return self[name]
            plugin = self._owners.get(name, "?")
            try:
                obj = _load(self.kind, lazy, plugin)
            except LoadError as exc:
                message = f"{KINDS[self.kind]} {name!r} of plugin {plugin} cannot be loaded: " + " ".join(
                    str(exc).split())
                del self._objects[name]
                self._failed[name] = message
                self.on_failure(plugin, message)
                raise LoadError(message) from exc.__cause__
            self._objects[name] = obj
            return obj

    def __setitem__(self, name: str, obj: Any) -> None:
        self._failed.pop(name, None)
        self._owners.pop(name, None)
        self._objects[name] = obj

    def __delitem__(self, name: str) -> None:
        if name in self._failed:
            del self._failed[name]
            return
        del self._objects[name]
        self._owners.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._objects

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._objects))

    def __len__(self) -> int:
        return len(self._objects)

    def values(self) -> ValuesView[Any]:
        return _LoadedValues(self)

    def items(self) -> ItemsView[str, Any]:
        return _LoadedItems(self)

    def _loaded(self) -> Iterator[tuple[str, Any]]:
        for name in list(self._objects):
            try:
                yield name, self[name]
            except (LoadError, KeyError):  # failed (its plugin's error says why) or removed meanwhile
                continue

    def __repr__(self) -> str:
        shown = {name: f"<not loaded: {v.target}>" if isinstance(v, Lazy) else v for name, v in self._objects.items()}
        return f"Items({self.kind!r}, {shown!r})"


class _LoadedValues(ValuesView[Any]):
    _mapping: Items

    def __iter__(self) -> Iterator[Any]:
        return (value for _name, value in self._mapping._loaded())


class _LoadedItems(ItemsView[str, Any]):
    _mapping: Items

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return self._mapping._loaded()


@dataclass
class Registry:
    plugins: list[PluginInfo]
    items: dict[str, Items] = field(default_factory=lambda: {k: Items(k) for k in KINDS})
    providers: dict[str, dict[str, str]] = field(default_factory=lambda: {k: {} for k in KINDS})
    conflicts: list[str] = field(default_factory=list)
    contested: dict[str, dict[str, str]] = field(default_factory=lambda: {k: {} for k in KINDS})
    pm: Any = None
    load_filter: str | None = None  # MLAB_LOAD_PLUGINS when it was set: it may explain a missing name

    def __post_init__(self) -> None:
        for items in self.items.values():
            items.on_failure = self._load_failed

    def _load_failed(self, plugin: str, message: str) -> None:
        for info in self.plugins:
            if info.name == plugin:
                info.error = "; ".join(filter(None, [info.error, message]))

    def get(self, kind: str, name: str) -> Any:
        """Find by exact name, or by the part after 'pack/' when only one item has it."""
        items = self.items[kind]
        full = name if name in items else None
        if full is None:
            short = [key for key in items if key.split("/")[-1] == name]
            if len(short) > 1:
                raise MlabError(f"{KINDS[kind]} name {name!r} is ambiguous: {', '.join(sorted(short))}")
            failed = items.failure(name) or next(
                (items.failure(key) for key in items.failed_names() if key.split("/")[-1] == name), None)
            if not short and failed:
                raise LoadError(failed)  # asked for again after it failed to load: the same one line
            if not short:
                valid = ", ".join(sorted(items)) or "(none installed)"
                why = "" if self.load_filter is None else \
                    f" (only the plugins named in MLAB_LOAD_PLUGINS={self.load_filter!r} were loaded)"
                raise MlabError(f"unknown {KINDS[kind]} {name!r};{_did_you_mean(name, list(items))} valid: {valid}{why}"
                                f"{self._failed_note()}")
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
    problem = _registration_problem(kind, obj, plugin_name)
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
    registry.items[kind].register(name, obj, plugin_name)
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
    for kind, hook in HOOKS.items():
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


def _did_you_mean(name: str, names: list[str]) -> str:
    """" did you mean X?" for a mistyped name (difflib), matched as written: in full, or by the part after 'pack/'."""
    import difflib

    pool = names if "/" in name else sorted({n.split("/")[-1] for n in names})
    close = difflib.get_close_matches(name, pool, n=3, cutoff=0.75)
    return f" did you mean {' or '.join(close)}?" if close else ""
