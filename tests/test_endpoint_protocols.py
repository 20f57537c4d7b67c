"""The endpoint speaks what agents speak (issue 41, item 2): a program in the sandbox offers a tool through OpenAI
Chat Completions, OpenAI Responses and Anthropic Messages, with OpenAI's and Anthropic's own client libraries,
streamed and not; the run's model (litellm, to a real OpenAI-style server on 127.0.0.1) sees the tool, its tool call
comes back in each protocol's shape, the tool's result goes back up; each call is a step whose tool calls the trace
keeps. Many calls at once are served together and hold the token budget."""
from __future__ import annotations

import json
import textwrap

import pytest

from mlab.core.llm.client import read_call_log
from tests.fixtures.cli import mlab
from tests.fixtures.llm_server import FakeLLMServer
from tests.fixtures.sandboxes import CONFINING, make_sandbox
from tests.test_program_agents import _trace

pytestmark = pytest.mark.timeout(300)

# Each protocol, streamed and not: offer get_weather, run the call the model asks for, send its result back, print
# what came back as CASE <name> <tool call> | <final text>.
PROGRAM = textwrap.dedent(r'''
    import json, os
    import anthropic, openai

    oa = openai.OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
    an = anthropic.Anthropic(base_url=os.environ["ANTHROPIC_BASE_URL"], api_key=os.environ["ANTHROPIC_API_KEY"],
                             max_retries=0)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}

    def weather(args):
        return "clear in " + json.loads(args)["city"]

    def chat(stream):
        tools = [{"type": "function",
                  "function": {"name": "get_weather", "description": "weather", "parameters": schema}}]
        history = [{"role": "user", "content": "Weather in Paris?"}]
        def ask():
            if not stream:
                m = oa.chat.completions.create(model="any", messages=history, tools=tools).choices[0].message
                return m.content, [(c.id, c.function.name, c.function.arguments) for c in m.tool_calls or []]
            text, calls = "", {}
            for chunk in oa.chat.completions.create(model="any", messages=history, tools=tools, stream=True,
                                                    stream_options={"include_usage": True}):
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    for d in choice.delta.tool_calls or []:
                        c = calls.setdefault(d.index, ["", "", ""])
                        c[0] += d.id or ""; c[1] += (d.function.name or ""); c[2] += (d.function.arguments or "")
            return text, [tuple(c) for c in calls.values()]
        _text, calls = ask()
        history.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]})
        for i, n, a in calls:
            history.append({"role": "tool", "tool_call_id": i, "content": weather(a)})
        final, _ = ask()
        return calls, final

    def responses(stream):
        tools = [{"type": "function", "name": "get_weather", "description": "weather", "parameters": schema}]
        items = [{"role": "user", "content": "Weather in Paris?"}]
        def ask():
            if not stream:
                out = oa.responses.create(model="any", input=items, tools=tools).output
            else:
                out = [e.item for e in oa.responses.create(model="any", input=items, tools=tools, stream=True)
                       if e.type == "response.output_item.done"]
            calls = [(o.call_id, o.name, o.arguments) for o in out if o.type == "function_call"]
            text = "".join(c.text for o in out if o.type == "message" for c in o.content)
            return text, calls
        _text, calls = ask()
        for i, n, a in calls:
            items.append({"type": "function_call", "call_id": i, "name": n, "arguments": a})
            items.append({"type": "function_call_output", "call_id": i, "output": weather(a)})
        final, _ = ask()
        return calls, final

    def messages(stream):
        tools = [{"name": "get_weather", "description": "weather", "input_schema": schema}]
        history = [{"role": "user", "content": "Weather in Paris?"}]
        def ask():
            if not stream:
                blocks = an.messages.create(model="any", max_tokens=500, messages=history, tools=tools).content
            else:
                with an.messages.stream(model="any", max_tokens=500, messages=history, tools=tools) as s:
                    blocks = s.get_final_message().content
            calls = [(b.id, b.name, json.dumps(b.input)) for b in blocks if b.type == "tool_use"]
            return "".join(b.text for b in blocks if b.type == "text"), calls, blocks
        _text, calls, blocks = ask()
        history.append({"role": "assistant", "content": [b.model_dump() for b in blocks]})
        history.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": i, "content": weather(a)} for i, n, a in calls]})
        final, _, _ = ask()
        return calls, final

    for name, run in (("chat", chat), ("responses", responses), ("messages", messages)):
        for stream in (False, True):
            calls, final = run(stream)
            print("CASE", f"{name}{'-stream' if stream else ''}", json.dumps([[n, json.loads(a)] for _, n, a in calls]),
                  "|", final, flush=True)
''')


def model(body: dict) -> str | dict:
    """The run's model: it asks for get_weather until it sees the tool's result, then says what it got."""
    last = body["messages"][-1]
    if last["role"] == "tool":
        return f"It is {last['content']} (answering {last['tool_call_id']})."
    return {"content": None, "tool_calls": [{"id": f"call_{len(body['messages'])}", "type": "function",
                                             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}


@pytest.mark.parametrize("sandbox", [pytest.param(s, marks=[pytest.mark.slow] if s != "local" else [])
                                     for s in CONFINING])
@pytest.mark.slow  # over 2 s on two cores
def test_a_tool_offered_through_each_protocol_reaches_the_model_and_its_call_comes_back(tmp_path, sandbox):
    make_sandbox(sandbox)
    (tmp_path / "tools.py").write_text(PROGRAM)
    with FakeLLMServer(model) as server:
        done = mlab("run", "--task", "lite/wine", "--agent", "command", "--agent-option", "command=python tools.py",
                    "--llm", "openai/gpt-4o-mini", "--llm-api-base", server.base_url, "--sandbox", sandbox,
                    "--max-steps", "30", "--run-dir", tmp_path / "run", cwd=tmp_path,
                    env={"OPENAI_API_KEY": "sk-user-secret"})
    assert done.returncode == 0, done.stderr + done.stdout
    trace = _trace(tmp_path / "run")
    output = "\n".join(s["observation"] for s in trace["steps"])
    cases = {line.split()[1]: line.split(" ", 2)[2] for line in output.splitlines() if line.startswith("CASE ")}
    assert set(cases) == {"chat", "chat-stream", "responses", "responses-stream", "messages", "messages-stream"}, output
    for name, line in cases.items():
        calls, final = line.split(" | ", 1)
        assert json.loads(calls) == [["get_weather", {"city": "Paris"}]], (name, line)
        assert final.startswith("It is clear in Paris (answering "), (name, line)
    # the upstream saw the tool every time, in OpenAI's shape whatever the protocol, and the results went back up
    assert len(server.requests) == 12
    for request in server.requests:
        assert [t["function"]["name"] for t in request.body["tools"]] == ["get_weather"], request.body
        assert request.body["tools"][0]["function"]["parameters"]["required"] == ["city"]
    results = [r.body["messages"][-1] for r in server.requests[1::2]]
    assert all(m["role"] == "tool" and m["content"] == "clear in Paris" for m in results), results
    asked = [r.body["messages"][-2]["tool_calls"][0]["id"] for r in server.requests[1::2]]
    assert all(m["tool_call_id"] == i for m, i in zip(results, asked, strict=True))
    # each call a step; the tool calls are in the trace and the call log
    calls = read_call_log(tmp_path / "run" / "llm_calls.jsonl")
    assert len(calls) == 12 and [len(c.get("tool_calls", [])) for c in calls] == [1, 0] * 6
    model_steps = [s for s in trace["steps"] if s["action"]["name"] == "Model Call"]
    assert len(model_steps) == 12
    assert [s["action"]["args"].get("tool_calls", [{}])[0].get("name") for s in model_steps[::2]] == ["get_weather"] * 6
    assert model_steps[1]["action"]["args"]["messages"][-1]["role"] == "tool"


CONCURRENT = textwrap.dedent(r'''
    import json, os, threading, urllib.error, urllib.request
    statuses = []
    def call(i):
        body = json.dumps({"model": "any", "max_tokens": 300, "messages": [{"role": "user", "content": f"call {i}"}],
                           "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]})
        request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body.encode(),
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                statuses.append(response.status)
        except urllib.error.HTTPError as exc:
            statuses.append(exc.code)
    threads = [threading.Thread(target=call, args=(i,)) for i in range(40)]
    for t in threads: t.start()
    for t in threads: t.join()
    print("STATUSES", json.dumps(sorted(statuses)), flush=True)
''')


@pytest.mark.slow  # over 2 s on two cores
def test_forty_concurrent_tool_calls_are_served_together_and_hold_the_budget(tmp_path):
    make_sandbox("local")
    (tmp_path / "many.py").write_text(CONCURRENT)
    concurrent = {"now": 0, "peak": 0}
    import threading
    import time

    lock = threading.Lock()

    def slow_model(body: dict) -> dict:
        with lock:
            concurrent["now"] += 1
            concurrent["peak"] = max(concurrent["peak"], concurrent["now"])
        time.sleep(0.3)  # long enough for calls to overlap, if the endpoint lets them
        with lock:
            concurrent["now"] -= 1
        return {"content": None, "tool_calls": [{"id": "c", "type": "function",
                                                 "function": {"name": "get_weather", "arguments": "{}"}}]}

    def greedy(body: dict, text: str) -> tuple[int, int]:  # bills every completion token a call allows
        return 20, int(body.get("max_completion_tokens") or body.get("max_tokens") or 10**6)

    with FakeLLMServer(slow_model, usage=greedy) as server:
        done = mlab("run", "--task", "lite/wine", "--agent", "command", "--agent-option", "command=python many.py",
                    "--llm", "openai/gpt-4o-mini", "--llm-api-base", server.base_url, "--sandbox", "local",
                    "--max-steps", "100", "--token-limit", "8000", "--run-dir", tmp_path / "run", cwd=tmp_path,
                    env={"OPENAI_API_KEY": "sk-user-secret"})
    assert done.returncode == 0, done.stderr + done.stdout
    trace = _trace(tmp_path / "run")
    output = "\n".join(s["observation"] for s in trace["steps"])
    statuses = json.loads(next(line for line in output.splitlines() if line.startswith("STATUSES")).split(" ", 1)[1])
    assert len(statuses) == 40 and set(statuses) <= {200, 429}, statuses
    usage = trace["usage"]
    assert usage["prompt_tokens"] + usage["completion_tokens"] <= 8000, usage
    assert 200 in statuses and 429 in statuses  # the budget ran out partway, and no call crossed it
    assert concurrent["peak"] > 1  # calls were answered together, not one by one
    calls = read_call_log(tmp_path / "run" / "llm_calls.jsonl")
    assert len(calls) == statuses.count(200) == len(server.requests)
    assert len([s for s in trace["steps"] if s["action"]["name"] == "Model Call"]) == statuses.count(200)


ONE_TOOL_CALL = textwrap.dedent(r'''
    import os, openai
    oa = openai.OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0)
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    history = [{"role": "user", "content": "Weather in Paris?"}]
    m = oa.chat.completions.create(model="any", messages=history, tools=tools).choices[0].message
    history += [m.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": m.tool_calls[0].id, "content": "clear <b>sky</b>"}]
    print(oa.chat.completions.create(model="any", messages=history, tools=tools).choices[0].message.content)
''')


@pytest.mark.slow  # a browser
def test_the_viewer_shows_a_steps_tool_calls_in_chromium(tmp_path):
    import subprocess
    import sys

    from tests.fixtures.webdriver import CHROMEDRIVER, CHROMIUM, MISSING, Browser

    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip(MISSING)
    make_sandbox("local")
    (tmp_path / "one.py").write_text(ONE_TOOL_CALL)
    runs = tmp_path / "runs"
    with FakeLLMServer(model) as server:
        done = mlab("run", "--task", "lite/wine", "--agent", "command", "--agent-option", "command=python one.py",
                    "--llm", "openai/gpt-4o-mini", "--llm-api-base", server.base_url, "--sandbox", "local",
                    "--run-dir", runs / "tools", cwd=tmp_path, env={"OPENAI_API_KEY": "sk-x"})
    assert done.returncode == 0, done.stderr
    view = subprocess.Popen([sys.executable, "-m", "mlab.cli.main", "view", str(runs)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert view.stdout is not None
        url = next(line.split()[1] for line in view.stdout if line.startswith("open http://"))
        with Browser(tmp_path / "profile") as browser:
            browser.open(url + "#run=tools&step=1")
            shown = browser.wait_for("var e = document.getElementById('step-tool-calls'); return e && e.textContent;")
            assert "get_weather" in shown and '{"city": "Paris"}' in shown
            browser.open(url + "#run=tools&step=2")
            args = browser.wait_for("var e = document.getElementById('step-action'), a = document.getElementById("
                                    "'step-args'); return e && e.textContent === 'Model Call' && a.textContent"
                                    ".indexOf('tool_call_id') >= 0 && a.textContent;")
            assert "clear <b>sky</b>" in args  # the tool's result, as text
            assert browser.run("return document.getElementById('step-tool-calls');") is None
            assert browser.run("return document.images.length;") == 0
    finally:
        view.kill()
        view.wait()
