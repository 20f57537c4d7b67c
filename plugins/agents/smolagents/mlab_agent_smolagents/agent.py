"""smolagents' CodeAgent as a program agent: driver.py, run by the Python agent code runs with, builds the agent
on mlab's endpoint and gives it the task; its code runs in smolagents' own interpreter, inside mlab's sandbox."""
from __future__ import annotations

from pydantic import Field

from mlab.core import ProgramAgent, ProgramLaunch, ProgramSpec
from mlab.core.agentkit import AgentOptions

PINNED = "smolagents==1.26.0"


class SmolagentsOptions(AgentOptions):
    imports: str = Field("*", description="modules its code may import, comma-separated (* for any)")
    planning_interval: int = Field(0, ge=0, description="a planning call every N steps (0: none)")


class SmolagentsAgent(ProgramAgent):
    name = "smolagents"
    description = "Hugging Face smolagents' CodeAgent (writes and runs Python each step), sandboxed by mlab."
    install = "pip install -e 'plugins/agents/smolagents[agent]'  (" + PINNED + ")"
    requires = "smolagents"
    Options = SmolagentsOptions
    options: SmolagentsOptions

    def program(self, launch: ProgramLaunch) -> ProgramSpec:
        env = {"MLAB_SMOL_IMPORTS": self.options.imports, "MLAB_SMOL_PLANNING": str(self.options.planning_interval)}
        return self.python_driver(launch, "smolagents_driver.py", env)
