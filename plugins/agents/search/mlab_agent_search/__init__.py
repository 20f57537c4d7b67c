"""mlab's search agent (`--agent search`, option policy: greedy, mcts or evolutionary) and its alias `aide`
(policy greedy). See README.md next to this package.

This module only registers them, by name: `mlab list-plugins` imports it, and agent.py is imported when one of
them is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl

AGENTS = (
    Lazy("search", "mlab_agent_search.agent:SearchAgent"),
    Lazy("aide", "mlab_agent_search.agent:AideAgent"),
)


@hookimpl
def register_agents(register):
    for agent in AGENTS:
        register(agent)
