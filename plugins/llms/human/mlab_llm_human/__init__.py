"""A person is the model (`--llm human`).

This module only registers it, by name: `mlab list-plugins` imports it, and backend.py (with the base classes
and models it needs) is imported when the backend is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl


@hookimpl
def register_llms(register):
    register(Lazy("human", "mlab_llm_human.backend:HumanLLM"))
