"""mini-SWE-agent (`--agent mini-swe-agent`), a program agent: mlab runs it in the sandbox.

This module only registers it, by name; agent.py is imported when the agent is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl

AGENT = Lazy("mini-swe-agent", "mlab_agent_miniswe.agent:MiniSweAgent")


@hookimpl
def register_agents(register):
    register(AGENT)
