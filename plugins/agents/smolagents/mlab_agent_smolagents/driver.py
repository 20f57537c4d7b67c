"""Runs in the sandbox: smolagents' CodeAgent on mlab's endpoint, given the task file, until its final answer,
its step limit or a refused call."""
import math
import os
import sys

from smolagents import CodeAgent, OpenAIServerModel  # type: ignore[import-untyped]

model = OpenAIServerModel(model_id=os.environ["MLAB_MODEL"], api_base=os.environ["OPENAI_BASE_URL"],
                          api_key=os.environ["OPENAI_API_KEY"], client_kwargs={"max_retries": 0})
imports = [name.strip() for name in os.environ.get("MLAB_SMOL_IMPORTS", "*").split(",") if name.strip()]
planning = int(os.environ.get("MLAB_SMOL_PLANNING", "0")) or None
# a code step runs as long as the run's --action-timeout allows (smolagents' own default stops it at 30 s)
executor = {"timeout_seconds": max(1, math.ceil(float(os.environ["MLAB_ACTION_TIMEOUT_S"])))} \
    if os.environ.get("MLAB_ACTION_TIMEOUT_S") else {}
agent = CodeAgent(tools=[], model=model, additional_authorized_imports=imports, planning_interval=planning,
                  max_steps=max(1, int(os.environ["MLAB_MAX_STEPS"])), executor_kwargs=executor)
with open(os.environ["MLAB_TASK_FILE"], encoding="utf-8") as f:
    task = f.read()
task += ("\n\nYou work in the current folder (the workspace); run scripts with subprocess and "
         f"{sys.executable}. Call final_answer once submission.csv is written.")
try:
    print("FINAL ANSWER:", agent.run(task))
except Exception as exc:  # a refused call (budget, limit) ends the agent: what it wrote is scored
    print(f"smolagents stopped: {type(exc).__name__}: {exc}")
