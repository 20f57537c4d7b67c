"""Claude Code (npm @anthropic-ai/claude-code, `claude -p`) run in the run's sandbox: its Messages API calls go to
mlab's endpoint (the run's model, whatever its provider), its tools (Bash, Read, Write, Edit, Glob, Grep) act in
the sandbox, in the workspace.

The npm package holds a compiled binary per platform, so the sandbox needs no Node (the package's Node >= 22 is
the installer's). Telemetry, error reports, the update check and other non-essential traffic are off, and the
sandbox has no network in any case. Its state lives in the session's agent folder (CLAUDE_CONFIG_DIR), so a
resumed run starts a new Claude Code session on the workspace as it was.
"""
from __future__ import annotations

import platform
from pathlib import Path

from pydantic import Field

from mlab.core import ProgramAgent, ProgramLaunch, ProgramSpec, cli_agents_dir, npm_program_found
from mlab.core.agentkit import AgentOptions

NPM = "@anthropic-ai/claude-code@2.1.332"
_PACKAGES = {"x86_64": "claude-code-linux-x64", "aarch64": "claude-code-linux-arm64"}


def install_folder() -> Path:
    return cli_agents_dir() / "claude_code"


def binary() -> Path | None:
    package = _PACKAGES.get(platform.machine())
    return install_folder() / "node_modules" / "@anthropic-ai" / package / "claude" if package else None


class ClaudeCodeOptions(AgentOptions):
    model: str = Field("claude-sonnet-4-5", description="the model name Claude Code is told it uses; every call "
                                                        "goes to the run's model")
    tools: str = Field("Bash,Read,Write,Edit,Glob,Grep", description="the Claude Code tools on offer (--tools)")


class ClaudeCodeAgent(ProgramAgent):
    name = "claude-code"
    description = "Anthropic's Claude Code (claude -p), sandboxed by mlab; it reaches the run's model through mlab."
    install = f"make cli-agents  (npm {NPM} into {install_folder()}; MLAB_CLI_AGENTS moves it)"
    Options = ClaudeCodeOptions
    options: ClaudeCodeOptions

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return npm_program_found("Claude Code", install_folder(), binary(), NPM, cls.install)

    def program(self, launch: ProgramLaunch) -> ProgramSpec:
        prompt = (f"{launch.research_problem}\n\nRun Python as `{launch.python}` (it has the task's packages). Work "
                  f"in the current folder; write your submission there before you finish.")
        found = binary()
        assert found is not None  # available() said so
        return ProgramSpec(
            argv=[str(found), "-p", prompt, "--output-format", "stream-json", "--verbose",
                  "--dangerously-skip-permissions", "--model", self.options.model, "--tools", self.options.tools],
            env={"CLAUDE_CONFIG_DIR": str(launch.agent_dir / "claude-config"),
                 # inside mlab's sandbox: the permission bypass is allowed even where the sandbox maps root
                 "IS_SANDBOX": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_TELEMETRY": "1",
                 "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1", "NO_COLOR": "1"},
            files={"claude-config/.keep": ""},
            shown=[install_folder()])
