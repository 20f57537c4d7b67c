"""One model vocabulary with tools (issue 41, item 1): messages carry tool calls, tool results and image parts, a
completion its tool calls and finish reason; litellm passes tools to a real OpenAI-style server on 127.0.0.1 and
brings the model's tool calls back; scripted and replay backends record and replay them; the cache keys on tools;
a text-only backend keeps working and a call with tools to it is one clear line."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from mlab.core import LLM, Completion, ContentPart, Message, ToolCall
from mlab.core.llm.cache import request_key
from mlab.core.llm.client import LLMClient, read_call_log
from mlab.core.llm.roles import build_backend
from tests.fixtures.llm_agent import llm_registry
from tests.fixtures.llm_server import FakeLLMServer

WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


def _client(backend: LLM, tmp_path: Path, **kwargs: Any) -> LLMClient:
    return LLMClient({"main": backend, "fast": backend, "edit": backend}, log_path=tmp_path / "llm_calls.jsonl",
                     **kwargs)


def _conversation(call: ToolCall) -> list[Message]:
    return [Message(role="user", content="Weather in Paris?",
                    parts=[ContentPart(type="text", text="Weather in Paris?"),
                           ContentPart(type="image", image_url="data:image/png;base64,iVBORw0KGgo=")]),
            Message(role="assistant", tool_calls=[call]),
            Message(role="tool", tool_call_id=call.id, content='{"sky": "clear"}')]


def test_litellm_sends_tools_and_tool_history_and_returns_the_models_tool_calls(tmp_path):
    answers = iter([{"content": None, "tool_calls": [
                        {"id": "call_a", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
                        {"id": "call_b", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}}]},
                    "It is clear in Paris."])
    with FakeLLMServer(lambda body: next(answers)) as server:
        backend = build_backend(llm_registry(), "openai/gpt-4o-mini", api_base=server.base_url, timeout=10)
        llm = _client(backend, tmp_path)
        first = llm.complete([Message(role="user", content="Weather in Paris and Lyon?")], tools=WEATHER,
                             tool_choice="auto")
        assert first.finish_reason == "tool_calls"
        assert [(c.id, c.name, json.loads(c.arguments)) for c in first.tool_calls] == [
            ("call_a", "get_weather", {"city": "Paris"}), ("call_b", "get_weather", {"city": "Lyon"})]
        second = llm.complete(_conversation(first.tool_calls[0]), tools=WEATHER)
        assert second.text == "It is clear in Paris." and second.tool_calls == []
    sent = [r.body for r in server.requests]
    assert sent[0]["tools"] == WEATHER and sent[0]["tool_choice"] == "auto"
    history = sent[1]["messages"]
    assert history[0]["content"][1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    assert history[1]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert history[2] == {"role": "tool", "tool_call_id": "call_a", "content": '{"sky": "clear"}'}
    logged = read_call_log(tmp_path / "llm_calls.jsonl")
    assert [c["name"] for c in logged[0]["tool_calls"]] == ["get_weather"] * 2
    assert logged[0]["finish_reason"] == "tool_calls" and logged[0]["params"]["tools"] == WEATHER
    assert logged[1]["messages"][2] == {"role": "tool", "content": '{"sky": "clear"}', "tool_call_id": "call_a"}


def test_scripted_tool_calls_replay_from_the_call_log(tmp_path):
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}) + "\n"
                      + json.dumps("Clear.") + "\n")
    recorded = _client(build_backend(llm_registry(), f"scripted:{script}"), tmp_path / "a")
    (tmp_path / "a").mkdir()
    one = recorded.complete([Message(role="user", content="Weather?")], tools=WEATHER)
    assert one.tool_calls == [ToolCall(id="call_0_0", name="get_weather", arguments='{"city": "Paris"}')]
    assert one.finish_reason == "tool_calls"
    two = recorded.complete([Message(role="user", content="Weather?"),
                             Message(role="assistant", tool_calls=one.tool_calls),
                             Message(role="tool", tool_call_id="call_0_0", content="clear")], tools=WEATHER)
    assert two.text == "Clear." and two.finish_reason == "stop"
    (tmp_path / "b").mkdir()
    replay = _client(build_backend(llm_registry(), f"replay:{tmp_path / 'a'}"), tmp_path / "b")
    again = replay.complete([Message(role="user", content="Weather?")], tools=WEATHER)
    assert again.tool_calls == one.tool_calls and again.finish_reason == "tool_calls"


def test_a_text_only_script_still_works_and_text_messages_log_as_before(tmp_path):
    script = tmp_path / "script.jsonl"
    script.write_text('"plain"\n{"completion": "two", "prompt_tokens": 3}\n')
    llm = _client(build_backend(llm_registry(), f"scripted:{script}"), tmp_path)
    assert llm.complete("hi").text == "plain" and llm.complete("again").prompt_tokens == 3
    assert read_call_log(tmp_path / "llm_calls.jsonl")[0]["messages"] == [{"role": "user", "content": "hi"}]


class TextOnly(LLM):
    """A third-party backend written before tools: it reads role and content only."""

    name = "text-only"

    def complete(self, messages: list[Message], **params: Any) -> Completion:
        assert all(set(m.model_dump(exclude_defaults=True)) <= {"role", "content"} for m in messages)
        assert all(m.role in ("system", "user", "assistant") for m in messages)
        return Completion(text=" | ".join(m.content for m in messages))


def test_a_text_only_backend_gets_text_and_refuses_tools_in_one_line(tmp_path):
    llm = _client(TextOnly(), tmp_path)
    call = ToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris"}')
    answer = llm.complete(_conversation(call))
    assert "[an image]" in answer.text and '"get_weather"' in answer.text
    assert "[result of tool call call_1]" in answer.text
    with pytest.raises(ValueError) as refused:
        llm.complete("Weather?", tools=WEATHER)
    assert "takes no tools" in str(refused.value) and "\n" not in str(refused.value)


def test_the_cache_keys_on_tools_and_on_tool_history():
    plain = [Message(role="user", content="Weather?")]
    call = ToolCall(id="c", name="get_weather", arguments="{}")
    keys = {request_key({"name": "x"}, plain, {}), request_key({"name": "x"}, plain, {"tools": WEATHER}),
            request_key({"name": "x"}, [*plain, Message(role="assistant", tool_calls=[call])], {}),
            request_key({"name": "x"}, [*plain, Message(role="tool", tool_call_id="c", content="")], {})}
    assert len(keys) == 4
    # a text conversation keys as it did before tools existed (caches made then still answer)
    import hashlib

    old = hashlib.sha256(json.dumps({"backend": {"name": "x"}, "messages": [["user", "Weather?"]], "params": {}},
                                    sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    assert request_key({"name": "x"}, plain, {}) == old
