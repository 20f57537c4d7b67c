"""An example mlab task pack. mlab imports this module through the entry point in pyproject.toml.

Keep this module cheap to import: `mlab list-plugins` and `mlab tasks` import every plugin. So it registers the
task by name (`Lazy`), and mlab imports line_fit.py (with mlab's Task base class and whatever the task needs) only
when the task is used; anything heavy (numpy, torch, sklearn...) goes inside the methods that need it.
"""
from __future__ import annotations

import importlib
from typing import Any

from mlab.core import Lazy, hookimpl

__all__ = ["LineFitTask", "register_tasks"]

# Name and description are the task's own (`mlab list-plugins` shows them without importing line_fit.py).
LINE_FIT = Lazy("example/line-fit", "mlab_example_tasks.line_fit:LineFitTask",
                "Fit a noisy line: predict y from x (MSE, lower is better).")


@hookimpl
def register_tasks(register):
    # One call per task; mlab makes the task (LineFitTask()) when it is first used.
    register(LINE_FIT)


def __getattr__(name: str) -> Any:
    # `from mlab_example_tasks import LineFitTask` still works, importing line_fit.py then.
    if name != "LineFitTask":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return importlib.import_module(f"{__name__}.line_fit").LineFitTask
