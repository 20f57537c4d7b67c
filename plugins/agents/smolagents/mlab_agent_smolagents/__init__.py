"""smolagents' CodeAgent (`--agent smolagents`), a program agent: mlab runs it in the sandbox.

This module only registers it, by name; agent.py is imported when the agent is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl

AGENT = Lazy("smolagents", "mlab_agent_smolagents.agent:SmolagentsAgent")


@hookimpl
def register_agents(register):
    register(AGENT)
