"""The Agent contract: a step policy. The core owns the loop, the limits and the trace."""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

from mlab.core.actions import ActionSpec
from mlab.core.models import Action, Step, StopRun


@dataclass
class AgentContext:
    """What an agent gets once, when built for a run."""

    task_name: str
    research_problem: str
    actions: dict[str, ActionSpec]  # every action the environment offers, by name
    llm: Any  # the run's LLM client (core.llm_client.LLMClient), or None when the run has no model
    options: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    starter_script: str = "train.py"
    log: Callable[[str], None] = lambda _msg: None


@dataclass
class RunState:
    """What an agent sees before each step."""

    step_index: int
    history: list[Step]
    max_steps: int
    seconds_left: float


class Agent(ABC):
    """Given the run state, return the next Action (or StopRun to end the run)."""

    name: str = ""
    description: str = ""
    needs_llm: bool = True

    def __init__(self, ctx: AgentContext):
        self.ctx = ctx

    @abstractmethod
    def step(self, state: RunState) -> Action | StopRun:
        """Choose the next action."""

    def state_dict(self) -> dict[str, Any]:
        """Memory to save with each step, so a resumed run continues with the same state."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
