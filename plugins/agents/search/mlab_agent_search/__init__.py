"""mlab's search agent (`--agent search`, option policy: greedy, mcts or evolutionary) and its alias `aide`
(policy greedy). See README.md next to this package."""
from __future__ import annotations

from mlab.core import hookimpl

from .agent import AideAgent, SearchAgent


@hookimpl
def register_agents(register):
    register(SearchAgent)
    register(AideAgent)
