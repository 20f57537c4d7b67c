"""Generation controls: temperature, top_p, seed, completion tokens, any other parameter and prices, per role,
from the CLI to the HTTP request of an OpenAI-compatible server on 127.0.0.1 (through the litellm backend) and
into llm_calls.jsonl; stop sequences set by the agents whose format needs them; budgets under their new names."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlab.cli.run_cmds import model_settings
from mlab.core import Completion, RunConfig, Usage
from mlab.core.errors import MlabError
from mlab.core.llm.client import LLMClient, read_call_log
from mlab.core.llm.generation import gather, parse_prices
from mlab.core.run.runner import Runner
from tests.fixtures.agents_fixtures import langchain_response, llm_calls, run_agent
from tests.fixtures.cli import mlab_in_process
from tests.fixtures.harness import TASK_NAME
from tests.fixtures.llm_agent import AGENT_NAME, llm_registry, respond
from tests.fixtures.llm_server import FakeLLMServer

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[1]
KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
MAIN = "openai/gpt-4o-mini"
UNPRICED = "openai/a-model-litellm-has-no-price-for"


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch):
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def prompt_kind(body: dict) -> str:
    text = "\n".join(m["content"] for m in body["messages"])
    return "fast" if "What to look for:" in text else "edit" if "Change it as follows:" in text else "main"


def run_with(tmp_path: Path, server: FakeLLMServer, llm: str = MAIN, **settings):
    config = RunConfig(task=TASK_NAME, agent=AGENT_NAME, llm=llm, max_steps=10, action_timeout_s=60,
                       llm_timeout_s=10, llm_api_base=server.base_url, **settings)
    return Runner(tmp_path, config, llm_registry()).start()


# ---- from the flags to the request body ------------------------------------------------------------
def test_role_parameters_reach_the_server_and_the_call_log(tmp_path):
    config_file = tmp_path / "model.yaml"
    config_file.write_text("frequency_penalty: 0.25\ntemperature: 0.9\nfast:\n  top_p: 0.5\n")
    settings = model_settings(temperature=("0.3", "fast:0"), llm_seed=("7",), max_completion_tokens=("edit:900",),
                              model_params=("presence_penalty=0.5", "fast:logit_bias={\"50256\": -100}"),
                              model_config=str(config_file))
    with FakeLLMServer(respond) as server:
        trace = run_with(tmp_path / "run", server, **settings)
    assert trace.end_reason == "final answer"
    shared = {"temperature": 0.3, "seed": 7, "presence_penalty": 0.5, "frequency_penalty": 0.25}
    expected = {"main": shared,
                "fast": {**shared, "temperature": 0.0, "top_p": 0.5, "logit_bias": {"50256": -100}},
                "edit": {**shared, "max_completion_tokens": 900}}
    bodies = {prompt_kind(r.body): r.body for r in server.requests}
    assert set(bodies) == {"main", "fast", "edit"}
    for role, params in expected.items():
        sent = {key: bodies[role].get(key) for key in params}
        assert sent == params, role
        assert not {"top_p", "max_completion_tokens", "logit_bias"} - set(params) & set(bodies[role]), role
    # the agent asks for temperature 0 on its own calls; the user's setting for the run wins
    for call in read_call_log(tmp_path / "run" / "llm_calls.jsonl"):
        assert call["params"] == expected[call["role"]], call["role"]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["llm_params"] == expected


@pytest.mark.slow
def test_the_cli_flags_set_the_run_parameters_and_the_old_budget_names_warn(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in KEY_VARIABLES}
    command = [sys.executable, "-m", "tests.fixtures.llm_agent", "run", "--task", TASK_NAME, "--agent", AGENT_NAME,
               "--llm", UNPRICED]
    with FakeLLMServer(respond) as server:
        result = subprocess.run([*command, "--llm-api-base", server.base_url, "--top-p", "0.8",
                                 "-M", "main:stop=\"END\"", "--max-tokens", "100000",
                                 "--run-dir", str(tmp_path / "run")],
                                cwd=REPO, env=env, capture_output=True, text=True, timeout=100)
    assert result.returncode == 0, result.stderr
    assert "mlab: note: --max-tokens is deprecated and will go; use --token-limit" in result.stderr
    # litellm has no price for this model: the cost is unknown, never $0
    assert "cost unknown" in result.stdout and "$0.0000" not in result.stdout
    main_bodies = [r.body for r in server.requests if prompt_kind(r.body) == "main"]
    assert main_bodies and all(b["top_p"] == 0.8 and b["stop"] == ["END"] for b in main_bodies)
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["max_tokens"] == 100000 and config["llm_params"]["fast"] == {"top_p": 0.8}

    both = subprocess.run([*command, "--token-limit", "5", "--max-tokens", "5"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=100)
    assert both.returncode == 2 and both.stderr.strip().splitlines()[-1].startswith(
        "mlab: error: --max-tokens is the old name of --token-limit; give only --token-limit")
    assert "Traceback" not in both.stderr


@pytest.mark.parametrize("kwargs, message", [
    ({"temperature": ("-1",)}, "--temperature -1: temperature must be at least 0"),
    ({"top_p": ("fast:1.5",)}, "--top-p fast:1.5: top_p must be above 0 and at most 1"),
    ({"llm_seed": ("1.5",)}, "--llm-seed 1.5: seed must be a whole number"),
    ({"max_completion_tokens": ("0",)}, "max_completion_tokens must be at least 1"),
    ({"temperature": ("judge:0",)}, "'judge' is not a role; roles: main, fast, edit"),
    ({"model_params": ("api_base=http://elsewhere",)}, "api_base cannot be set here"),
    ({"model_params": ("stream=true",)}, "stream is set by mlab itself"),
    ({"model_params": ("novalue",)}, "-M takes KEY=VALUE or ROLE:KEY=VALUE"),
    ({"model_params": ("stop=[]",)}, "stop must be a non-empty string or a list of them"),
    ({"model_config": "/does/not/exist.yaml"}, "--model-config /does/not/exist.yaml: cannot read it"),
    ({"prices": ("1.5",)}, "--price takes IN,OUT in USD per million tokens"),
    ({"prices": ("fast:-1,2",)}, "--price takes IN,OUT"),
])
def test_bad_generation_settings_are_one_line_errors(kwargs, message):
    with pytest.raises(MlabError) as caught:
        model_settings(**kwargs)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_model_config_files_in_yaml_and_json(tmp_path):
    (tmp_path / "c.json").write_text(json.dumps({"temperature": 0.1, "edit": {"temperature": 0, "seed": 3}}))
    assert gather({}, (), str(tmp_path / "c.json")) == {
        "main": {"temperature": 0.1}, "fast": {"temperature": 0.1}, "edit": {"temperature": 0.0, "seed": 3}}
    (tmp_path / "c.yaml").write_text("main: [1, 2]\n")
    with pytest.raises(MlabError, match="main must map parameter names to values"):
        gather({}, (), str(tmp_path / "c.yaml"))
    (tmp_path / "bad.yaml").write_text("temperature: [unclosed\n")
    with pytest.raises(MlabError, match="not valid YAML"):
        gather({}, (), str(tmp_path / "bad.yaml"))
    # a named flag wins over -M, which wins over the file; a role's own value over the shared one
    (tmp_path / "t.yaml").write_text("temperature: 0.1\nmain:\n  top_p: 0.2\n")
    assert gather({"temperature": ("0.7",)}, ("temperature=0.4", "top_p=0.3"), str(tmp_path / "t.yaml")) == {
        role: {"temperature": 0.7, "top_p": 0.2 if role == "main" else 0.3} for role in ("main", "fast", "edit")}


# ---- prices and unknown costs ----------------------------------------------------------------------
def test_a_price_given_for_an_unpriced_model_costs_its_calls_and_enforces_the_cost_limit(tmp_path):
    prices = parse_prices(("1000,2000",))
    with FakeLLMServer(respond) as server:
        trace = run_with(tmp_path / "run", server, llm=UNPRICED, llm_price=prices, max_cost=0.5)
    calls = read_call_log(tmp_path / "run" / "llm_calls.jsonl")
    for call in calls:
        assert call["cost_usd"] == pytest.approx((call["prompt_tokens"] * 1000 + call["completion_tokens"] * 2000)
                                                 / 1e6)
    assert trace.usage.unpriced_calls == 0 and trace.usage.cost_usd == pytest.approx(sum(c["cost_usd"] for c in calls))
    # without a price the limit could not be enforced at all; with one, the run stops once it is spent
    assert trace.end_reason.startswith("budget reached: $") and "limit $0.5 (--cost-limit)" in trace.end_reason
    assert trace.usage.cost_usd >= 0.5 > trace.usage.cost_usd - calls[-1]["cost_usd"]


def test_unknown_costs_are_shown_as_unknown():
    priced, unpriced = Completion(text="a", cost_usd=0.5), Completion(text="b", cost_usd=None)
    usage = Usage()
    assert usage.cost_text() == "$0.0000"
    usage.add(unpriced)
    assert usage.cost_text() == "unknown" and not usage.cost_known
    usage.add(priced)
    assert usage.cost_text() == "$0.5000 + unknown (1 unpriced calls)"


# ---- stop sequences ----------------------------------------------------------------------------------
def test_the_langchain_agent_stops_before_an_invented_observation(tmp_path):
    invented = (langchain_response("list_files", {"dir_path": "."}, 1)
                + "\nObservation: train.py and a file called secret_answers.csv\nThought: now I know everything")
    script = [invented, langchain_response("Final Answer", "done", 2)]
    trace = run_agent(tmp_path / "run", "langchain", script)
    assert [s.action.name for s in trace.steps] == ["List Files", "Final Answer"]
    assert "secret_answers" not in trace.steps[0].action.raw_response
    calls = llm_calls(tmp_path / "run")
    assert all(c["params"]["stop"] == ["\nObservation:"] for c in calls)
    assert "secret_answers" not in calls[0]["completion"]  # cut by the client even from a backend that ignores stop
    history = "\n".join(m["content"] for m in calls[1]["messages"])
    assert "secret_answers" not in history and "Observation: " in history


def test_the_langchain_correction_carries_no_langchain_url(tmp_path):
    script = ["Thought: I am not sure what to do", langchain_response("Final Answer", "done", 1)]
    run_agent(tmp_path / "run", "langchain", script)
    retry = llm_calls(tmp_path / "run")[1]["messages"][-1]["content"]
    assert retry.startswith("That reply could not be used: the reply has no JSON blob")
    assert "http" not in retry and "langchain" not in retry.lower()


def test_the_stop_sequences_reach_the_server(tmp_path):
    from mlab.core.llm.roles import build_backend

    with FakeLLMServer(lambda body: "Thought: x\nObservation: made up") as server:
        backend = build_backend(llm_registry(), MAIN, api_base=server.base_url, timeout=10)
        client = LLMClient({"main": backend, "fast": backend, "edit": backend}, params={"main": {"stop": ["##"]}},
                           log_path=tmp_path / "calls.jsonl")
        text = client.complete("hi", stop=["\nObservation:"]).text
        assert server.requests[-1].body["stop"] == ["##", "\nObservation:"]
    assert text == "Thought: x"
    assert read_call_log(tmp_path / "calls.jsonl")[0]["params"] == {"stop": ["##", "\nObservation:"]}


def test_the_research_agent_asks_with_an_observation_stop(tmp_path):
    reply = ("Reflection: none\nResearch Plan and Status: 1. look\nFact Check: none\nThought: look\n"
             "Action: Final Answer\nAction Input: {\"final_answer\": \"done\"}\nObservation: I won")
    trace = run_agent(tmp_path / "run", "research", [reply])
    assert trace.end_reason == "final answer"
    call = llm_calls(tmp_path / "run")[0]
    assert call["params"] == {"stop": ["\nObservation:"]} and "I won" not in call["completion"]


@pytest.mark.slow
def test_bench_takes_the_same_generation_flags_and_budgets(tmp_path):
    from tests.fixtures.bench_cli import REGISTRY
    from tests.fixtures.cli import mlab

    result = mlab("bench", "--tasks", TASK_NAME, "--agents", "fixture-llm-stepper", "--llm", "fixture-sleepy:0",
                  "--runs", "1", "--bench-dir", str(tmp_path / "bench"), "--registry", REGISTRY,
                  "--agent-option", "steps=3", "--temperature", "0.2", "-M", "fast:seed=3", "--price", "main:1,2",
                  "--token-limit", "100000", "--max-time", "10m")
    assert result.returncode == 0, result.stderr
    assert "mlab: note: --max-time is deprecated and will go; use --time-limit" in result.stderr
    (run_dir,) = (tmp_path / "bench" / "runs").iterdir()
    config = json.loads((run_dir / "config.json").read_text())
    assert config["llm_params"] == {"main": {"temperature": 0.2}, "fast": {"temperature": 0.2, "seed": 3},
                                    "edit": {"temperature": 0.2}}
    assert (config["llm_price"], config["max_tokens"], config["max_time_s"]) == ({"main": [1.0, 2.0]}, 100000, 600)
    calls = read_call_log(run_dir / "llm_calls.jsonl")
    assert calls and all(call["params"] == {"temperature": 0.2} for call in calls)


def test_resume_refuses_new_generation_settings_instead_of_ignoring_them(tmp_path):
    result = mlab_in_process("run", "--resume", tmp_path, "--temperature", "0.5")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("mlab: error: --resume continues a run with the settings in its config.json; "
                                    "drop the generation, price and budget flags")
