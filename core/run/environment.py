"""The agent's world: a workspace, the actions on it, and nothing beyond it.

This module checks each action's arguments and hands it to the module of its concern: files.py for the file
actions, scripts.py for running code, llm_actions.py for the actions that ask a model, research_log.py for
the research log.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlab.core.actions import ACTION_SPECS, FINAL_ANSWER, OPT_IN_FLAGS, VALIDATE_SUBMISSION, ActionSpec
from mlab.core.errors import BudgetExceeded, EnvError, LLMError
from mlab.core.models import Action
from mlab.core.run.edit_history import EditHistory
from mlab.core.run.env_settings import EnvSettings
from mlab.core.run.files import FileActions
from mlab.core.run.llm_actions import LLMActions
from mlab.core.run.repl import Repl
from mlab.core.run.research_log import ResearchLog
from mlab.core.run.scripts import FailedOutput, ScriptRunner
from mlab.core.run.workspace import MAX_WRITE_BYTES, Workspace
from mlab.core.sandbox.spec import ExecResult, ExecSpec

__all__ = ["EnvSettings", "Environment", "MAX_ARG_CHARS", "is_final"]

MAX_ARG_CHARS = MAX_WRITE_BYTES


class Environment:
    def __init__(self, settings: EnvSettings):
        self.s = settings
        space = self._space = Workspace(settings)
        self.workspace = space.root
        self.history = EditHistory(space, settings.store)
        self.files = FileActions(space, self.history)
        self.scripts = ScriptRunner(settings, space)
        self.research_log = ResearchLog(space, self.history)
        self.llm_actions = LLMActions(settings.llm, space, self.history, self.research_log)
        self._handlers: dict[str, Callable[..., str]] = {
            "List Files": self.files.list_files,
            "Read File": self.files.read_file,
            "Write File": self.files.write_file,
            "Append File": self.files.append_file,
            "Copy File": self.files.copy_file,
            "Undo Edit Script": self.files.undo_edit_script,
            "Execute Script": self.scripts.execute_script,
            "Python REPL": self.scripts.python_repl,
            "Final Answer": self.final_answer,
            "Understand File": self.llm_actions.understand_file,
            "Inspect Script Lines": self.files.inspect_script_lines,
            "Edit Script (AI)": self.llm_actions.edit_script,
            "Edit Script Segment (AI)": self.llm_actions.edit_script_segment,
            "Reflection": self.llm_actions.reflection,
            "Retrieval from Research Log": self.llm_actions.retrieval,
            "Append Summary to Research Log": self.research_log.append_summary,
            "Request Help": self.request_help,
            VALIDATE_SUBMISSION: self.validate_submission,
        }

    # ---- dispatch -------------------------------------------------------------------------------
    def available_actions(self) -> dict[str, ActionSpec]:
        actions = {n: s for n, s in ACTION_SPECS.items() if self.s.interactive or not s.interactive_only}
        if self.s.validator is not None:
            actions[VALIDATE_SUBMISSION] = self.s.validator.spec()
        return actions

    def execute(self, action: Action) -> tuple[str, bool]:
        """Run one action; returns (observation, is_error). Never raises on agent input."""
        name = getattr(action, "name", None)
        try:
            spec, args = self._check(action)
            observation = self._handlers[spec.name](**args)
            is_error = isinstance(observation, FailedOutput)  # code that ran and failed
        except EnvError as exc:
            observation, is_error = f"EnvError: {exc}", True
        except LLMError as exc:
            if not exc.context_too_long:
                raise  # the run's model failed for good: the runner ends the run
            observation, is_error = f"EnvError: the text is too long for the model: {exc}", True
        except BudgetExceeded:
            raise
        except OSError as exc:  # the workspace is the agent's: anything can be there
            where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
            where = where.replace(f"{self.workspace}/", "")  # the agent knows workspace paths, not host ones
            observation, is_error = f"EnvError: {name} failed: {exc.strerror or exc}{where}", True
        except Exception as exc:  # a harness bug must not end the run; the agent sees what went wrong
            observation, is_error = f"EnvError: {name} failed unexpectedly: {type(exc).__name__}: {exc}", True
        # Traces and model requests need valid UTF-8; file names and output may not be.
        return observation.encode("utf-8", "backslashreplace").decode("utf-8"), is_error

    def _check(self, action: Action) -> tuple[ActionSpec, dict[str, Any]]:
        actions = self.available_actions()
        name = getattr(action, "name", None)
        if isinstance(name, str) and name in OPT_IN_FLAGS and name not in actions:
            raise EnvError(f"{name} is offered only in runs started with {OPT_IN_FLAGS[name]}; this run was not")
        if not isinstance(name, str) or name not in actions:
            shown = name if isinstance(name, str) else repr(name)
            raise EnvError(f"unknown action {shown[:200]!r}. Valid actions: {', '.join(actions)}")
        spec = actions[name]
        args = getattr(action, "args", None)
        if not isinstance(args, dict):
            raise EnvError(f"the action input must be a JSON object with the arguments by name, not "
                           f"{type(args).__name__}. Usage: {spec.usage()}")
        missing = [a for a in spec.args if a not in args and a not in spec.optional]
        unknown = [str(a)[:100] for a in args if a not in spec.args]
        if missing or unknown:
            problems = []
            if missing:
                problems.append(f"missing {missing}")
            if unknown:
                problems.append(f"unexpected {unknown}")
            raise EnvError(f"wrong arguments for {spec.name} ({'; '.join(problems)}). Usage: {spec.usage()}")
        checked: dict[str, Any] = {}
        for arg, value in args.items():
            if arg.endswith("_line_number"):
                checked[arg] = _line_number(arg, value, spec)
                continue
            if not isinstance(value, str):
                raise EnvError(f"{arg} must be a string, not {type(value).__name__}. Usage: {spec.usage()}")
            if len(value) > MAX_ARG_CHARS:
                raise EnvError(f"{arg} is {len(value)} characters long; at most {MAX_ARG_CHARS} are allowed")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise EnvError(f"{arg} contains characters that are not valid Unicode (lone surrogates)") from None
            checked[arg] = value
        return spec, checked

    # ---- actions of the run itself --------------------------------------------------------------
    def final_answer(self, final_answer: str) -> str:
        return "Final answer submitted; the run ends here."

    def validate_submission(self, predictions_file: str | None = None) -> str:
        assert self.s.validator is not None  # _check offers the action only with one
        return self.s.validator.validate(self._space, predictions_file)

    def request_help(self, request: str) -> str:
        if not self.s.ask_human:
            raise EnvError("no person is attending this run")
        try:
            answer = self.s.ask_human(request)
        except Exception as exc:
            raise EnvError(f"no answer came from the person attending the run ({type(exc).__name__})") from exc
        return str(answer)

    # ---- running code outside an action (task baselines, sandbox set-up) ------------------------
    def exec_spec(self, timeout_s: float | None = None) -> ExecSpec:
        return self.scripts.exec_spec(timeout_s)

    def read_only_paths(self) -> list[Path]:
        return self.scripts.read_only_paths()

    def run_script(self, script_name: str) -> tuple[ExecResult, list[str]]:
        """Run a workspace script in the sandbox; used by Execute Script and by task baselines."""
        return self.scripts.run_script(script_name)

    @property
    def _repl(self) -> Repl | None:
        return self.scripts.repl  # the sandbox tests check where the REPL's process runs

    # ---- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return self.history.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history.load_state_dict(state)

    def close(self) -> None:
        self.scripts.close()


def is_final(action: Action) -> bool:
    return action.name == FINAL_ANSWER


def _line_number(arg: str, value: Any, spec: ActionSpec) -> int:
    """A 1-based line number from an int, an integral float or a string of digits."""
    problem = f"{arg} must be a positive whole number, not {str(value)[:50]!r}. Usage: {spec.usage()}"
    if isinstance(value, bool):
        raise EnvError(problem)
    if isinstance(value, float):
        if not value.is_integer():
            raise EnvError(problem)
        value = int(value)
    if isinstance(value, str):
        text = value.strip()
        if not text or len(text) > 12 or not all("0" <= c <= "9" for c in text):
            raise EnvError(problem)
        value = int(text)
    if not isinstance(value, int) or value < 0 or value > 10**12:
        raise EnvError(problem)
    return value
