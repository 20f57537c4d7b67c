"""A backend that answers with given completions, in order (`--llm scripted:FILE`).

This module only registers it, by name: `mlab list-plugins` imports it, and backend.py (with the base classes
and models it needs) is imported when the backend is used.
"""
from __future__ import annotations

import importlib
from typing import Any

from mlab.core import Lazy, hookimpl

BACKEND = Lazy("scripted", "mlab_llm_scripted.backend:ScriptedLLM",
               "Returns completions from a JSONL/JSON script in order; fails when they run out.")
# Names of backend.py that users import from the package; backend.py is imported when one is first read.
FORWARDED = ("ScriptedLLM",)


@hookimpl
def register_llms(register):
    register(BACKEND)


def __getattr__(name: str) -> Any:
    if name not in FORWARDED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.backend"), name)
