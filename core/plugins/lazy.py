"""A registration by name: what a plugin registers, declared without importing it.

`mlab list-plugins` imports every plugin's registration module. A module that registers its classes themselves
imports its whole body (and mlab's models and base classes with it) just to be listed; one that registers
`Lazy("pack/name", "package.module:Attribute")` costs nothing until the object is used. The description is the
object's own, read when it is loaded (listings that show descriptions load what they list).
"""
from __future__ import annotations

import importlib
from typing import Any, NamedTuple


def _dotted(text: str) -> bool:
    return all(part.isidentifier() for part in text.split("."))


class Lazy(NamedTuple):  # a NamedTuple, not a dataclass: every plugin listing imports this module
    """A task, agent, LLM backend or sandbox registered by name, imported from `target` on first use.

    `target` is "module:attribute". For an agent, backend or sandbox it names the class; for a task, the Task
    subclass (made with no arguments, once) or a Task instance. `name` is what listings show without importing
    it, so it must equal the loaded object's: a different name makes the object fail to load.
    """

    name: str
    target: str

    def problem(self) -> str | None:
        """What is wrong with the declaration itself, before anything is imported; None when nothing."""
        if not isinstance(self.name, str) or not self.name.strip():
            return f"Lazy registration of {self.target!r} has no name"
        module, colon, attribute = self.target.partition(":") if isinstance(self.target, str) else ("", "", "")
        if not (colon and _dotted(module) and _dotted(attribute)):
            return f"Lazy registration {self.name!r}: target {self.target!r} is not 'module:attribute'"
        return None

    def load(self) -> Any:
        """The object `target` names (importing its module); exceptions of the import propagate."""
        module_name, _, attribute = self.target.partition(":")
        obj: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            obj = getattr(obj, part)
        return obj
