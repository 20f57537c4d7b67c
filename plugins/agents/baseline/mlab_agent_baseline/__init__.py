"""The baseline agent (`--agent baseline`): runs the task's starter, then submits.

This module only registers it, by name: `mlab list-plugins` imports it, and agent.py (with the base classes
and models it needs) is imported when the agent is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl

AGENT = Lazy("baseline", "mlab_agent_baseline.agent:BaselineAgent")


@hookimpl
def register_agents(register):
    register(AGENT)
