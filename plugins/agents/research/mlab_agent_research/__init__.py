"""mlab's research agent (`--agent research`) and its ablations (`simple`, `react`).

Options (`--agent-option KEY=VALUE`): actions (JSON list of action names shown in the prompt), retrieval (true:
keep a research log and recall from it when the history is long), history_steps (3), summarize_over (5000
characters), max_attempts (5), tools (text: the original's ReAct format; native: each action offered as a tool
the model calls, for models that take tools).

This module only registers them, by name: `mlab list-plugins` imports it, and agent.py is imported when one of
them is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl

AGENTS = (
    Lazy("research", "mlab_agent_research.agent:ResearchAgent"),
    Lazy("simple", "mlab_agent_research.agent:SimpleAgent"),
    Lazy("react", "mlab_agent_research.agent:ReactAgent"),
)


@hookimpl
def register_agents(register):
    for agent in AGENTS:
        register(agent)
