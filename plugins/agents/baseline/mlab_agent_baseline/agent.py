"""The trivial policy the original benchmark measures baselines with: run the starter, then submit."""
from __future__ import annotations

from mlab.core import Action, Agent, RunState


class BaselineAgent(Agent):
    name = "baseline"
    description = "Runs the task's starter script once, then submits (no model needed)."
    needs_llm = False

    def step(self, state: RunState) -> Action:
        ran = any(s.action.name == "Execute Script" for s in state.history)
        if not ran:
            return Action(name="Execute Script", args={"script_name": self.ctx.starter_script})
        return Action(name="Final Answer", args={"final_answer": "Ran the starter script unchanged."})
