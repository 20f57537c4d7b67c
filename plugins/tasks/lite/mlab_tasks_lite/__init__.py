"""mlab's built-in lite tasks: small datasets generated from a seed, so they run offline on any CPU.

The tasks are registered by name: `mlab list-plugins` imports this module, and tasks.py is imported when a task
is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl

TASKS = (
    Lazy("lite/digits", "mlab_tasks_lite.tasks:DigitsTask"),
    Lazy("lite/diabetes", "mlab_tasks_lite.tasks:DiabetesTask"),
    Lazy("lite/wine", "mlab_tasks_lite.tasks:WineTask"),
)


@hookimpl
def register_tasks(register):
    for task in TASKS:
        register(task)
