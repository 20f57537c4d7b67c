"""A person is the model (`--llm human`).

This module only registers it, by name: `mlab list-plugins` imports it, and backend.py (with the base classes
and models it needs) is imported when the backend is used.
"""
from __future__ import annotations

import importlib
from typing import Any

from mlab.core import Lazy, hookimpl

BACKEND = Lazy("human", "mlab_llm_human.backend:HumanLLM",
               "You are the model: each prompt is shown in the terminal and you type the completion.")
# Names of backend.py that users import from the package; backend.py is imported when one is first read.
FORWARDED = ("HumanLLM", "read_answer")


@hookimpl
def register_llms(register):
    register(BACKEND)


def __getattr__(name: str) -> Any:
    if name not in FORWARDED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.backend"), name)
