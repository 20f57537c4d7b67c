"""OpenAI's Codex CLI (`--agent codex`), a program agent: mlab runs it in the sandbox.

This module only registers it, by name; agent.py is imported when the agent is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl

AGENT = Lazy("codex", "mlab_agent_codex.agent:CodexAgent")


@hookimpl
def register_agents(register):
    register(AGENT)
