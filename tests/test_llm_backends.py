"""The litellm, replay and human backends for real: HTTP to an OpenAI-compatible server started on 127.0.0.1,
whole runs of an agent that asks its model for every action, replays, the cache and budgets."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mlab.core import LLMError, Message, RunConfig, hookimpl
from mlab.core.errors import MlabError
from mlab.core.llm.client import LLMClient, read_call_log, usage_of_log
from mlab.core.llm.retry import RetryPolicy
from mlab.core.llm.roles import build_backend
from mlab.core.run.runner import Runner
from tests.fixtures.harness import TASK_NAME
from tests.fixtures.llm_agent import AGENT_NAME, EDITED_SCRIPT, PLAN, UNDERSTOOD, llm_registry, respond
from tests.fixtures.llm_server import FakeLLMServer

pytestmark = pytest.mark.timeout(120)  # servers, runs and terminals here are all bounded well below this

QUICK_RETRY = {"initial_s": 0.05, "max_wait_s": 0.2, "max_attempts": 8, "max_total_s": 30}
KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
MAIN, FAST, EDIT = "openai/gpt-4o-mini", "openai/gpt-4o", "openai/gpt-3.5-turbo"  # all priced by litellm


@pytest.fixture(autouse=True)
def _no_keys(monkeypatch):
    for name in KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def litellm_warmed():
    """litellm's import and first call take seconds, once per process: timed tests must not pay for them,
    whichever of them runs first."""
    with FakeLLMServer(respond) as srv:
        backend = build_backend(llm_registry(), MAIN, api_base=srv.base_url, timeout=10)
        backend.complete([Message(role="user", content="warm up")])


@pytest.fixture
def server(litellm_warmed):
    with FakeLLMServer(respond) as srv:
        yield srv


def run_agent(run_dir: Path, server: FakeLLMServer | None = None, llm: str = MAIN, **settings):
    config = {"task": TASK_NAME, "agent": AGENT_NAME, "llm": llm, "max_steps": 10, "action_timeout_s": 60,
              "llm_timeout_s": 10, "llm_retry": QUICK_RETRY}
    if server is not None:
        config["llm_api_base"] = server.base_url
    config.update(settings)
    return Runner(Path(run_dir), RunConfig(**config), llm_registry()).start()


def steps_of(trace) -> list[tuple]:
    return [(s.action.name, s.action.args, s.observation, s.is_error) for s in trace.steps]


def prompt_kind(body: dict) -> str:
    text = "\n".join(m["content"] for m in body["messages"])
    return "fast" if "What to look for:" in text else "edit" if "Change it as follows:" in text else "main"


def client_for(server: FakeLLMServer, tmp_path: Path, timeout: float = 1.0) -> LLMClient:
    backend = build_backend(llm_registry(), MAIN, api_base=server.base_url, timeout=timeout)
    return LLMClient({"main": backend, "fast": backend, "edit": backend}, log_path=tmp_path / "llm_calls.jsonl",
                     retry=RetryPolicy.from_dict(QUICK_RETRY))


# ---- litellm over HTTP ------------------------------------------------------------------------------
@pytest.mark.slow  # six real HTTP attempts with real waits (a Retry-After second, a timed-out stall)
def test_transient_http_faults_are_retried_until_the_call_completes(server, tmp_path):
    # The stall outlasts any test: a client that waited it out instead of abandoning it at 1 s would hang.
    server.faults.extend(["429:1", "500", "stall:100000", "drop", "malformed"])
    llm = client_for(server, tmp_path, timeout=1.0)
    started = time.monotonic()
    completion = llm.complete("hello there")
    elapsed = time.monotonic() - started
    assert completion.text == "echo: hello there"
    assert [r.fault for r in server.requests] == ["429:1", "500", "stall:100000", "drop", "malformed", None]
    (entry,) = read_call_log(tmp_path / "llm_calls.jsonl")
    assert entry["attempts"] == 6 and entry["error"] is None and entry["completion"] == "echo: hello there"
    errors = [r["error"] for r in entry["retries"]]
    assert ["rate limited (429" in errors[0], "(500" in errors[1], "timed out" in errors[2],
            "connection failed or dropped" in errors[3], "malformed response" in errors[4]] == [True] * 5
    # Retry-After: 1 was honoured: the second request came at least a second after the first
    assert entry["retries"][0]["retry_after_s"] == 1.0 and entry["retries"][0]["wait_s"] >= 1.0
    assert server.requests[1].at - server.requests[0].at >= 1.0
    # the stalled request was abandoned at the 1 s timeout (a client that waited it out would hang here for days)
    assert server.requests[3].at - server.requests[2].at >= 1.0
    # the other waits followed the quick policy: at most 0.2 s each, +50 % jitter
    assert all(r["wait_s"] <= 0.3 for r in entry["retries"][1:])
    print(f"\n6 attempts, 5 retries in {elapsed:.2f} s; waits {[r['wait_s'] for r in entry['retries']]}")


@pytest.mark.parametrize("fault, message, flag", [
    ("401", r"authentication failed \(401: Incorrect API key provided\); check OPENAI_API_KEY", False),
    ("400", r"bad request \(400: Invalid value for 'messages'\)", False),
    ("context", r"the prompt is too long for the model", True),
])
def test_permanent_http_errors_fail_at_once(server, tmp_path, fault, message, flag):
    server.faults.append(fault)
    llm = client_for(server, tmp_path)
    with pytest.raises(LLMError, match=message) as info:
        llm.complete("hello")
    assert len(server.requests) == 1 and not info.value.transient and info.value.context_too_long is flag
    (entry,) = read_call_log(tmp_path / "llm_calls.jsonl")
    assert entry["attempts"] == 1 and entry["retries"] == [] and entry["error"].startswith(MAIN)


def test_error_classification_of_other_provider_failures():
    import email.utils

    import httpx

    from mlab_llm_litellm.backend import _import_litellm, classify, parse_retry_after

    litellm = _import_litellm()
    overloaded = classify(litellm.APIError(529, "Overloaded", "anthropic", "claude"), "anthropic/claude")
    unavailable = classify(litellm.ServiceUnavailableError("busy", "openai", "m"), "openai/m")
    bad_json_request = classify(litellm.BadRequestError("Expecting value: line 1 column 1", "m", "openai"), "m")
    too_long = classify(litellm.BadRequestError("prompt is too long: 210000 tokens > 200000 maximum", "m",
                                                "anthropic"), "anthropic/m")
    assert (overloaded.transient, unavailable.transient, bad_json_request.transient) == (True, True, False)
    assert too_long.context_too_long and not too_long.transient
    later = email.utils.format_datetime(email.utils.localtime()).replace("+0000", "GMT")
    assert parse_retry_after(httpx.Headers({"retry-after-ms": "1500", "retry-after": "9"})) == 1.5
    assert parse_retry_after(httpx.Headers({"retry-after": "7"})) == 7.0
    assert 0 <= parse_retry_after(httpx.Headers({"retry-after": later})) < 2
    assert parse_retry_after(httpx.Headers({"retry-after": "soon"})) is None


def test_a_bad_key_ends_a_run_at_once_with_the_reason(server, tmp_path):
    server.faults.append("401")
    trace = run_agent(tmp_path / "run", server)
    assert trace.status == "failed" and len(server.requests) == 1 and trace.steps == []
    assert trace.end_reason.startswith(f"llm error: {MAIN}: authentication failed (401: Incorrect API key provided)")


def test_a_missing_key_names_the_variable_to_set():
    registry = llm_registry()
    for model, variable in [("openai/gpt-4o", "set OPENAI_API_KEY"), ("anthropic/claude-3-5-haiku-latest",
                                                                     "set ANTHROPIC_API_KEY"),
                            ("gemini/gemini-1.5-flash", "set GEMINI_API_KEY or GOOGLE_API_KEY")]:
        with pytest.raises(MlabError, match=variable) as info:
            build_backend(registry, model)
        assert "\n" not in str(info.value)
    # a name litellm cannot place is refused before anything runs, not sent somewhere at the first call
    with pytest.raises(MlabError, match=r"no LLM backend for 'gpt4o' \(litellm knows no provider for 'gpt4o'.*"
                                        r"NAME one of: (.*, )?human, litellm, replay, scripted"):
        build_backend(registry, "gpt4o")
    # a local server needs no key, and neither does ollama (its default base is localhost)
    assert build_backend(registry, "openai/local", api_base="http://127.0.0.1:9/v1").model == "openai/local"
    assert build_backend(registry, "ollama/llama3").model == "ollama/llama3"


# ---- whole runs -----------------------------------------------------------------------------------
class Observer:
    def __init__(self):
        self.events = []

    @hookimpl
    def llm_call_finished(self, event):
        self.events.append(event)


def test_run_through_faults_with_roles_accounting_and_hook(server, tmp_path):
    observer = Observer()
    registry = llm_registry()
    registry.pm.register(observer)
    server.faults.extend(["500", "drop"])  # the first call needs two retries
    try:
        trace = run_agent(tmp_path / "run", server, fast_llm=FAST, edit_llm=EDIT)
    finally:
        registry.pm.unregister(observer)
    assert (trace.status, trace.end_reason, trace.final_score) == ("finished", "final answer", 1.0)
    assert [s.action.name for s in trace.steps] == [p["action"] for p in PLAN]
    assert trace.steps[1].observation == UNDERSTOOD
    assert (tmp_path / "run" / "workspace" / "step.py").read_text() == EDITED_SCRIPT

    # each role went to the model it was given, and only to it
    by_kind = {}
    for request in server.requests:
        by_kind.setdefault(prompt_kind(request.body), set()).add(request.body["model"])
    assert by_kind == {"main": {"gpt-4o-mini"}, "fast": {"gpt-4o"}, "edit": {"gpt-3.5-turbo"}}
    calls = read_call_log(tmp_path / "run" / "llm_calls.jsonl")
    assert [(c["step"], c["role"], c["model"]) for c in calls] == [
        (1, "main", f"litellm:{MAIN}"), (2, "main", f"litellm:{MAIN}"), (2, "fast", f"litellm:{FAST}"),
        (3, "main", f"litellm:{MAIN}"), (3, "edit", f"litellm:{EDIT}"), (4, "main", f"litellm:{MAIN}"),
        (5, "main", f"litellm:{MAIN}")]

    # every retry is in the log and in the hook's payload
    assert [len(c["retries"]) for c in calls] == [2, 0, 0, 0, 0, 0, 0]
    assert [(e.role, e.retries, e.cached, e.step) for e in observer.events][:2] == [
        ("main", 2, False, 1), ("main", 0, False, 2)]

    # accounting: the run's totals are the sums of its logged calls, and costs are known for these models
    assert all(c["cost_usd"] > 0 and c["prompt_tokens"] > 0 and c["completion_tokens"] > 0 for c in calls)
    assert trace.usage.calls == len(calls) == 7
    assert trace.usage.prompt_tokens == sum(c["prompt_tokens"] for c in calls)
    assert trace.usage.completion_tokens == sum(c["completion_tokens"] for c in calls)
    assert trace.usage.cost_usd == pytest.approx(sum(c["cost_usd"] for c in calls), rel=1e-12)
    assert sum(e.prompt_tokens + e.completion_tokens for e in observer.events) == trace.usage.total_tokens
    assert trace.steps[-1].usage == trace.usage


def test_unset_fast_and_edit_roles_use_the_main_model(server, tmp_path):
    trace = run_agent(tmp_path / "run", server, llm="openai/gpt-4o")
    assert trace.end_reason == "final answer"
    assert {r.body["model"] for r in server.requests} == {"gpt-4o"}
    assert {prompt_kind(r.body) for r in server.requests} == {"main", "fast", "edit"}


def test_roles_on_different_backends_never_cross(server, tmp_path):
    """Main and edit from a script, fast from the server: the server sees the fast call and nothing else."""
    script = tmp_path / "main.jsonl"
    lines = [json.dumps(p) for p in PLAN[:2]] + [json.dumps(PLAN[2]), "```python\n" + EDITED_SCRIPT + "```"]
    lines += [json.dumps(p) for p in PLAN[3:]]
    script.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    trace = run_agent(tmp_path / "run", server, llm=f"scripted:{script}", fast_llm=FAST)
    assert trace.end_reason == "final answer" and trace.steps[1].observation == UNDERSTOOD
    assert [(prompt_kind(r.body), r.body["model"]) for r in server.requests] == [("fast", "gpt-4o")]
    roles = [(c["role"], c["model"]) for c in read_call_log(tmp_path / "run" / "llm_calls.jsonl")]
    assert ("edit", f"scripted:{script}") in roles and ("fast", f"litellm:{FAST}") in roles


def test_a_too_long_prompt_inside_an_action_is_an_env_error(server, tmp_path):
    server.faults.extend(["ok", "ok", "context"])  # the third request is Understand File's
    trace = run_agent(tmp_path / "run", server)
    assert trace.end_reason == "final answer"
    assert trace.steps[1].is_error and trace.steps[1].observation.startswith(
        "EnvError: the text is too long for the model:")
    assert len(server.requests) == 7
    # the replay fails that call the same way, so the trace is the same
    replayed = run_agent(tmp_path / "replay", None, llm=f"replay:{tmp_path / 'run'}")
    assert steps_of(replayed) == steps_of(trace)


def test_budgets_end_the_run_cleanly(server, tmp_path):
    trace = run_agent(tmp_path / "tokens", server, max_tokens=150)
    calls = read_call_log(tmp_path / "tokens" / "llm_calls.jsonl")
    assert trace.status == "finished" and trace.end_reason.startswith("budget reached: ")
    assert "tokens used, limit 150 (--token-limit)" in trace.end_reason
    assert usage_of_log(calls) == trace.usage and trace.usage.total_tokens >= 150
    assert usage_of_log(calls[:-1]).total_tokens < 150  # it stopped at the first call after the limit
    assert trace.final_score is not None or trace.final_score_error  # the run was still scored

    requests_before = len(server.requests)
    trace = run_agent(tmp_path / "cost", server, max_cost=0.00002)
    assert trace.end_reason.startswith("budget reached: $") and "(--cost-limit)" in trace.end_reason
    assert len(server.requests) - requests_before < 7

    trace = run_agent(tmp_path / "unpriced", server, llm="openai/no-such-priced-model", max_cost=1.0)
    assert trace.end_reason == ("budget reached: the price of litellm:openai/no-such-priced-model is unknown, "
                                "so --cost-limit 1 cannot be enforced ($0.0000 known so far; --price IN,OUT gives "
                                "it one)")
    assert len(read_call_log(tmp_path / "unpriced" / "llm_calls.jsonl")) == 1


def test_a_recorded_run_replays_to_the_same_trace_without_a_model(server, tmp_path):
    recorded = run_agent(tmp_path / "rec", server, fast_llm=FAST, edit_llm=EDIT)
    sent = len(server.requests)
    replayed = run_agent(tmp_path / "replay", None, llm=f"replay:{tmp_path / 'rec'}")
    assert replayed.end_reason == "final answer" and len(server.requests) == sent
    assert steps_of(replayed) == steps_of(recorded)
    assert replayed.usage.total_tokens == recorded.usage.total_tokens
    assert replayed.final_score == recorded.final_score

    # roles split: the fast role calls the live model again, the rest is replayed
    mixed = run_agent(tmp_path / "mixed", server, llm=f"replay:{tmp_path / 'rec' / 'llm_calls.jsonl'}",
                      fast_llm=FAST)
    assert steps_of(mixed) == steps_of(recorded)
    assert [prompt_kind(r.body) for r in server.requests[sent:]] == ["fast"]


def test_replay_fails_loudly_when_exhausted_or_diverged(server, tmp_path):
    run_agent(tmp_path / "rec", server)
    calls = (tmp_path / "rec" / "llm_calls.jsonl").read_text().splitlines()
    short = tmp_path / "short.jsonl"
    short.write_text("\n".join(calls[:3]) + "\n")
    trace = run_agent(tmp_path / "exhausted", None, llm=f"replay:{short}")
    assert trace.status == "failed"
    assert trace.end_reason == f"llm error: replay of {short} is exhausted: the run asked for call 4 but the " \
                               "recording has 3"

    first = json.loads(calls[0])
    first["messages"][-1]["content"] = first["messages"][-1]["content"].replace("Step 1 of", "Step 9 of")
    changed = tmp_path / "changed.jsonl"
    changed.write_text("\n".join([json.dumps(first)] + calls[1:]) + "\n")
    trace = run_agent(tmp_path / "diverged", None, llm=f"replay:{changed}")
    assert trace.status == "failed" and "diverged at call 1 (role main): message 2 differs" in trace.end_reason

    with pytest.raises(MlabError, match="has no llm_calls.jsonl"):
        run_agent(tmp_path / "x", None, llm=f"replay:{tmp_path}")


def test_the_cache_makes_a_rerun_issue_no_http_requests(server, tmp_path):
    cache = tmp_path / "cache"
    first = run_agent(tmp_path / "first", server, fast_llm=FAST, llm_cache=str(cache))
    sent = len(server.requests)
    assert sent == 7
    second = run_agent(tmp_path / "second", server, fast_llm=FAST, llm_cache=str(cache))
    assert len(server.requests) == sent  # zero HTTP requests
    assert steps_of(second) == steps_of(first) and second.usage == first.usage
    calls = read_call_log(tmp_path / "second" / "llm_calls.jsonl")
    assert len(calls) == 7 and all(c["cached"] and c["attempts"] == 0 for c in calls)
