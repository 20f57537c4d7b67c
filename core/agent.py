"""The Agent contract: a step policy. The core owns the loop, the limits, snapshots and the trace."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from mlab.core.actions import ActionSpec
from mlab.core.errors import MlabError
from mlab.core.models import Action, Step, StopRun

if TYPE_CHECKING:
    from mlab.core.llm.client import LLMClient


@dataclass
class AgentContext:
    """What an agent gets once, when built for a run."""

    task_name: str
    research_problem: str
    actions: dict[str, ActionSpec]  # every action the environment offers, by name
    llm: LLMClient | None  # the run's models by role (main, fast, edit); None when the run has no model
    options: dict[str, Any] = field(default_factory=dict)  # from --agent-option KEY=VALUE, as given
    seed: int = 0
    starter_script: str = "train.py"
    log: Callable[[str], None] = lambda _msg: None  # appends to the run's errors.log
    # Versions of the key packages of the Python that runs agent code ({"python": "3.12.3", "pandas": ...}).
    packages: dict[str, str] = field(default_factory=dict)


class AgentOptions(BaseModel):
    """What `--agent-option KEY=VALUE` may set: an agent subclasses it with one field per option, each with a
    default and a description (`mlab agents` shows them). Keys it does not declare are refused: a run checks the
    given options before it writes anything and stops in one line naming the valid ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass
class RunState:
    """What an agent sees before each step."""

    step_index: int  # 1-based
    history: list[Step]  # the previous steps, with their observations
    max_steps: int
    seconds_left: float


class Agent(ABC):
    """Given the run state, return the next Action (or StopRun to end the run).

    The core registers the class, reads its class attributes, then builds one instance per run with
    `AgentClass(ctx)` and calls `step`, `state_dict` and (on resume) `load_state_dict`. An exception from the
    agent's own code, or a step that returns anything else, ends the run as an agent error; LLMError and
    BudgetExceeded from `self.llm` keep their own meaning.
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
    """ctx.options as an Options instance, with the defaults filled in."""

    def __init__(self, ctx: AgentContext):
        """Override to set up per-run state; call `super().__init__(ctx)` first.

        Raises:
            MlabError: the run cannot use this agent (e.g. an action it needs is not offered), in one line.
        """
        self.ctx = ctx
        self.options = self.Options.model_validate(ctx.options)  # the runner has checked them (one-line errors)

    @property
    def llm(self) -> LLMClient:
        """The run's LLM client, typed without None: the runner gives one to every agent with needs_llm."""
        if self.ctx.llm is None:
            raise MlabError(f"agent {self.name!r} needs a model: give --llm")
        return self.ctx.llm

    @abstractmethod
    def step(self, state: RunState) -> Action | StopRun:
        """Choose the next action.

        Returns:
            An Action named and shaped as in ACTION_SPECS (argument values are strings; a malformed one gets an
            `EnvError:` observation, not an exception), or StopRun(reason).
        """

    def state_dict(self) -> dict[str, Any]:
        """All memory the agent needs to go on, JSON-serialisable; saved with each step. Keeping a search graph
        under the key `graph` shows it in `mlab report` and `mlab view` (`mlab.core.run.solution_graph`)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (optional: no state by default)
        """Take back the memory of the last saved step, when a killed run resumes."""
