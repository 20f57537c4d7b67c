"""A task as TRL's `environment_factory` takes it (GRPOTrainer, trl 1.16): a class whose public methods are the
tools, one per action of the run (typed, documented: TRL and transformers read each one's JSON schema from its
signature and docstring), a `reset(**row)` whose text (the task's prompt) is added to the dataset's user message,
and a `get_reward()` that ends the episode and gives the task's verdict as its reward. TRL builds one instance per
rollout and resets it for each new one: every reset is a new episode, a new run folder. Nothing here imports trl."""
from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlab.core.actions import ActionSpec
from mlab.core.agentkit.tools import tool_name
from mlab.core.env.openenv import TaskEnv, ToolAction
from mlab.core.env.tools import seed_actions


class _TrlTaskEnv:
    """The base of trl_environment's classes: no public method but reset and get_reward (TRL would take any
    other for a tool)."""

    def __init__(self, task: str, runs_dir: str | Path, options: dict[str, Any]):
        self._env = TaskEnv(task, runs_dir, **options)

    def reset(self, **row: Any) -> str:
        """A new episode; `task` and `seed` columns of the row choose its task and seed, the others are TRL's. TRL
        appends the text to the row's user message as it is: it starts on a line of its own."""
        return "\n\n" + self._env.reset(seed=row.get("seed"), task=row.get("task")).text

    def get_reward(self) -> float:
        """End the episode; its reward is the task's verdict on the workspace as the episode left it."""
        return self._env.finish()

    def _call(self, tool: str, arguments: dict[str, Any]) -> str:
        return self._env.step(ToolAction(tool=tool, arguments=arguments)).text

    @property
    def env(self) -> TaskEnv:
        """The episodes' OpenEnv-shaped environment (its episode, state, run folder)."""
        return self._env


def _tool_method(action: str, spec: ActionSpec) -> Callable[..., str]:
    name = tool_name(action)

    def tool(self: _TrlTaskEnv, **arguments: Any) -> str:
        return self._call(name, arguments)

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for arg in spec.args:
        kind: Any = int if arg.endswith("_line_number") else str  # as action_tools types them
        optional = arg in spec.optional
        annotations[arg] = kind | None if optional else kind
        params.append(inspect.Parameter(arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=annotations[arg],
                                        default=None if optional else inspect.Parameter.empty))
    annotations["return"] = str
    tool.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    tool.__annotations__ = annotations
    tool.__name__ = tool.__qualname__ = name
    args = "\n".join(f"    {arg}: {' '.join(hint.split())}" for arg, hint in spec.args.items())
    tool.__doc__ = f"{spec.description}\n\nArgs:\n{args}\n\nReturns:\n    What the action gave (its observation)."
    return tool


def trl_environment(task: str, runs_dir: str | Path = "runs/train", *, tools: list[str] | None = None,
                    **options: Any) -> type:
    """The class to give GRPOTrainer as `environment_factory`: each instance drives episodes of `task`, each a run
    folder under `runs_dir`; `tools` picks the tools (tool or action names; default: every action of the run
    that needs no model); `options` are TaskEnv's and Episode's (reward, invalid_reward, max_steps, sandbox,
    seed, label, ...)."""
    actions = seed_actions(has_llm=options.get("llm") is not None,
                           allow_validate=bool(options.get("allow_validate")), chosen=tools)
    methods = {tool_name(action): _tool_method(action, spec) for action, spec in actions.items()}
    chosen = list(actions)

    def __init__(self: _TrlTaskEnv) -> None:
        _TrlTaskEnv.__init__(self, task, runs_dir, {**options, "tools": chosen})

    return type("MlabTaskEnv", (_TrlTaskEnv,), {"__init__": __init__, "__doc__": f"Episodes of {task}.",
                                                 **methods})
