"""Codex CLI (npm @openai/codex, `codex exec`) run in the run's sandbox: its Responses API calls go to mlab's
endpoint (the run's model, whatever its provider), its shell commands run in the sandbox, in the workspace.

The npm package holds a static binary per platform, so the sandbox needs no Node. Codex's own sandbox is off
(the run's sandbox confines it); its analytics, plugin sync, web search and update check are off, and the sandbox
has no network in any case. Its state lives in the session's agent folder (CODEX_HOME), so a resumed run starts a
new Codex session on the workspace as it was.
"""
from __future__ import annotations

import json
import platform
from pathlib import Path

from pydantic import Field

from mlab.core import ProgramAgent, ProgramLaunch, ProgramSpec, cli_agents_dir, npm_program_found
from mlab.core.agentkit import AgentOptions

NPM = "@openai/codex@0.171.0"
_TARGETS = {"x86_64": ("codex-linux-x64", "x86_64-unknown-linux-musl"),
            "aarch64": ("codex-linux-arm64", "aarch64-unknown-linux-musl")}
CONFIG = """\
approval_policy = "never"
sandbox_mode = "danger-full-access"
web_search = "disabled"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false
multi_agent = false
goals = false
"""


def install_folder() -> Path:
    return cli_agents_dir() / "codex"


def binary() -> Path | None:
    target = _TARGETS.get(platform.machine())
    if target is None:
        return None
    package, triple = target
    return install_folder() / "node_modules" / "@openai" / package / "vendor" / triple / "bin" / "codex"


class CodexOptions(AgentOptions):
    model: str = Field("gpt-5.5", description="the model name Codex is told it uses (it picks its tools by it); "
                                              "every call goes to the run's model")


class CodexAgent(ProgramAgent):
    name = "codex"
    description = "OpenAI's Codex CLI (codex exec), sandboxed by mlab; it reaches the run's model through mlab."
    install = f"make cli-agents  (npm {NPM} into {install_folder()}; MLAB_CLI_AGENTS moves it)"
    Options = CodexOptions
    options: CodexOptions

    @classmethod
    def available(cls) -> tuple[bool, str]:
        return npm_program_found("Codex CLI", install_folder(), binary(), NPM, cls.install)

    def program(self, launch: ProgramLaunch) -> ProgramSpec:
        provider = ('{name="mlab",base_url="{base_url}",env_key="MLAB_CODEX_KEY",wire_api="responses",'
                    'request_max_retries=0,stream_max_retries=0}')
        prompt = (f"{launch.research_problem}\n\nRun Python as `{launch.python}` (it has the task's packages). Work "
                  f"in the current folder; write your submission there before you finish.")
        found = binary()
        assert found is not None  # available() said so
        return ProgramSpec(
            argv=[str(found), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "--json",
                  "-c", "model_provider=mlab", "-c", f"model={json.dumps(self.options.model)}",
                  "-c", f"model_providers.mlab={provider}", prompt],
            env={"CODEX_HOME": str(launch.agent_dir / "codex-home"), "MLAB_CODEX_KEY": "mlab-endpoint-no-key",
                 "NO_COLOR": "1"},
            files={"codex-home/config.toml": CONFIG},
            shown=[install_folder()])
