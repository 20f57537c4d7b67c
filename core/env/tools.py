"""An episode's tools: the run's actions a policy may call, as the function tools trainers and chat templates take
(agentkit.tools.action_tools, the research agent's native-tools mode)."""
from __future__ import annotations

from collections.abc import Iterable

from mlab.core.actions import ACTION_SPECS, OPT_IN_SPECS, VALIDATE_SUBMISSION, ActionSpec
from mlab.core.agentkit.tools import tool_name
from mlab.core.errors import MlabError


def action_named(name: str, actions: Iterable[str]) -> str | None:
    """The action a tool name (execute_script) or an action name (Execute Script) stands for, or None."""
    for action in actions:
        if name in (action, tool_name(action)):
            return action
    return None


def offered_actions(actions: dict[str, ActionSpec], has_llm: bool,
                    chosen: Iterable[str] | None = None) -> dict[str, ActionSpec]:
    """The run's actions a policy gets as tools: those that ask a model only where the run has one (the policy is
    the trainer's, not the run's), and of those the `chosen` ones (tool or action names) in the order given."""
    usable = {n: s for n, s in actions.items() if has_llm or not s.uses_llm}
    if chosen is None:
        return usable
    picked: dict[str, ActionSpec] = {}
    for name in chosen:
        action = action_named(name, usable)
        if action is None:
            known = action_named(name, actions)
            why = "asks a model, and the episode has none (give llm=...)" if known else "is no action of the run"
            raise MlabError(f"tool {name!r} {why}; the tools are: {', '.join(map(tool_name, usable))}")
        picked[action] = usable[action]
    return picked


def seed_actions(has_llm: bool = False, allow_validate: bool = False,
                 chosen: Iterable[str] | None = None) -> dict[str, ActionSpec]:
    """The actions a run offers, known before any run starts (a trainer reads its tools once, up front): the seed's
    actions without the interactive ones, Validate Submission with allow_validate."""
    actions = {n: s for n, s in ACTION_SPECS.items() if not s.interactive_only}
    if allow_validate:
        actions[VALIDATE_SUBMISSION] = OPT_IN_SPECS[VALIDATE_SUBMISSION]
    return offered_actions(actions, has_llm, chosen)
