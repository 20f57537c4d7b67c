"""mlab task pack: the MLAgentBench tasks (13 ML research tasks and 2 tool-building tasks).

Listing plugins imports this module, so it imports nothing heavy; each task loads its frameworks in methods.
"""
from __future__ import annotations

from mlab.core import hookimpl

from .tasks import all_tasks


@hookimpl
def register_tasks(register):
    for task in all_tasks():
        register(task)
