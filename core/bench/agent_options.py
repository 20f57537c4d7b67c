"""A bench's `--agent-option` values split among its agents: shared keys go to every agent that declares them."""
from __future__ import annotations

from typing import Any

from mlab.core.agent import Agent
from mlab.core.agentkit.options import check_agent_options
from mlab.core.errors import MlabError


def bench_agent_options(agent_classes: list[type[Agent]], given: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each agent's own options from a bench's `--agent-option` values: `KEY=VALUE` goes to every agent that
    declares KEY, `AGENT:KEY=VALUE` to that agent alone. MlabError in one line for a key no agent of the bench
    declares, or an agent not in the bench; each agent's values are then checked as a run would."""
    by_name = {cls.name: cls for cls in agent_classes}
    chosen: dict[str, dict[str, Any]] = {name: {} for name in by_name}
    targeted: dict[str, dict[str, Any]] = {name: {} for name in by_name}
    for key, value in given.items():
        agent, _, option = key.rpartition(":")
        if agent:
            if agent not in by_name:
                raise MlabError(f"--agent-option {key}: agent {agent!r} is not in this bench "
                                f"({', '.join(by_name)})")
            targeted[agent][option] = value
            continue
        takers = [name for name, cls in by_name.items() if key in cls.Options.model_fields]
        if not takers:
            raise MlabError(f"no agent of this bench has an option {key!r}; options: " + "; ".join(
                f"{name}: {', '.join(cls.Options.model_fields) or 'none'}" for name, cls in by_name.items()))
        for name in takers:
            chosen[name][key] = value
    for name, cls in by_name.items():
        chosen[name].update(targeted[name])  # an agent's own value wins over the shared one
        check_agent_options(cls, chosen[name])
    return chosen
