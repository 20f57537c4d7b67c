"""An example mlab task pack. mlab imports this module through the entry point in pyproject.toml.

Keep this module cheap to import: `mlab list-plugins` and `mlab tasks` import every plugin. So it registers the
task by name (`Lazy`), and mlab imports line_fit.py (with mlab's Task base class and whatever the task needs) only
when the task is used; anything heavy (numpy, torch, sklearn...) goes inside the methods that need it.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl


@hookimpl
def register_tasks(register):
    # One call per task: its name, and where its class is. mlab makes the task (LineFitTask()) when it is first
    # used; its description is the class's own.
    register(Lazy("example/line-fit", "mlab_example_tasks.line_fit:LineFitTask"))
