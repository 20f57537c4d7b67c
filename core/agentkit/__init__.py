"""Public helpers for writing agents: reading what a model wrote, asking again until it is usable, checking
options, and turning earlier steps into prompt text.

Part of mlab's public API, like `mlab.core` itself: agent plugins import from `mlab.core.agentkit` (never from
its submodules), so the built-in agents share these helpers without depending on one another.
"""
from mlab.core.agentkit.asking import MAX_ATTEMPTS, Attempts, ask_until_valid
from mlab.core.agentkit.budget import budget_line
from mlab.core.agentkit.history import (
    SUMMARY_CHUNK,
    SUMMARY_THRESHOLD,
    VERBATIM_ACTIONS,
    action_text,
    needs_summary,
    summarize_observation,
    truncate_middle,
)
from mlab.core.agentkit.lenient_json import loads_lenient
from mlab.core.agentkit.named_entries import ACTION, ACTION_INPUT, OBSERVATION_STOP, parse_named_entries
from mlab.core.agentkit.options import RESEARCH_ACTIONS, ActionNames, AgentOptions, pick_actions
from mlab.core.agentkit.problem import packages_line, research_problem
from mlab.core.agentkit.responses import InvalidResponse, check_args, match_name
from mlab.core.agentkit.tools import (
    TOOL_CALL_ID,
    action_tools,
    ask_until_called,
    parse_tool_call,
    require_tools,
    tool_name,
)
from mlab.core.agentkit.validation_observation import read_validation

__all__ = [
    "ACTION", "ACTION_INPUT", "ActionNames", "AgentOptions", "Attempts", "InvalidResponse", "MAX_ATTEMPTS",
    "OBSERVATION_STOP", "RESEARCH_ACTIONS", "SUMMARY_CHUNK", "SUMMARY_THRESHOLD", "VERBATIM_ACTIONS", "action_text",
    "ask_until_valid", "budget_line", "check_args", "loads_lenient", "match_name", "needs_summary", "packages_line",
    "parse_named_entries", "pick_actions", "research_problem", "summarize_observation",
    "truncate_middle", "read_validation",
    "TOOL_CALL_ID", "action_tools", "ask_until_called", "parse_tool_call", "require_tools", "tool_name",
]
