"""Every hook a plugin can implement. Registration hooks take a `register` callback; lifecycle hooks observe."""
from __future__ import annotations

import re
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

# A task is PACK/NAME: the pack is the entry-point name of the plugin registering it, so names are unique across
# distributions and a third-party pack cannot claim another pack's tasks (lite/digits).
NAME_PART = r"[a-z0-9]+(?:-[a-z0-9]+)*"
TASK_NAME = re.compile(rf"{NAME_PART}/{NAME_PART}")


def task_name_problem(name: str, plugin: str) -> str | None:
    """Why a plugin may not register a task under this name, or None."""
    if not TASK_NAME.fullmatch(name):
        return (f"task name {name!r} is not PACK/NAME in lowercase letters, digits and single hyphens "
                f"(e.g. '{plugin}/my-task')")
    pack = name.split("/", 1)[0]
    if pack != plugin:
        return (f"task {name!r} is outside its pack: plugin {plugin!r} (its entry-point name) may register only "
                f"'{plugin}/...' tasks")
    return None


def has_hooks(module: object) -> bool:
    """Whether a plugin module implements any hook (a package with none may be a declarative pack)."""
    return any(hasattr(getattr(module, name, None), f"{PROJECT}_impl") for name in dir(module))


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
