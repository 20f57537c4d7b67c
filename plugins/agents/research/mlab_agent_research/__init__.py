"""mlab's research agent (`--agent research`) and its ablations (`simple`, `react`).

Options (`--agent-option KEY=VALUE`): actions (JSON list of action names shown in the prompt), retrieval (true:
keep a research log and recall from it when the history is long), history_steps (3), summarize_over (5000
characters), max_attempts (5).

This module only registers them, by name: `mlab list-plugins` imports it, and agent.py is imported when one of
them is used.
"""
from __future__ import annotations

import importlib
from typing import Any

from mlab.core import Lazy, hookimpl

__all__ = ["ReactAgent", "ResearchAgent", "SimpleAgent"]

AGENTS = (
    Lazy("research", "mlab_agent_research.agent:ResearchAgent",
         "ReAct research agent: Reflection, Research Plan and Status, Fact Check, Thought, Action."),
    Lazy("simple", "mlab_agent_research.agent:SimpleAgent", "Ablation of research: Action and Action Input only."),
    Lazy("react", "mlab_agent_research.agent:ReactAgent",
         "Ablation of research: Thought, Action and Action Input only."),
)


@hookimpl
def register_agents(register):
    for agent in AGENTS:
        register(agent)


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.agent"), name)
