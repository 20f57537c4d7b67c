"""The ProgramAgent contract: an agent that is a program running its own loop (a third-party agent, a lab's
script). mlab runs it once per run inside the run's sandbox, in the workspace, and records each model call it
makes through mlab's endpoint as a step (mlab.core.run.program_agent).

What a program gets, in its environment:
  OPENAI_BASE_URL, OPENAI_API_BASE, MLAB_LLM_BASE_URL  http://127.0.0.1:PORT/v1, mlab's OpenAI-compatible
                                  endpoint (POST /chat/completions), served by the run's model (`--llm`)
  OPENAI_API_KEY                  a placeholder: the user's key never enters the sandbox
  ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY  the same endpoint for Anthropic's clients (POST /v1/messages), and a
                                  placeholder key; POST /v1/responses speaks OpenAI's Responses API
  MLAB_MODEL                      a name to send as the model (any name gets the run's model)
  MLAB_TASK_FILE                  the research problem, as a file beside the workspace (also MLAB_RESEARCH_PROBLEM)
  MLAB_MAX_STEPS, MLAB_TIME_LIMIT_S  the model calls and seconds it has left
  MLAB_RESUMED                    "1" when the run was resumed: the workspace is as after the last recorded call
  MLAB_ACTION_TIMEOUT_S           how long one action (a command, a code step) may run (--action-timeout)
  MLAB_TOKEN_LIMIT, MLAB_TOKENS_LEFT, MLAB_MAX_CALLS, MLAB_CALLS_LEFT, MLAB_COST_LIMIT_USD, MLAB_COST_LEFT_USD
                                  the run's model budgets and what is left of them, those the run has
  MLAB_AGENT_DIR                  the folder holding ProgramSpec.files: a new one each session (a run's start,
                                  each resume), so keep state in the workspace, not there
A call past the step limit or a budget is answered HTTP 429 (not to be retried) and the program is ended after a
short grace; the run is scored on the workspace as it is. Under --token-limit a call's completion is capped at the
tokens left after its prompt, and a prompt that could cost more than is left (a token a byte) is refused.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from abc import abstractmethod
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any, ClassVar

from mlab.core.agent import Agent
from mlab.core.agent_context import RunState
from mlab.core.errors import MlabError
from mlab.core.models import Action, StopRun


@dataclass
class ProgramLaunch:
    """What mlab tells an agent before it starts its program."""

    research_problem: str
    task_file: Path  # the research problem as a file (inside the sandbox at the same path)
    agent_dir: Path  # where ProgramSpec.files are written (the same path inside the sandbox)
    workspace: Path  # the program's working folder
    python: str  # the interpreter agent code runs with (its packages are the program's)
    max_steps: int  # model calls left
    seconds_left: float
    resumed: bool = False


@dataclass
class ProgramSpec:
    """How to start the program: argv (`{base_url}` in an argument is the endpoint's URL, `{origin}` the same
    without /v1), variables to add, files (name: text) written into ProgramLaunch.agent_dir first, and host folders
    the program needs (its own installation) shown read-only at the same paths in the sandbox."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    shown: list[Path] = field(default_factory=list)


class ProgramAgent(Agent):
    """Subclass with `program`; declare `install` (one line: how to get the program) and override `available`
    when the program may be missing. The core never calls `step`: it runs the program instead."""

    install: ClassVar[str] = ""
    """How to install what the program needs, shown by `mlab agents` and when it is missing."""

    requires: ClassVar[str] = ""
    """The Python module the program imports, if any: the default `available` looks for it."""

    @classmethod
    def available(cls) -> tuple[bool, str]:
        """Whether the program can run here; (False, one line saying what is missing and how to install it)."""
        if cls.requires and importlib.util.find_spec(cls.requires) is None:
            return False, f"{cls.name} is not installed; run: {cls.install}"
        return True, ""

    @classmethod
    def program_missing(cls, options: dict[str, Any]) -> str:
        """Why the program these options name cannot be found here (one line), "" when it can; asked before a new
        run writes anything, so a mistyped program is not a run that ends at its first step."""
        return ""

    @abstractmethod
    def program(self, launch: ProgramLaunch) -> ProgramSpec:
        """The command to run for this run (called at its start and again on each resume).

        Raises:
            MlabError: the options cannot give a command (one line).
        """

    def python_driver(self, launch: ProgramLaunch, file_name: str, env: dict[str, str]) -> ProgramSpec:
        """The program as a script shipped in the agent's package as `driver.py`: written into the agent folder
        as `file_name` and run, unbuffered so its output streams, by the Python agent code runs with."""
        package = sys.modules[type(self).__module__].__package__ or type(self).__module__
        driver = files(package).joinpath("driver.py").read_text(encoding="utf-8")
        return ProgramSpec(argv=[launch.python, "-u", str(launch.agent_dir / file_name)], env=env,
                           files={file_name: driver})

    def step(self, state: RunState) -> Action | StopRun:
        raise MlabError(f"agent {self.name!r} runs its own program: the runner does not ask it for steps")


def cli_agents_dir() -> Path:
    """Where `make cli-agents` installs the npm CLI agents (MLAB_CLI_AGENTS, else build/cli-agents of the checkout)."""
    given = os.environ.get("MLAB_CLI_AGENTS")
    return Path(given) if given else Path(__file__).resolve().parents[1] / "build" / "cli-agents"


def npm_program_found(label: str, folder: Path, binary: Path | None, pin: str, install: str) -> tuple[bool, str]:
    """`available()` of a CLI agent that `make cli-agents` installs from npm into `folder` at `pin`
    (package@version): its `binary` must be there, installed at that pin."""
    if binary is None:
        return False, f"{label} has no build for this machine"
    if not binary.is_file():
        return False, f"{label} is not installed; run: {install}"
    marker = folder / ".installed"
    installed = marker.read_text().strip() if marker.is_file() else "?"
    if installed != pin:
        return False, f"{label} {installed} is installed, this plugin pins {pin}; run: {install}"
    return True, ""


def check_program(agent_cls: type, options: dict[str, Any] | None = None) -> None:
    """Refuse, in one line, a program agent whose program is missing here (before a run writes anything); with
    `options`, also the program they name (a new run: a resumed one uses the copies made at its start)."""
    if isinstance(agent_cls, type) and issubclass(agent_cls, ProgramAgent):
        ok, why = agent_cls.available()
        if ok and options is not None:
            why = agent_cls.program_missing(options)
            ok = not why
        if not ok:
            raise MlabError(f"agent {agent_cls.name!r} cannot run here: {why}")
