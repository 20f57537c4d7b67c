"""mlab's public API: everything a task pack, agent or LLM backend plugin needs, and nothing heavy.

Plugins import from `mlab.core` (the names in `__all__`) and from `mlab.core.agentkit` (helpers for agents);
every other module of the core is internal and may change without notice. tests/test_public_api.py enforces it.
"""
from mlab.core.actions import ACTION_SPECS, VALIDATE_SUBMISSION, ActionSpec
from mlab.core.agent import Agent, AgentContext, RunState
from mlab.core.errors import BudgetExceeded, EnvError, InvalidSubmission, LLMError, MlabError
from mlab.core.hookspecs import hookimpl
from mlab.core.llm.backend import LLM
from mlab.core.llm.client import LLMClient
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
from mlab.core.run.taskdata import DataFile
from mlab.core.sandbox.contract import ExecResult, ExecSpec, Sandbox
from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.local import LocalSandbox
from mlab.core.sandbox.rootfs import RootView, extra_read_only, root_view
from mlab.core.task import (
    BaselineContext,
    Metric,
    PrepareContext,
    Resources,
    ScoringContext,
    Task,
    ValidationSplit,
    scoring_context,
)

__all__ = [
    "ACTION_SPECS", "Action", "ActionSpec", "Agent", "AgentContext", "BaselineContext", "BaselineMeasured",
    "BudgetExceeded", "DataFile",
    "Completion", "EnvError", "ExecResult", "ExecSpec", "InvalidSubmission", "LLM", "LLMCallFinished",
    "LLMClient", "LLMError", "Limits", "LocalSandbox", "Message", "Metric", "MlabError", "PrepareContext",
    "Resources", "RootView", "RunConfig", "RunFinished", "RunStarted", "RunState", "Sandbox", "ScoringContext", "Step",
    "StepFinished", "StopRun", "SubmissionScored", "Task", "TaskPrepared", "Trace", "Usage", "hookimpl",
    "extra_read_only", "root_view", "scoring_context", "VALIDATE_SUBMISSION", "ValidationSplit",
]
