"""Trajectories with tools (issue 41, item 5): a program agent's model calls a tool, the program sends the tool's
result back and the model answers. `mlab export --format chat-jsonl` writes each call in OpenAI's chat fine-tuning
shape (assistant tool_calls, tool messages with their tool_call_id, the tools beside the messages), checked by a
JSON Schema of that line with the jsonschema package; `--format inspect` carries them as Inspect's own tool calls,
read back by inspect_ai's reader."""
from __future__ import annotations

import json
import os
import textwrap
import time
from pathlib import Path

import pytest

from mlab.core.llm.client import read_call_log
from tests.fixtures.agents_fixtures import fixture_registry
from tests.fixtures.cli import mlab, mlab_in_process
from tests.fixtures.lazy import lazy
from tests.fixtures.llm_server import FakeLLMServer
from tests.fixtures.sandboxes import make_sandbox
from tests.test_export_untrusted import write_run

jsonschema = lazy("jsonschema")

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}

# The user's agent: offers get_weather with the openai client, runs the two calls the model asks for, sends both
# results back and prints the answer; then the starter writes submission.csv, so the run has a score.
PROGRAM = textwrap.dedent(f'''
    import json, os, subprocess, sys
    import openai

    oa = openai.OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
    tools = [{WEATHER!r}]
    history = [{{"role": "system", "content": "Answer with the tools."}},
               {{"role": "user", "content": "Weather in Paris and Rome?"}}]
    m = oa.chat.completions.create(model="any", messages=history, tools=tools, tool_choice="auto").choices[0].message
    history.append({{"role": "assistant", "content": m.content, "tool_calls": [
        {{"id": c.id, "type": "function", "function": {{"name": c.function.name, "arguments": c.function.arguments}}}}
        for c in m.tool_calls]}})
    for c in m.tool_calls:
        history.append({{"role": "tool", "tool_call_id": c.id,
                         "content": "clear in " + json.loads(c.function.arguments)["city"]}})
    print("FINAL", oa.chat.completions.create(model="any", messages=history, tools=tools).choices[0].message.content)
    subprocess.run([sys.executable, "train.py"], check=True)
''')

CALLS = [("call_paris", "Paris"), ("call_rome", "Rome")]
IMAGE = "data:image/png;base64,iVBORw0KGgo="


def model(body: dict) -> str | dict:
    """Asks for the weather in both cities until it has the tools' results, then says what they were."""
    results = [m for m in body["messages"] if m["role"] == "tool"]
    if results:
        return "It is " + " and ".join(m["content"] for m in results) + "."
    return {"content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}
        for i, city in CALLS]}


# OpenAI's chat fine-tuning line (platform.openai.com/docs/guides/fine-tuning, and the FineTuneChatRequestInput of
# its OpenAPI spec): messages, with the tools the model was offered and parallel_tool_calls beside them. Other
# top-level fields (the run's reward) are left to the reader.
TEXT_PARTS = {"type": "array", "items": {"type": "object", "required": ["type", "text"], "additionalProperties": False,
                                         "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}}
TOOL_CALL = {"type": "object", "required": ["id", "type", "function"], "additionalProperties": False, "properties": {
    "id": {"type": "string", "minLength": 1}, "type": {"const": "function"},
    "function": {"type": "object", "required": ["name", "arguments"], "additionalProperties": False,
                 "properties": {"name": {"type": "string", "minLength": 1}, "arguments": {"type": "string"}}}}}
MESSAGE = {"oneOf": [
    {"type": "object", "required": ["role", "content"], "additionalProperties": False, "properties": {
        "role": {"enum": ["system", "user"]}, "content": {"anyOf": [{"type": "string"}, TEXT_PARTS]},
        "name": {"type": "string"}}},
    {"type": "object", "required": ["role"], "additionalProperties": False,
     "anyOf": [{"required": ["content"], "properties": {"content": {"type": "string"}}}, {"required": ["tool_calls"]}],
     "properties": {
         "role": {"const": "assistant"}, "content": {"anyOf": [{"type": "string"}, {"type": "null"}, TEXT_PARTS]},
         "tool_calls": {"type": "array", "minItems": 1, "items": TOOL_CALL}, "weight": {"enum": [0, 1]},
         "name": {"type": "string"}, "refusal": {"type": ["string", "null"]}}},
    {"type": "object", "required": ["role", "tool_call_id", "content"], "additionalProperties": False, "properties": {
        "role": {"const": "tool"}, "tool_call_id": {"type": "string", "minLength": 1},
        "content": {"anyOf": [{"type": "string"}, TEXT_PARTS]}}},
]}
TOOL = {"type": "object", "required": ["type", "function"], "additionalProperties": False, "properties": {
    "type": {"const": "function"},
    "function": {"type": "object", "required": ["name"], "additionalProperties": False, "properties": {
        "name": {"type": "string", "pattern": "^[a-zA-Z0-9_-]{1,64}$"}, "description": {"type": "string"},
        "parameters": {"type": "object"}, "strict": {"type": ["boolean", "null"]}}}}}
FINE_TUNING_LINE = {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                    "required": ["messages"], "properties": {
                        "messages": {"type": "array", "minItems": 1, "items": MESSAGE},
                        "tools": {"type": "array", "items": TOOL}, "parallel_tool_calls": {"type": "boolean"}}}


def check_fine_tuning_line(record: dict) -> None:
    """The schema, and what it cannot say: each tool result answers a call made before it."""
    jsonschema.Draft202012Validator.check_schema(FINE_TUNING_LINE)
    jsonschema.validate(record, FINE_TUNING_LINE, cls=jsonschema.Draft202012Validator)
    asked: set[str] = set()
    for message in record["messages"]:
        asked |= {c["id"] for c in message.get("tool_calls") or []}
        if message["role"] == "tool":
            assert message["tool_call_id"] in asked, record["messages"]
    for message in record["messages"]:
        for call in message.get("tool_calls") or []:
            assert isinstance(json.loads(call["function"]["arguments"]), dict)


@pytest.fixture(scope="module")
def tool_run(tmp_path_factory) -> tuple[Path, Path]:
    """A real run whose model called get_weather twice at once; the run folder and the MLAB_HOME it ran with."""
    make_sandbox("local")
    root = tmp_path_factory.mktemp("tool-run")
    (root / "weather.py").write_text(PROGRAM)
    with FakeLLMServer(model) as server:
        done = mlab("run", "--task", "lite/wine", "--agent", "command", "--agent-option", "command=python weather.py",
                    "--llm", "openai/gpt-4o-mini", "--llm-api-base", server.base_url, "--sandbox", "local",
                    "--max-steps", "10", "--run-dir", root / "run", cwd=root, env={"OPENAI_API_KEY": "sk-user"})
    assert done.returncode == 0, done.stderr + done.stdout
    assert len(server.requests) == 2
    return root / "run", Path(os.environ["MLAB_HOME"])


@pytest.mark.slow  # over 2 s on two cores
def test_chat_jsonl_writes_tool_calls_and_results_in_openais_fine_tuning_shape(tool_run, tmp_path):
    run_dir, home = tool_run
    trace = json.loads((run_dir / "trace.json").read_text())
    assert trace["final_score"] is not None
    calls = read_call_log(run_dir / "llm_calls.jsonl")
    done = mlab_in_process("export", "--format", "chat-jsonl", run_dir, "--out", tmp_path / "chat", home=home)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (tmp_path / "chat" / "chat.jsonl").read_text().splitlines()]
    assert len(records) == len(calls) == 2
    for record in records:
        check_fine_tuning_line(record)
        assert record["tools"] == [WEATHER]  # as offered, beside the messages
        assert record["score"] == trace["final_score"] and "success" in record and "improvement" in record
    asked = [{"id": i, "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": c})}}
             for i, c in CALLS]
    # the first call's answer was the two tool calls; the second's prompt has them and both results, then the text
    assert records[0]["messages"][-1] == {"role": "assistant", "content": None, "tool_calls": asked}
    assert records[1]["messages"][2:] == [
        {"role": "assistant", "content": None, "tool_calls": asked},
        {"role": "tool", "tool_call_id": "call_paris", "content": "clear in Paris"},
        {"role": "tool", "tool_call_id": "call_rome", "content": "clear in Rome"},
        {"role": "assistant", "content": "It is clear in Paris and clear in Rome."}]


@pytest.mark.slow  # over 2 s on two cores
def test_the_inspect_log_carries_them_as_inspects_tool_calls(tool_run, tmp_path):
    pytest.importorskip("inspect_ai", reason="inspect-ai is not installed (pip install -e '.[inspect]')")
    from inspect_ai.log import read_eval_log
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool

    run_dir, home = tool_run
    done = mlab_in_process("export", "--format", "inspect", run_dir, "--out", tmp_path / "logs", "--json", home=home)
    assert done.returncode == 0, done.stderr
    [path] = json.loads(done.stdout)["logs"]
    [sample] = read_eval_log(path).samples
    called = [c for m in sample.messages if isinstance(m, ChatMessageAssistant) for c in m.tool_calls or []
              if c.function == "get_weather"]
    assert [(c.id, c.arguments) for c in called] == [(i, {"city": city}) for i, city in CALLS]
    answers = [m for m in sample.messages if isinstance(m, ChatMessageTool) and m.function == "get_weather"]
    assert [(m.tool_call_id, m.text) for m in answers] == [(i, f"clear in {city}") for i, city in CALLS]
    # each model call: the tools offered, its prompt with the calls and results, its answer's tool calls
    first, second = [e for e in sample.events if e.event == "model"]
    for event in (first, second):
        [tool] = event.tools
        assert (tool.name, tool.description) == ("get_weather", "The weather in a city.")
        assert tool.parameters.required == ["city"] and tool.parameters.properties["city"].type == "string"
    assert first.tool_choice == "auto"
    assert [(c.id, c.function, c.arguments) for c in first.output.message.tool_calls] == \
        [(i, "get_weather", {"city": city}) for i, city in CALLS]
    assert first.output.stop_reason == "tool_calls"
    [asked] = [m for m in second.input if isinstance(m, ChatMessageAssistant)]
    assert [c.id for c in asked.tool_calls] == ["call_paris", "call_rome"]
    assert [(m.tool_call_id, m.function, m.text) for m in second.input if isinstance(m, ChatMessageTool)] == \
        [(i, "get_weather", f"clear in {city}") for i, city in CALLS]
    assert second.output.message.text == "It is clear in Paris and clear in Rome."
    assert not second.output.message.tool_calls


@pytest.mark.slow
def test_unparsed_arguments_and_images_are_kept_and_a_text_only_call_keeps_its_shape(tmp_path):
    """A model may write arguments that are no JSON: chat-jsonl keeps them as written, Inspect says why it could not
    read them. Image parts are OpenAI's image_url content parts, Inspect's images. A call without tools is exported
    as before (no tools, the answer as {role, content})."""
    write_run(tmp_path / "runs" / "a", "RUN-A")
    now = time.time()
    text_only = (tmp_path / "runs" / "a" / "llm_calls.jsonl").read_text()
    broken = json.dumps({"role": "main", "model": "scripted", "step": 1, "time": now, "latency_s": 0.1,
                         "messages": [{"role": "user", "content": "go", "parts": [
                             {"type": "text", "text": "go"}, {"type": "image", "image_url": IMAGE}]}],
                         "params": {"tools": [WEATHER]},
                         "completion": "", "tool_calls": [{"id": "c1", "name": "get_weather", "arguments": "{city"}],
                         "finish_reason": "tool_calls", "prompt_tokens": 3, "completion_tokens": 2, "cost_usd": 0.0})
    (tmp_path / "runs" / "a" / "llm_calls.jsonl").write_text(text_only + broken + "\n")
    done = mlab_in_process("export", "--format", "chat-jsonl", tmp_path / "runs", "--out", tmp_path / "chat",
                           home=tmp_path / "home", registry=fixture_registry)
    assert done.returncode == 0, done.stderr
    plain, called = [json.loads(line) for line in (tmp_path / "chat" / "chat.jsonl").read_text().splitlines()]
    assert list(plain) == ["messages", "run", "run_id", "task", "agent", "seed", "status", "score", "improvement",
                           "success", "call", "step", "role", "model", "params", "prompt_tokens",
                           "completion_tokens", "cost_usd", "cached", "error"]
    assert plain["messages"] == [{"role": "user", "content": "RUN-A prompt"},
                                 {"role": "assistant", "content": "RUN-A answer"}]
    assert called["tools"] == [WEATHER]
    assert called["messages"][0] == {"role": "user", "content": [
        {"type": "text", "text": "go"}, {"type": "image_url", "image_url": {"url": IMAGE}}]}
    assert called["messages"][-1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{city"}}]}
    pytest.importorskip("inspect_ai", reason="inspect-ai is not installed (pip install -e '.[inspect]')")
    from inspect_ai.log import read_eval_log

    done = mlab_in_process("export", "--format", "inspect", tmp_path / "runs", "--out", tmp_path / "logs", "--json",
                           home=tmp_path / "home", registry=fixture_registry)
    assert done.returncode == 0, done.stderr
    [path] = json.loads(done.stdout)["logs"]
    [sample] = read_eval_log(path).samples
    _plain_event, event = [e for e in sample.events if e.event == "model"]
    [call] = event.output.message.tool_calls
    assert (call.id, call.function, call.arguments) == ("c1", "get_weather", {})
    assert call.parse_error and "{city" in call.parse_error
    [asked] = event.input
    assert [(c.type, getattr(c, "text", None) or getattr(c, "image", None)) for c in asked.content] == \
        [("text", "go"), ("image", IMAGE)]
