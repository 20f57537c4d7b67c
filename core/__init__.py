"""mlab's public API: everything a task pack, agent or LLM backend plugin needs, and nothing heavy."""
from .actions import ACTION_SPECS, ActionSpec
from .agent import Agent, AgentContext, RunState
from .errors import BudgetExceeded, EnvError, InvalidSubmission, LLMError, MlabError
from .hookspecs import hookimpl
from .llm import LLM
from .models import (Action, Completion, LLMCallFinished, Message, RunConfig, RunFinished, RunStarted, Step,
                     StepFinished, StopRun, Trace, Usage)
from .sandbox import ExecResult, ExecSpec, Limits, Sandbox
from .task import BaselineContext, Metric, PrepareContext, Resources, Task

__all__ = [
    "ACTION_SPECS", "Action", "ActionSpec", "Agent", "AgentContext", "BaselineContext", "BudgetExceeded",
    "Completion", "EnvError", "ExecResult", "ExecSpec", "InvalidSubmission", "LLM", "LLMCallFinished",
    "LLMError", "Limits", "Message", "Metric", "MlabError", "PrepareContext", "Resources", "RunConfig",
    "RunFinished", "RunStarted", "RunState", "Sandbox", "Step", "StepFinished", "StopRun", "Task", "Trace",
    "Usage", "hookimpl",
]
