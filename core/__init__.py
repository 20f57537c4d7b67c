"""mlab's public API: everything a task pack, agent or LLM backend plugin needs, and nothing heavy."""
from mlab.core.actions import ACTION_SPECS, ActionSpec
from mlab.core.agent import Agent, AgentContext, RunState
from mlab.core.errors import BudgetExceeded, EnvError, InvalidSubmission, LLMError, MlabError
from mlab.core.hookspecs import hookimpl
from mlab.core.llm.backend import LLM
from mlab.core.models import (Action, Completion, LLMCallFinished, Message, RunConfig, RunFinished, RunStarted, Step,
                     StepFinished, StopRun, Trace, Usage)
from mlab.core.sandbox.contract import ExecResult, ExecSpec, Sandbox
from mlab.core.sandbox.limits import Limits
from mlab.core.task import BaselineContext, Metric, PrepareContext, Resources, Task

__all__ = [
    "ACTION_SPECS", "Action", "ActionSpec", "Agent", "AgentContext", "BaselineContext", "BudgetExceeded",
    "Completion", "EnvError", "ExecResult", "ExecSpec", "InvalidSubmission", "LLM", "LLMCallFinished",
    "LLMError", "Limits", "Message", "Metric", "MlabError", "PrepareContext", "Resources", "RunConfig",
    "RunFinished", "RunStarted", "RunState", "Sandbox", "Step", "StepFinished", "StopRun", "Task", "Trace",
    "Usage", "hookimpl",
]
