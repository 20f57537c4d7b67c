"""The core's LLM client, with in-process backends: retry policy, budgets, cache, call log, roles."""
from __future__ import annotations

import json
import random

import pytest

from mlab.core import LLM, BudgetExceeded, Completion, LLMError
from mlab.core.errors import MlabError
from mlab.core.llm.client import LLMClient, read_call_log, usage_of_log
from mlab.core.llm.retry import RetryPolicy, call_with_retries
from mlab.core.llm.roles import build_backend, build_roles
from mlab.core.plugins.registry import Registry


class Flaky(LLM):
    """Fails with the given errors first, then answers 'answer N'."""

    name = "flaky"

    def __init__(self, model="m", failures=(), tokens=(10, 5), cost=0.01, **options):
        super().__init__(model, **options)
        self.failures = list(failures)
        self.tokens = tokens
        self.cost = cost
        self.calls = 0

    def complete(self, messages, **params):
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return Completion(text=f"answer {self.calls}", prompt_tokens=self.tokens[0],
                          completion_tokens=self.tokens[1], cost_usd=self.cost)


def transient(message="503 busy", retry_after=None):
    error = LLMError(message, transient=True)
    if retry_after is not None:
        error.retry_after = retry_after
    return error


class Sleeps(list):
    def __call__(self, seconds):
        self.append(seconds)


def client(backend, log_dir, sleeps=None, **kwargs):
    log_dir.mkdir(parents=True, exist_ok=True)
    kwargs.setdefault("retry", RetryPolicy(max_attempts=4, initial_s=1.0, max_wait_s=8.0, jitter=0.5))
    return LLMClient({"main": backend, "fast": backend, "edit": backend}, log_path=log_dir / "llm_calls.jsonl",
                     sleep=sleeps if sleeps is not None else Sleeps(), **kwargs)


def test_transient_failures_are_retried_with_exponential_backoff_and_logged(tmp_path):
    backend = Flaky(failures=[transient("500 a"), transient("timed out"), transient("connection dropped")])
    sleeps = Sleeps()
    llm = client(backend, tmp_path, sleeps)
    assert llm.complete("hi").text == "answer 4"
    assert backend.calls == 4
    # 1 s, 2 s, 4 s, each stretched by up to +50 % jitter
    assert [1.0 <= sleeps[0] <= 1.5, 2.0 <= sleeps[1] <= 3.0, 4.0 <= sleeps[2] <= 6.0] == [True] * 3
    (entry,) = read_call_log(tmp_path / "llm_calls.jsonl")
    assert entry["attempts"] == 4 and entry["error"] is None and entry["completion"] == "answer 4"
    assert [r["error"] for r in entry["retries"]] == ["500 a", "timed out", "connection dropped"]
    assert [r["wait_s"] for r in entry["retries"]] == [round(s, 3) for s in sleeps]


def test_retry_after_is_honoured_even_above_the_backoff_cap(tmp_path):
    sleeps = Sleeps()
    llm = client(Flaky(failures=[transient("429", retry_after=30)]), tmp_path, sleeps)
    llm.complete("hi")
    assert sleeps == [30]


def test_permanent_failure_is_not_retried(tmp_path):
    backend = Flaky(failures=[LLMError("401 bad key")])
    sleeps = Sleeps()
    llm = client(backend, tmp_path, sleeps)
    with pytest.raises(LLMError, match="401 bad key"):
        llm.complete("hi")
    assert backend.calls == 1 and sleeps == []
    (entry,) = read_call_log(tmp_path / "llm_calls.jsonl")
    assert entry["error"] == "401 bad key" and entry["attempts"] == 1 and entry["retries"] == []


def test_retries_are_bounded_in_attempts_and_the_final_error_says_so(tmp_path):
    backend = Flaky(failures=[transient() for _ in range(10)])
    llm = client(backend, tmp_path)
    with pytest.raises(LLMError, match=r"gave up after 4 tries") as info:
        llm.complete("hi")
    assert info.value.transient and backend.calls == 4
    (entry,) = read_call_log(tmp_path / "llm_calls.jsonl")
    assert len(entry["retries"]) == 3 and "gave up after 4 tries" in entry["error"]


def test_retries_are_bounded_in_total_wait(tmp_path):
    policy = RetryPolicy(max_attempts=50, max_total_s=10, initial_s=1.0, max_wait_s=8.0, jitter=0.0)
    backend = Flaky(failures=[transient() for _ in range(50)])
    sleeps = Sleeps()
    with pytest.raises(LLMError, match="would pass the 10 s retry limit"):
        client(backend, tmp_path, sleeps, retry=policy).complete("hi")
    # 1 + 2 + 4 = 7 s waited (fake sleeps take no time); the next 8 s would pass 10 s
    assert sleeps == [1.0, 2.0, 4.0] and backend.calls == 4


def test_a_retry_after_beyond_the_total_wait_fails_at_once(tmp_path):
    policy = RetryPolicy(max_total_s=60)
    sleeps = Sleeps()
    with pytest.raises(LLMError, match="next wait of 3600.0 s"):
        client(Flaky(failures=[transient("429", retry_after=3600)]), tmp_path, sleeps, retry=policy).complete("x")
    assert sleeps == []


def test_real_sleeps_are_used_by_default():
    calls = []

    def fn():
        calls.append(1)
        if len(calls) < 3:
            raise transient()
        return "ok"

    result, retries = call_with_retries(fn, RetryPolicy(initial_s=0.01, max_wait_s=0.02), rng=random.Random(1))
    assert result == "ok" and len(retries) == 2 and len(calls) == 3


def test_context_too_long_is_not_retried_and_keeps_its_flag(tmp_path):
    llm = client(Flaky(failures=[LLMError("too long", context_too_long=True)]), tmp_path)
    with pytest.raises(LLMError) as info:
        llm.complete("x" * 100)
    assert info.value.context_too_long
    (entry,) = read_call_log(tmp_path / "llm_calls.jsonl")
    assert entry["context_too_long"] is True


def test_token_budget_stops_before_the_next_call(tmp_path):
    backend = Flaky(tokens=(10, 5))
    llm = client(backend, tmp_path, max_tokens=40)
    for _ in range(3):
        llm.complete("hi")  # 15, 30, 45 tokens: the third call crosses the limit
    with pytest.raises(BudgetExceeded, match="45 tokens used, limit 40"):
        llm.complete("hi")
    assert backend.calls == 3


def test_cost_budget_and_unknown_prices(tmp_path):
    llm = client(Flaky(cost=0.25), tmp_path, max_cost=0.5)
    llm.complete("a")
    llm.complete("b")
    with pytest.raises(BudgetExceeded, match=r"\$0.5000 spent, limit \$0.5"):
        llm.complete("c")
    unpriced = client(Flaky(cost=None), tmp_path / "u", max_cost=1)
    unpriced.complete("a")
    with pytest.raises(BudgetExceeded, match="price of flaky:m is unknown"):
        unpriced.complete("b")
    resumed = client(Flaky(cost=None), tmp_path / "u", max_cost=1)  # a resumed run remembers it from its log
    with pytest.raises(BudgetExceeded, match="price of flaky:m is unknown"):
        resumed.check_budget()


def test_an_interrupted_call_is_logged_as_such(tmp_path):
    llm = client(Flaky(failures=[KeyboardInterrupt()]), tmp_path)
    with pytest.raises(KeyboardInterrupt):
        llm.complete("hi")
    (entry,) = read_call_log(tmp_path / "llm_calls.jsonl")
    assert entry["error"] == "KeyboardInterrupt: " and entry["completion"] is None


def test_usage_equals_the_sum_of_the_log_and_survives_a_restart(tmp_path):
    llm = client(Flaky(failures=[transient()], tokens=(7, 3), cost=0.002), tmp_path)
    for i in range(3):
        llm.step_index = i + 1
        llm.complete(f"q{i}")
    entries = read_call_log(tmp_path / "llm_calls.jsonl")
    assert [e["step"] for e in entries] == [1, 2, 3]
    assert usage_of_log(entries) == llm.usage
    assert llm.usage.calls == 3 and llm.usage.total_tokens == 30 and llm.usage.cost_usd == pytest.approx(0.006)
    again = client(Flaky(), tmp_path)  # a resumed run keeps counting from its log
    assert again.usage == llm.usage


def test_the_call_log_stays_open_between_calls_and_is_closed_by_close(tmp_path):
    """One descriptor for the call log (a call costs a write, not an open and a close); close() releases it and a
    later call opens it again, appending."""
    import os

    def open_logs() -> int:
        return sum(os.path.realpath(f"/proc/self/fd/{fd}") == str(tmp_path / "llm_calls.jsonl")
                   for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}"))

    llm = client(Flaky(), tmp_path)
    for i in range(3):
        llm.complete(f"q{i}")
        assert open_logs() == 1
    llm.close()
    assert open_logs() == 0
    llm.complete("after close")
    llm.close()
    assert [e["messages"][0]["content"] for e in read_call_log(tmp_path / "llm_calls.jsonl")] == \
        ["q0", "q1", "q2", "after close"]


def test_cache_serves_the_nth_identical_request_with_the_nth_answer(tmp_path):
    backend = Flaky()
    first = client(backend, tmp_path / "a", cache_dir=tmp_path / "cache")
    answers = [first.complete("same").text, first.complete("same").text, first.complete("other").text]
    assert answers == ["answer 1", "answer 2", "answer 3"] and backend.calls == 3
    fresh = Flaky()
    second = client(fresh, tmp_path / "b", cache_dir=tmp_path / "cache")
    assert [second.complete("same").text, second.complete("same").text, second.complete("other").text] == answers
    assert fresh.calls == 0
    entries = read_call_log(tmp_path / "b" / "llm_calls.jsonl")
    assert [e["cached"] for e in entries] == [True] * 3 and [e["attempts"] for e in entries] == [0] * 3
    assert second.usage == first.usage  # cached calls count as recorded, so a rerun ends the same way
    assert second.complete("same").text == "answer 1" and fresh.calls == 1  # a third ask is new: the API answers


def test_cache_key_covers_model_and_parameters(tmp_path):
    cache = tmp_path / "cache"
    client(Flaky(model="m1"), tmp_path / "a", cache_dir=cache).complete("q", temperature=0)
    other_model, other_params = Flaky(model="m2"), Flaky(model="m1")
    client(other_model, tmp_path / "b", cache_dir=cache).complete("q", temperature=0)
    client(other_params, tmp_path / "b", cache_dir=cache).complete("q", temperature=1)
    assert other_model.calls == 1 and other_params.calls == 1


def test_per_call_parameters_cannot_switch_the_model(tmp_path):
    llm = client(Flaky(), tmp_path)
    for name in ("model", "api_base", "api_key", "fallbacks"):
        with pytest.raises(ValueError, match="cannot be passed per call"):
            llm.complete("hi", **{name: "x"})


def test_observer_gets_retries_cached_and_step(tmp_path):
    events = []
    llm = client(Flaky(failures=[transient(), transient()]), tmp_path, on_call=events.append,
                 cache_dir=tmp_path / "cache")
    llm.step_index = 4
    llm.complete("q")
    again = client(Flaky(), tmp_path / "b", on_call=events.append, cache_dir=tmp_path / "cache")
    again.complete("q")
    assert [(e.retries, e.cached, e.step, e.prompt_tokens, e.error) for e in events] == [
        (2, False, 4, 10, None), (0, True, None, 10, None)]


# ---- roles ---------------------------------------------------------------------------------------
class Named(LLM):
    def complete(self, messages, **params):
        return Completion(text=f"{self.name}:{self.model}")


def _registry(*classes):
    registry = Registry(plugins=[])
    for cls in classes:
        registry.items["llms"][cls.name] = cls
    return registry


def test_roles_get_exactly_the_model_they_were_given():
    vendor_a = type("VendorA", (Named,), {"name": "a", "handles_unprefixed": True})
    vendor_b = type("VendorB", (Named,), {"name": "b"})
    registry = _registry(vendor_a, vendor_b)
    roles = build_roles(registry, "a:big", "b:small", "openai/edit-model")
    assert {role: (b.name, b.model) for role, b in roles.items()} == {
        "main": ("a", "big"), "fast": ("b", "small"), "edit": ("a", "openai/edit-model")}
    defaulted = build_roles(registry, "b:only", None, None)
    assert {role: (b.name, b.model) for role, b in defaulted.items()} == {
        "main": ("b", "only"), "fast": ("b", "only"), "edit": ("b", "only")}
    assert defaulted["main"] is defaulted["fast"] is defaulted["edit"]
    assert defaulted["main"].roles == ("main", "fast", "edit")
    shared = build_roles(registry, "a:x", "b:y", "b:y")
    assert shared["fast"] is shared["edit"] and shared["fast"].roles == ("fast", "edit")
    assert shared["main"].roles == ("main",)


def test_the_api_base_goes_to_the_roles_of_the_main_models_provider_only():
    litellm_like = type("L", (Named,), {"name": "lite", "handles_unprefixed": True})
    other = type("O", (Named,), {"name": "other"})
    registry = _registry(litellm_like, other)
    roles = build_roles(registry, "openai/local", "lite:openai/small", "anthropic/claude", api_base="http://h/v1")
    assert {r: b.options.get("api_base") for r, b in roles.items()} == {
        "main": "http://h/v1", "fast": "http://h/v1", "edit": None}
    roles = build_roles(registry, "openai/x", "y", "lite:z", api_base="http://h/v1")
    assert {r: b.options.get("api_base") for r, b in roles.items()} == {
        "main": "http://h/v1", "fast": None, "edit": None}
    # a main model with no provider (a replay, say) leaves the server to the other roles
    roles = build_roles(registry, "other:x", "openai/y", None, api_base="http://h/v1")
    assert {r: b.options.get("api_base") for r, b in roles.items()} == {
        "main": "http://h/v1", "fast": "http://h/v1", "edit": "http://h/v1"}


def test_an_unprefixed_model_never_goes_to_a_guessed_backend():
    first = type("First", (Named,), {"name": "first", "handles_unprefixed": True})
    second = type("Second", (Named,), {"name": "second", "handles_unprefixed": True})
    with pytest.raises(MlabError, match="several backends take unprefixed model names; say which: "
                                        "first:gpt-4o, second:gpt-4o"):
        build_backend(_registry(first, second), "gpt-4o")
    with pytest.raises(MlabError, match="no LLM backend for 'openai/gpt-4o'.*install the litellm backend"):
        build_backend(_registry(type("Only", (Named,), {"name": "only"})), "openai/gpt-4o")


def test_retry_policy_settings_are_checked():
    assert RetryPolicy.from_dict({"max_attempts": 3}).max_attempts == 3
    with pytest.raises(ValueError, match="unknown retry settings"):
        RetryPolicy.from_dict({"attempts": 3})
    assert json.loads(json.dumps(RetryPolicy.from_dict({}).__dict__))["max_attempts"] == 8
