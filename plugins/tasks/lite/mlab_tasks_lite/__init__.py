"""mlab's built-in lite tasks: small datasets generated from a seed, so they run offline on any CPU.

The tasks are registered by name: `mlab list-plugins` imports this module, and tasks.py is imported when a task
is used.
"""
from __future__ import annotations

import importlib
from typing import Any

from mlab.core import Lazy, hookimpl

__all__ = ["DiabetesTask", "DigitsTask", "WineTask", "register_tasks"]

TASKS = (
    Lazy("lite/digits", "mlab_tasks_lite.tasks:DigitsTask",
         "Classify 8x8 generated digit images with a small PyTorch CNN (accuracy, higher is better)."),
    Lazy("lite/diabetes", "mlab_tasks_lite.tasks:DiabetesTask",
         "Predict a synthetic disease-progression score from ten measurements (MAE, lower is better)."),
    Lazy("lite/wine", "mlab_tasks_lite.tasks:WineTask",
         "Tell three classes of synthetic wines apart by their chemistry (accuracy, higher is better)."),
)


@hookimpl
def register_tasks(register):
    for task in TASKS:
        register(task)


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.tasks"), name)
