"""One agent step as the runner takes it: the agent's own failures told apart from the model's and the budgets'."""
from __future__ import annotations

from mlab.core.agent import Agent
from mlab.core.agent_context import RunState
from mlab.core.errors import BudgetExceeded, LLMError
from mlab.core.fs.atomic import is_disk_full
from mlab.core.models import Action, StopRun


class AgentFailed(Exception):
    """The agent's own code raised or broke its contract: the run fails as an agent error, not a harness one."""


def agent_step(agent: Agent, state: RunState) -> Action | StopRun:
    """agent.step(state), with the agent's own failures told apart from the model's (LLMError), the budgets'
    and a full disk, which keep their own meaning."""
    try:
        decision = agent.step(state)
    except (BudgetExceeded, LLMError):
        raise
    except OSError as exc:
        if is_disk_full(exc):
            raise
        raise AgentFailed(f"{type(exc).__name__}: {exc}") from exc
    except Exception as exc:
        raise AgentFailed(f"{type(exc).__name__}: {exc}") from exc
    if not isinstance(decision, (Action, StopRun)):
        raise AgentFailed(f"{type(agent).__name__}.step returned {type(decision).__name__}, not an Action or StopRun")
    return decision
