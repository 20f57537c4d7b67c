"""An example mlab task pack. mlab imports this module through the entry point in pyproject.toml.

Keep this module cheap to import: `mlab list-plugins` and `mlab tasks` import every plugin, so anything heavy
(numpy, torch, sklearn...) belongs inside the methods that need it, never at the top of a plugin module.
"""
from __future__ import annotations

from mlab.core import hookimpl

from .line_fit import LineFitTask

__all__ = ["LineFitTask", "register_tasks"]


@hookimpl
def register_tasks(register):
    # Tasks are registered as instances; one call per task.
    register(LineFitTask())
