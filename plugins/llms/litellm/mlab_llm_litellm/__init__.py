"""Any model litellm supports (`--llm openai/gpt-4o`, `anthropic/...`, an OpenAI-compatible server...).

This module only registers it, by name: `mlab list-plugins` imports it, and backend.py (with the base classes
and models it needs) is imported when the backend is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl


@hookimpl
def register_llms(register):
    register(Lazy("litellm", "mlab_llm_litellm.backend:LiteLLMBackend"))
