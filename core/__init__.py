"""mlab's public API: everything a task pack, agent or LLM backend plugin needs, and nothing heavy.

Plugins import from `mlab.core` (the names in `__all__`) and from `mlab.core.agentkit` (helpers for agents);
every other module of the core is internal and may change without notice. tests/test_public_api.py enforces it.
"""
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mlab.core.actions import ACTION_SPECS, VALIDATE_SUBMISSION, ActionSpec
    from mlab.core.agent import Agent, AgentContext, RunState
    from mlab.core.errors import BudgetExceeded, EnvError, InvalidSubmission, LLMError, MlabError
    from mlab.core.hookspecs import hookimpl
    from mlab.core.llm.backend import LLM
    from mlab.core.llm.client import LLMClient
    from mlab.core.llm.proxy import LLM_PROXY_SOCKET_ENV, HttpUpstream, LLMProxy, ProxyBudget, ProxyUsage
    from mlab.core.models import (
        Action,
        BaselineMeasured,
        Completion,
        LLMCallFinished,
        Message,
        RunConfig,
        RunFinished,
        RunStarted,
        Step,
        StepFinished,
        StopRun,
        SubmissionScored,
        TaskPrepared,
        Trace,
        Usage,
    )
    from mlab.core.plugins.lazy import Lazy
    from mlab.core.run.scoring_context import ScoringContext, scoring_context
    from mlab.core.run.taskdata import DataFile
    from mlab.core.sandbox.contract import Command, ExecResult, ExecSpec, Sandbox
    from mlab.core.sandbox.limits import Limits
    from mlab.core.sandbox.local import LocalSandbox
    from mlab.core.sandbox.process import ProcessCommand, ProcessSandbox
    from mlab.core.sandbox.rootfs import RootView, extra_read_only, root_view
    from mlab.core.task import (
        BaselineContext,
        Metric,
        PrepareContext,
        Resources,
        Task,
        ValidationSplit,
    )

# name -> the module defining it. Importing mlab.core imports none of them: a plugin's registration module
# imports `hookimpl` and `Lazy` and stays light (`mlab list-plugins` imports every one); the rest load on first use.
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["ACTION_SPECS", "VALIDATE_SUBMISSION", "ActionSpec"], "mlab.core.actions"),
    **dict.fromkeys(["Agent", "AgentContext", "RunState"], "mlab.core.agent"),
    **dict.fromkeys(["BudgetExceeded", "EnvError", "InvalidSubmission", "LLMError", "MlabError"],
                    "mlab.core.errors"),
    "hookimpl": "mlab.core.hookspecs",
    "LLM": "mlab.core.llm.backend",
    "LLMClient": "mlab.core.llm.client",
    **dict.fromkeys(["LLM_PROXY_SOCKET_ENV", "HttpUpstream", "LLMProxy", "ProxyBudget", "ProxyUsage"],
                    "mlab.core.llm.proxy"),
    **dict.fromkeys(["Action", "BaselineMeasured", "Completion", "LLMCallFinished", "Message", "RunConfig",
                     "RunFinished", "RunStarted", "Step", "StepFinished", "StopRun", "SubmissionScored",
                     "TaskPrepared", "Trace", "Usage"], "mlab.core.models"),
    "Lazy": "mlab.core.plugins.lazy",
    "DataFile": "mlab.core.run.taskdata",
    **dict.fromkeys(["Command", "ExecResult", "ExecSpec", "Sandbox"], "mlab.core.sandbox.contract"),
    "Limits": "mlab.core.sandbox.limits",
    "LocalSandbox": "mlab.core.sandbox.local",
    **dict.fromkeys(["ProcessCommand", "ProcessSandbox"], "mlab.core.sandbox.process"),
    **dict.fromkeys(["RootView", "extra_read_only", "root_view"], "mlab.core.sandbox.rootfs"),
    **dict.fromkeys(["ScoringContext", "scoring_context"], "mlab.core.run.scoring_context"),
    **dict.fromkeys(["BaselineContext", "Metric", "PrepareContext", "Resources", "Task", "ValidationSplit"],
                    "mlab.core.task"),
}

__all__ = [
    "ACTION_SPECS", "Action", "ActionSpec", "Agent", "AgentContext", "BaselineContext", "BaselineMeasured",
    "BudgetExceeded", "DataFile",
    "Completion", "EnvError", "ExecResult", "ExecSpec", "InvalidSubmission", "LLM", "LLMCallFinished",
    "LLMClient", "LLMError", "Limits", "LocalSandbox", "Message", "Metric", "MlabError", "PrepareContext",
    "Resources", "RootView", "RunConfig", "RunFinished", "RunStarted", "RunState", "Sandbox", "ScoringContext", "Step",
    "StepFinished", "StopRun", "SubmissionScored", "Task", "TaskPrepared", "Trace", "Usage", "hookimpl",
    "extra_read_only", "root_view", "scoring_context", "VALIDATE_SUBMISSION", "ValidationSplit", "Lazy",
    "LLMProxy", "ProxyBudget", "ProxyUsage", "HttpUpstream", "LLM_PROXY_SOCKET_ENV",
    "Command", "ProcessCommand", "ProcessSandbox",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mlab.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
