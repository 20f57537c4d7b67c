"""The command agent (`--agent command --agent-option command="python my_agent.py"`): a user's own agent program.

This module only registers it, by name; agent.py is imported when the agent is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl

AGENT = Lazy("command", "mlab_agent_command.agent:CommandAgent")


@hookimpl
def register_agents(register):
    register(AGENT)
