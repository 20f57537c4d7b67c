"""The Agent contract: a step policy. The core owns the loop, the limits, snapshots and the trace, and builds what
an agent gets (mlab.core.agent_context)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from mlab.core.errors import MlabError

if TYPE_CHECKING:
    from mlab.core.agent_context import AgentContext, RunState
    from mlab.core.llm.client import LLMClient
    from mlab.core.models import Action, StopRun


class AgentOptions(BaseModel):
    """What `--agent-option KEY=VALUE` may set: one field per option, each with a default and a description
    (`mlab agents` shows them). A run refuses undeclared keys and bad values in one line before it writes anything."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Agent(ABC):
    """Registered as a class; the core builds one instance per run, `AgentClass(ctx)`, and calls `step`,
    `state_dict` and, on resume, `load_state_dict`. An exception from the agent's code, or a step returning anything
    else, ends the run as an agent error; LLMError and BudgetExceeded from `self.llm` keep their own meaning."""

    name: ClassVar[str] = ""  # what `--agent` takes; required, unique among installed agents
    description: ClassVar[str] = ""  # one line for `mlab agents`
    needs_llm: ClassVar[bool] = True  # a run refuses to start without `--llm`, so `ctx.llm` is never None
    Options: ClassVar[type[AgentOptions]] = AgentOptions  # the default declares none: any option is refused

    ctx: AgentContext
    options: AgentOptions  # ctx.options validated by Options, defaults filled in

    def __init__(self, ctx: AgentContext):
        """Set up per-run state after `super().__init__(ctx)`. Raises MlabError: the run cannot use this agent (e.g.
        an action it needs is not offered), in one line."""
        self.ctx = ctx
        self.options = self.Options.model_validate(ctx.options)  # the runner has checked them (one-line errors)

    @property
    def llm(self) -> LLMClient:
        """`ctx.llm` typed without None (MlabError when the run has no model)."""
        if self.ctx.llm is None:
            raise MlabError(f"agent {self.name!r} needs a model: give --llm")
        return self.ctx.llm

    @abstractmethod
    def step(self, state: RunState) -> Action | StopRun:
        """The next Action, named and shaped as in ACTION_SPECS (argument values are strings; a malformed one gets
        an `EnvError:` observation, not an exception), or StopRun(reason)."""

    def state_dict(self) -> dict[str, Any]:
        """All memory needed to go on, JSON-serialisable; saved with each step. A search graph kept under `graph`
        shows in `mlab report` and `mlab view` (format: mlab.core.run.solution_graph)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (optional: no state by default)
        """Take back the memory of the last saved step, when a killed run resumes."""
