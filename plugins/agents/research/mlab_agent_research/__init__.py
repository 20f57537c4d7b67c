"""mlab's research agent (`--agent research`) and its ablations (`simple`, `react`).

Options (`--agent-option KEY=VALUE`): actions (JSON list of action names shown in the prompt), retrieval (true:
keep a research log and recall from it when the history is long), history_steps (3), summarize_over (5000
characters), max_attempts (5).
"""
from __future__ import annotations

from mlab.core import hookimpl

from .agent import ReactAgent, ResearchAgent, SimpleAgent

__all__ = ["ReactAgent", "ResearchAgent", "SimpleAgent"]


@hookimpl
def register_agents(register):
    for cls in (ResearchAgent, SimpleAgent, ReactAgent):
        register(cls)
