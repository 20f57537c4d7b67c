"""The AutoGPT-style agent (`--agent autogpt`).

This module only registers it, by name: `mlab list-plugins` imports it, and agent.py (with the base classes
and models it needs) is imported when the agent is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl

AGENT = Lazy("autogpt", "mlab_agent_autogpt.agent:AutoGPTAgent")


@hookimpl
def register_agents(register):
    register(AGENT)
