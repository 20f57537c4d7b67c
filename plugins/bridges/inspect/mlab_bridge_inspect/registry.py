"""Every registered mlab task as the Inspect task `mlab/<task>`: Inspect's basic agent with its bash and python
tools, run in mlab's sandbox on the run's workspace (sandbox.py), scored by the task's own scorer and judged by
mlab's one verdict."""
from __future__ import annotations

import asyncio
from typing import Any

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.log import transcript
from inspect_ai.scorer import Score, Target, mean, scorer
from inspect_ai.solver import TaskState, basic_agent
from inspect_ai.tool import bash, python
from inspect_ai.util import sandbox

from mlab.core.bridge import load_task, task_names

from .calls import call_entries
from .sandbox import MlabSandboxEnvironment

NAMESPACE = "mlab"


@scorer(metrics={"success": [mean()], "valid": [mean()]})
def mlab_scorer() -> Any:
    """The run's final workspace scored by the task's scorer (as `mlab grade` scores a folder), and judged; the
    sample's model calls so far (its ModelEvents) go to the run's call log first."""

    async def score(state: TaskState, target: Target) -> Score:
        run = sandbox().as_type(MlabSandboxEnvironment).run
        entries = call_entries(transcript().events, [s.started_at for s in run.trace.steps])
        await asyncio.to_thread(run.record_calls, entries)
        verdict = await asyncio.to_thread(run.finish, "the Inspect agent ended")
        return Score(value={"final_score": verdict["score"], "improvement": verdict["improvement"],
                            "success": bool(verdict["success"]), "valid": bool(verdict["valid"])},
                     answer=verdict["error"], explanation=f"run folder: {run.run_dir}",
                     metadata={"run_dir": str(run.run_dir), **verdict})

    return score


def _register(name: str) -> None:
    def mlab_task(sandbox: str = "auto", message_limit: int = 30, tool_timeout: int = 600) -> Task:
        problem = load_task(name).research_problem
        return Task(
            dataset=[Sample(id=name, input=problem, metadata={"mlab_task": name, "mlab_sandbox": sandbox})],
            solver=basic_agent(tools=[bash(timeout=tool_timeout), python(timeout=tool_timeout)],
                               message_limit=message_limit),
            scorer=mlab_scorer(), sandbox="mlab")

    # Inspect names a task after the package of the function's module; the `mlab` namespace package has no file,
    # so the name given is the whole name: mlab/<task>, the name `inspect eval` loads this entry point for.
    mlab_task.__module__ = NAMESPACE
    mlab_task.__qualname__ = mlab_task.__name__ = f"mlab_{name.replace('/', '_').replace('-', '_')}"
    task(name=f"{NAMESPACE}/{name}")(mlab_task)


for _name in task_names():
    _register(_name)
