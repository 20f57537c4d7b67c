"""mlab's public API: everything a task pack, agent or LLM backend plugin needs, and nothing heavy.

Plugins import from `mlab.core` (the names in `__all__`), from `mlab.core.agentkit` (helpers for agents) and,
bridges, from `mlab.core.bridge` (a run whose agent is another framework's); every other module of the core is
internal and may change without notice. tests/test_public_api.py enforces it.

The imports below are the list, written once: type checkers read them, and at run time `__all__` and the lazy
table are read from them (this file's own source). Importing mlab.core imports none of them: a plugin's
registration module imports `hookimpl` and `Lazy` and stays light (`mlab list-plugins` imports every one); each
of the rest loads on first use.
"""
# ruff: noqa: F401  (the imports under TYPE_CHECKING are the exports, used through __all__ and __getattr__)
import ast
import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the public names
    from mlab.core.actions import ACTION_SPECS, VALIDATE_SUBMISSION, ActionSpec
    from mlab.core.agent import Agent
    from mlab.core.agent_context import AgentContext, RunState
    from mlab.core.agent_program import ProgramAgent, ProgramLaunch, ProgramSpec, cli_agents_dir, npm_program_found
    from mlab.core.errors import BudgetExceeded, EnvError, InvalidSubmission, LLMError, MlabError
    from mlab.core.hookspecs import hookimpl
    from mlab.core.llm.backend import LLM
    from mlab.core.llm.client import LLMClient
    from mlab.core.llm.openai_chat import to_openai
    from mlab.core.llm.proxy import LLM_PROXY_SOCKET_ENV, HttpUpstream, LLMProxy, ProxyBudget, ProxyUsage
    from mlab.core.models import (
        Action,
        BaselineMeasured,
        Completion,
        ContentPart,
        LLMCallFinished,
        Message,
        RunConfig,
        RunFinished,
        RunStarted,
        Step,
        StepFinished,
        StopRun,
        SubmissionScored,
        TaskParam,
        TaskPrepared,
        ToolCall,
        Trace,
        Usage,
    )
    from mlab.core.plugins.lazy import Lazy
    from mlab.core.run.taskdata import DataFile
    from mlab.core.sandbox.command import Command
    from mlab.core.sandbox.contract import Sandbox
    from mlab.core.sandbox.limits import Limits
    from mlab.core.sandbox.local import LocalSandbox
    from mlab.core.sandbox.process import ProcessCommand, ProcessSandbox
    from mlab.core.sandbox.rootfs import RootView, extra_read_only, path_identity, root_view
    from mlab.core.sandbox.spec import ExecResult, ExecSpec
    from mlab.core.task import Metric, Resources, Task, ValidationSplit
    from mlab.core.task_context import BaselineContext, PrepareContext, ScoringContext, scoring_context


def _exports() -> dict[str, str]:
    """name -> the module defining it, from the `if TYPE_CHECKING:` imports above."""
    with open(__file__, encoding="utf-8") as source:
        tree = ast.parse(source.read())
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    return {alias.name: node.module for node in block.body if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names}


_EXPORTS = _exports()
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mlab.core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
