"""Every hook a plugin can implement. Registration hooks take a `register` callback; lifecycle hooks observe."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:  # annotations only: plugins import hookimpl from here without mlab's pydantic models
    from mlab.core.models import (
        BaselineMeasured,
        LLMCallFinished,
        RunFinished,
        RunStarted,
        StepFinished,
        SubmissionScored,
        TaskPrepared,
    )

PROJECT = "mlab"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def register_tasks(register: Callable) -> None:
    """Call register(task) for each Task instance the plugin provides."""


@hookspec
def register_agents(register: Callable) -> None:
    """Call register(AgentClass) for each Agent subclass the plugin provides."""


@hookspec
def register_llms(register: Callable) -> None:
    """Call register(LLMClass) for each LLM backend class the plugin provides."""


@hookspec
def register_sandboxes(register: Callable) -> None:
    """Call register(SandboxClass) for each Sandbox class the plugin provides."""


@hookspec
def run_started(event: RunStarted) -> None:
    """A run began (or resumed); event says where and with which configuration."""


@hookspec
def step_finished(event: StepFinished) -> None:
    """A step completed and its trace entry was written."""


@hookspec
def run_finished(event: RunFinished) -> None:
    """A run ended, with its status, reason, score and usage."""


@hookspec
def llm_call_finished(event: LLMCallFinished) -> None:
    """An LLM call ended (returned or failed for good), with its tokens, cost, latency, retries and error."""


@hookspec
def task_prepared(event: TaskPrepared) -> None:
    """A task's data was prepared into a task home (not called when it was already there)."""


@hookspec
def baseline_measured(event: BaselineMeasured) -> None:
    """A task's starter ran and was scored, once per requested run; event holds the scores and their mean."""


@hookspec
def submission_scored(event: SubmissionScored) -> None:
    """A submission (a run's snapshot, or a baseline or reference workspace) was scored by its task."""
