"""A user's own agent program, run in the run's sandbox with mlab's model endpoint (mlab.core.agent_program).

The command is split like a shell's words. A word naming a file on this machine (relative to where mlab runs,
or absolute) is copied beside the program and named by its copy, since the sandbox shows none of the user's
folders; a leading `python` is the Python agent code runs with. Everything else is passed as written.
"""
from __future__ import annotations

import shlex
import shutil
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from mlab.core import MlabError, ProgramAgent, ProgramLaunch, ProgramSpec
from mlab.core.agentkit import AgentOptions


class CommandOptions(AgentOptions):
    command: str = Field("", validate_default=True,
                         description="the program to run, e.g. \"python my_agent.py\" (required)")

    @field_validator("command")
    @classmethod
    def _words(cls, value: str) -> str:
        try:
            words = shlex.split(value)
        except ValueError as exc:
            raise ValueError(f"not a command line: {exc}") from None
        if not words:
            raise ValueError('agent command needs its program: --agent-option command="python my_agent.py"')
        return value


class CommandAgent(ProgramAgent):
    name = "command"
    description = ("Runs your own agent program (--agent-option command=\"python my_agent.py\") in the sandbox; it "
                   "reaches the run's model at $OPENAI_BASE_URL.")
    install = "nothing to install: your own program, given by --agent-option command=..."
    Options = CommandOptions
    options: CommandOptions

    @classmethod
    def program_missing(cls, options: dict[str, Any]) -> str:
        """The program (or `python`'s script) the command names, when it is neither a file here nor, for a bare
        name, on PATH: the sandbox shows this machine's files, and a copy is made only of a file found here."""
        try:
            words = shlex.split(str(options.get("command", "")))
        except ValueError:
            return ""  # CommandOptions says what is wrong with it
        if not words:
            return ""
        program = words[0]
        if program in ("python", "python3"):
            for word in words[1:]:
                if word in ("-m", "-c", "-"):
                    return ""  # a module or code, not a file
                if not word.startswith("-"):
                    program = word
                    break
            else:
                return ""
            if Path(program).expanduser().is_file():
                return ""
            return f"{program!r} not found (a script is read from where mlab runs: {Path.cwd()})"
        if Path(program).expanduser().is_file() or ("/" not in program and shutil.which(program)):
            return ""
        where = "on PATH" if "/" not in program else f"here (a path is read from where mlab runs: {Path.cwd()})"
        return f"program {program!r} not found {where}"

    def program(self, launch: ProgramLaunch) -> ProgramSpec:
        words = shlex.split(self.options.command)  # checked by CommandOptions
        files: dict[str, str] = {}
        argv = []
        for i, word in enumerate(words):
            path = Path(word).expanduser()
            if i == 0 and word in ("python", "python3"):
                argv.append(launch.python)
            elif path.is_file():
                try:
                    files[path.name] = path.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError) as exc:
                    raise MlabError(f"agent option command: cannot read {word!r}: {exc}") from None
                argv.append(str(launch.agent_dir / path.name))
            elif (launch.agent_dir / path.name).is_file() and launch.resumed and not path.is_absolute():
                argv.append(str(launch.agent_dir / path.name))  # resumed elsewhere: the copy made at the start
            else:
                argv.append(word)
        return ProgramSpec(argv=argv, files=files)
