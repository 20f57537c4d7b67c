"""Runs in the sandbox: mini-SWE-agent's DefaultAgent on mlab's endpoint, given the task file, until it submits,
reaches its step limit or a call is refused."""
import os
import sys
from pathlib import Path

import litellm
import yaml  # type: ignore[import-untyped]
from minisweagent import package_dir
from minisweagent.agents.default import DefaultAgent
from minisweagent.environments.local import LocalEnvironment
from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel

# litellm prints a "Provider List" banner to stdout on each failed price lookup: it would end every observation
litellm.suppress_debug_info = True

config = yaml.safe_load(Path(package_dir, "config", "mini_textbased.yaml").read_text())
model_config = dict(config.get("model", {}))
model_kwargs = dict(model_config.pop("model_kwargs", None) or {})
# "openai/" makes litellm speak OpenAI's chat API to mlab's endpoint; the model name itself is not used there.
model = LitellmTextbasedModel(model_name="openai/" + os.environ["MLAB_MODEL"], cost_tracking="ignore_errors",
                              model_kwargs={**model_kwargs, "api_base": os.environ["OPENAI_BASE_URL"],
                                            "api_key": os.environ["OPENAI_API_KEY"], "num_retries": 0},
                              **model_config)
environment = LocalEnvironment(cwd=os.getcwd(), timeout=int(os.environ["MLAB_MINISWE_TIMEOUT"]),
                               env=config.get("environment", {}).get("env", {}))
agent_config = {key: value for key, value in config["agent"].items() if key != "mode"}
agent_config.update(step_limit=max(1, int(os.environ["MLAB_MAX_STEPS"])), cost_limit=0)
agent = DefaultAgent(model, environment, **agent_config)
with open(os.environ["MLAB_TASK_FILE"], encoding="utf-8") as f:
    task = f.read()
task += (f"\n\nThe current folder is the workspace; run Python with {sys.executable}. Submit once "
         "submission.csv is written.")
try:
    result = agent.run(task)
    print("EXIT STATUS:", result.get("exit_status"))
except Exception as exc:  # a refused call (budget, limit) ends the agent: what it wrote is scored
    print(f"mini-swe-agent stopped: {type(exc).__name__}: {exc}")
