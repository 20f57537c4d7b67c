"""smolagents' CodeAgent as a program agent: driver.py, run by the Python agent code runs with, builds the agent
on mlab's endpoint and gives it the task; its code runs in smolagents' own interpreter, inside mlab's sandbox."""
from __future__ import annotations

import importlib.util
from importlib.resources import files

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
    Options = SmolagentsOptions
    options: SmolagentsOptions

    @classmethod
    def available(cls) -> tuple[bool, str]:
        if importlib.util.find_spec("smolagents") is None:
            return False, f"smolagents is not installed; run: {cls.install}"
        return True, ""

    def program(self, launch: ProgramLaunch) -> ProgramSpec:
        driver = files(__package__).joinpath("driver.py").read_text(encoding="utf-8")
        return ProgramSpec(argv=[launch.python, "-u", str(launch.agent_dir / "smolagents_driver.py")],
                           env={"MLAB_SMOL_IMPORTS": self.options.imports,
                                "MLAB_SMOL_PLANNING": str(self.options.planning_interval)},
                           files={"smolagents_driver.py": driver})
