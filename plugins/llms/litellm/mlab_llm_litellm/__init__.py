"""Any model litellm supports (`--llm openai/gpt-4o`, `anthropic/...`, an OpenAI-compatible server...).

This module only registers it, by name: `mlab list-plugins` imports it, and backend.py (with the base classes
and models it needs) is imported when the backend is used.
"""
from __future__ import annotations

import importlib
from typing import Any

from mlab.core import Lazy, hookimpl

BACKEND = Lazy("litellm", "mlab_llm_litellm.backend:LiteLLMBackend",
               "Any litellm model: openai/…, anthropic/…, gemini/…, ollama/…; an OpenAI-compatible server with "
               "--llm-api-base. Keys from the provider's usual environment variables.")
# Names of backend.py that users import from the package; backend.py is imported when one is first read.
FORWARDED = ("LiteLLMBackend", "_import_litellm", "classify", "parse_retry_after")


@hookimpl
def register_llms(register):
    register(BACKEND)


def __getattr__(name: str) -> Any:
    if name not in FORWARDED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.backend"), name)
