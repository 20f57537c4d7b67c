"""What the core hands an agent: its context, once per run, and the run's state before each step."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlab.core.actions import ActionSpec
    from mlab.core.llm.client import LLMClient
    from mlab.core.models import Step


@dataclass
class AgentContext:
    """What an agent is built with, once per run."""

    task_name: str
    research_problem: str
    actions: dict[str, ActionSpec]  # every action the environment offers, by name
    llm: LLMClient | None  # the run's models by role (main, fast, edit); None when the run has no model
    options: dict[str, Any] = field(default_factory=dict)  # from --agent-option KEY=VALUE, as given
    seed: int = 0
    starter_script: str = "train.py"
    log: Callable[[str], None] = lambda _msg: None  # appends to the run's errors.log
    packages: dict[str, str] = field(default_factory=dict)  # versions agent code runs with: {"python": "3.12.3", ...}
    action_timeout_s: float | None = None  # --action-timeout: how long one action (a script, a code step) may run


@dataclass
class RunState:
    """What an agent sees before each step."""

    step_index: int  # 1-based
    history: list[Step]  # the previous steps, with their observations
    max_steps: int
    seconds_left: float
