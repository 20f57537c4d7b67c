"""Replays recorded completions in order (`--llm replay:RUN_DIR` or `replay:FILE.jsonl`).

This module only registers it, by name: `mlab list-plugins` imports it, and backend.py (with the base classes
and models it needs) is imported when the backend is used.
"""
from __future__ import annotations

import importlib
from typing import Any

from mlab.core import Lazy, hookimpl

BACKEND = Lazy("replay", "mlab_llm_replay.backend:ReplayLLM",
               "Replays the completions of a recorded run (RUN_DIR or llm_calls.jsonl) or a JSONL script, in order.")
# Names of backend.py that users import from the package; backend.py is imported when one is first read.
FORWARDED = ("ReplayLLM", "load_recording")


@hookimpl
def register_llms(register):
    register(BACKEND)


def __getattr__(name: str) -> Any:
    if name not in FORWARDED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.backend"), name)
