"""The Agent contract: a step policy. The core owns the loop, the limits and the trace."""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from mlab.core.actions import ActionSpec
from mlab.core.errors import BudgetExceeded, LLMError, MlabError
from mlab.core.fs.atomic import is_disk_full
from mlab.core.llm.client import LLMClient
from mlab.core.models import Action, Step, StopRun


@dataclass
class AgentContext:
    """What an agent gets once, when built for a run."""

    task_name: str
    research_problem: str
    actions: dict[str, ActionSpec]  # every action the environment offers, by name
    llm: LLMClient | None  # the run's models by role (main, fast, edit); None when the run has no model
    options: dict[str, Any] = field(default_factory=dict)  # from --agent-option KEY=VALUE
    seed: int = 0
    starter_script: str = "train.py"
    log: Callable[[str], None] = lambda _msg: None  # appends to the run's errors.log
    # Versions of the key packages of the Python that runs agent code ({"python": "3.12.3", "pandas": ...}).
    packages: dict[str, str] = field(default_factory=dict)


class AgentOptions(BaseModel):
    """What `--agent-option KEY=VALUE` may set: an agent subclasses it with one field per option, each with a
    default and a description (`mlab agents` shows them). Keys it does not declare are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass
class RunState:
    """What an agent sees before each step."""

    step_index: int  # 1-based
    history: list[Step]
    max_steps: int
    seconds_left: float


class Agent(ABC):
    """Given the run state, return the next Action (or StopRun to end the run).

    The core registers the class, reads its class attributes, then builds one instance per run with
    `AgentClass(ctx)` and calls `step`, `state_dict` and (on resume) `load_state_dict`.
    """

    name: ClassVar[str] = ""
    """What `--agent` takes; required, unique among installed agents."""
    description: ClassVar[str] = ""
    """One line for `mlab agents`."""
    needs_llm: ClassVar[bool] = True
    """True: a run refuses to start without `--llm` (and `ctx.llm` is never None)."""
    Options: ClassVar[type[AgentOptions]] = AgentOptions
    """The agent's options; the default declares none, so any `--agent-option` is refused."""

    ctx: AgentContext
    """What the agent was built with for this run."""
    options: AgentOptions
    """ctx.options checked against Options, with the defaults filled in."""

    def __init__(self, ctx: AgentContext):
        self.ctx = ctx
        self.options = check_agent_options(type(self), ctx.options)

    @property
    def llm(self) -> LLMClient:
        """The run's LLM client, typed without None: the runner gives one to every agent with needs_llm."""
        if self.ctx.llm is None:
            raise MlabError(f"agent {self.name!r} needs a model: give --llm")
        return self.ctx.llm

    @abstractmethod
    def step(self, state: RunState) -> Action | StopRun:
        """Choose the next action."""

    def state_dict(self) -> dict[str, Any]:
        """Memory to save with each step, so a resumed run continues with the same state."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (optional: no state by default)
        """Take back the memory of the last saved step, when a killed run resumes."""


def check_agent_options(agent_cls: type[Agent], given: dict[str, Any]) -> AgentOptions:
    """The agent's Options from `--agent-option` values; MlabError in one line naming the valid options when a
    key is unknown or a value does not fit."""
    fields = agent_cls.Options.model_fields
    valid = ", ".join(fields) or "none (it takes no options)"
    unknown = sorted(set(given) - set(fields))
    if unknown:
        raise MlabError(f"agent {agent_cls.name!r} has no option {', '.join(unknown)}; options: {valid}")
    try:
        return agent_cls.Options.model_validate(given)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"]) or "options"
        message = str(error["msg"])
        message = message.removeprefix("Value error, ")
        raise MlabError(f"agent {agent_cls.name!r}: option {key}: {message[:1].lower()}{message[1:]} "
                        f"(got {json.dumps(error.get('input'), default=str)[:100]})") from None


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


def option_rows(agent_cls: type[Agent]) -> list[dict[str, Any]]:
    """The agent's options for listings: name, type, whether required, default and description of each."""
    rows = []
    for name, info in agent_cls.Options.model_fields.items():
        kind = getattr(info.annotation, "__name__", None) or str(info.annotation).replace("typing.", "")
        required = info.is_required()
        rows.append({"name": name, "type": kind, "required": required,
                     "default": None if required else info.get_default(call_default_factory=True),
                     "description": info.description or ""})
    return rows


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
