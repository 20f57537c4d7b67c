"""mini-SWE-agent as a program agent: driver.py, run by the Python agent code runs with, builds its DefaultAgent
with the text-based model (one bash block per reply; mlab's endpoint speaks plain chat, no tool calls) on mlab's
endpoint and a local environment, which is mlab's sandbox; each bash command runs in the workspace."""
from __future__ import annotations

from pydantic import Field

from mlab.core import ProgramAgent, ProgramLaunch, ProgramSpec
from mlab.core.agentkit import AgentOptions

PINNED = "mini-swe-agent==2.4.6"


class MiniSweOptions(AgentOptions):
    command_timeout_s: int = Field(600, ge=1, description="seconds one bash command may run")


class MiniSweAgent(ProgramAgent):
    name = "mini-swe-agent"
    description = "mini-SWE-agent (bash commands only, one per model call), sandboxed by mlab."
    install = "pip install -e 'plugins/agents/miniswe[agent]'  (" + PINNED + ")"
    requires = "minisweagent"
    Options = MiniSweOptions
    options: MiniSweOptions

    def program(self, launch: ProgramLaunch) -> ProgramSpec:
        return self.python_driver(launch, "miniswe_driver.py", {
            "MLAB_MINISWE_TIMEOUT": str(self.options.command_timeout_s),
            # no first-run set-up questions, no update check, no price lookups: mlab prices
            "MSWEA_CONFIGURED": "true", "MSWEA_COST_TRACKING": "ignore_errors",
            "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "MSWEA_SILENT_STARTUP": "1"})
