"""The LLM options of `mlab run`, the human backend in a real terminal (a pty), and plugin listing without litellm."""
from __future__ import annotations

import functools
import json
import os
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlab.core.errors import LLMError
from mlab_llm_human.backend import read_answer
from mlab_llm_replay.backend import load_recording
from tests.fixtures.cli import cli_env, entry, mlab_in_process
from tests.fixtures.cli import mlab as cli_mlab
from tests.fixtures.llm_agent import llm_registry, respond
from tests.fixtures.llm_server import FakeLLMServer

# Hang guards only, and a request timeout no loaded machine reaches: beside stress-test's load (the timing cases in
# the pool) a run with litellm (a 5-6 CPU-s import) failed the budget case under 120 s and a 20 s request timeout.
pytestmark = pytest.mark.timeout(600)

REPO = Path(__file__).resolve().parents[1]
KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
RUN = ("run", "--task", "fixture/counter", "--agent", "fixture-llm-json")
AGENT_RUN = [*entry("tests.fixtures.llm_agent"), *RUN]  # the CLI with the fixture task and agent registered
NO_KEYS = dict.fromkeys(KEY_VARIABLES)
mlab = functools.partial(cli_mlab, *RUN, entry=entry("tests.fixtures.llm_agent"), env=NO_KEYS, timeout=600)


def clean_env() -> dict[str, str]:
    return cli_env(NO_KEYS)


def test_list_plugins_shows_the_backends_without_importing_litellm():
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('LITELLM IMPORTED' if 'litellm' in sys.modules else 'NO LITELLM',"
            " file=sys.stderr))\n"
            "from mlab.cli.main import main\n"
            "main(['list-plugins', '--json'])\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "NO LITELLM"
    plugins = {p["name"]: p for p in json.loads(done.stdout)["plugins"]}
    for name in ("litellm", "replay", "human"):
        assert plugins[name]["llms"] == [name] and plugins[name]["error"] is None


@pytest.mark.slow
def test_run_options_budget_and_default_cache_through_the_cli(tmp_path):
    with FakeLLMServer(respond) as server:
        common = ["--llm", "openai/gpt-4o-mini", "--fast-llm", "openai/gpt-4o", "--llm-api-base", server.base_url,
                  "--llm-timeout", "300s", "--llm-retries", "3", "--llm-cache", "--token-limit", "150"]
        first = mlab(*common, "--run-dir", str(tmp_path / "first"))
        assert first.returncode == 0, first.stderr
        assert re.search(r"run finished: budget reached: (\d+) tokens used, limit 150 \(--token-limit\)", first.stdout)
        assert re.search(r"LLM: 2 calls, \d+ tokens, cost \$0\.\d{4}", first.stdout)
        sent = len(server.requests)
        assert sent == 2
        config = json.loads((tmp_path / "first" / "config.json").read_text())
        assert config["llm_retry"] == {"max_attempts": 4} and config["max_tokens"] == 150
        assert config["llm_timeout_s"] == 300 and config["llm_api_base"] == server.base_url
        assert config["llm_cache"] == str(Path(os.environ["MLAB_HOME"]).resolve() / "llm_cache")

        second = mlab(*common, "--run-dir", str(tmp_path / "second"))
        assert second.returncode == 0, second.stderr
        assert len(server.requests) == sent  # everything came from the cache
        first_trace = json.loads((tmp_path / "first" / "trace.json").read_text())
        second_trace = json.loads((tmp_path / "second" / "trace.json").read_text())
        assert [(s["action"], s["observation"]) for s in first_trace["steps"]] == \
               [(s["action"], s["observation"]) for s in second_trace["steps"]]
        assert first_trace["end_reason"] == second_trace["end_reason"]


@pytest.mark.slow
def test_a_run_killed_during_a_model_call_resumes_and_then_replays(tmp_path):
    from mlab.core.llm.client import read_call_log, usage_of_log
    from mlab.core.run.runner import Runner
    from mlab.core.run.trace import read_trace
    from tests.fixtures.llm_agent import PLAN, llm_registry

    run_dir = tmp_path / "run"
    with FakeLLMServer(respond) as server:
        server.faults.extend(["ok", "ok", "ok", "stall:20"])  # step 3's decision hangs
        proc = subprocess.Popen([*AGENT_RUN, "--llm", "openai/gpt-4o-mini", "--fast-llm", "openai/gpt-4o",
                                 "--llm-api-base", server.base_url, "--run-dir", str(run_dir)],
                                cwd=REPO, env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while len(server.requests) < 4:
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=30)
        assert [s.index for s in read_trace(run_dir).steps] == [1, 2]

        trace = Runner(run_dir, read_trace(run_dir).config, llm_registry()).resume()
        assert trace.end_reason == "final answer" and [s.action.name for s in trace.steps] == \
            [p["action"] for p in PLAN]
        calls = read_call_log(run_dir / "llm_calls.jsonl")
        assert len({c["session"] for c in calls}) == 2 and usage_of_log(calls) == trace.usage
        sent = len(server.requests)

        replayed = Runner(tmp_path / "replay", trace.config.model_copy(
            update={"llm": f"replay:{run_dir}", "fast_llm": None, "llm_api_base": None}), llm_registry()).start()
        assert len(server.requests) == sent
    assert [(s.action, s.observation) for s in replayed.steps] == [(s.action, s.observation) for s in trace.steps]


def test_a_missing_key_is_one_line_and_exit_code_2(tmp_path):
    done = mlab_in_process(*RUN, "--llm", "openai/gpt-4o", "--run-dir", tmp_path / "run", registry=llm_registry,
                           env=NO_KEYS)
    assert done.returncode == 2
    assert done.stderr == "mlab: error: LLM 'openai/gpt-4o': openai/gpt-4o needs an API key: set OPENAI_API_KEY\n"
    assert not (tmp_path / "run").exists()


def test_human_without_a_terminal_fails_at_once_with_one_line(tmp_path):
    done = mlab_in_process(*RUN, "--llm", "human", "--run-dir", tmp_path / "run", registry=llm_registry)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("mlab: error: LLM 'human': the human backend needs a terminal")


def _read_until(fd: int, marker: bytes, seen: bytearray, deadline: float) -> None:
    while marker not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"timed out waiting for {marker!r}; got:\n{seen.decode(errors='replace')}"
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the child closed the terminal
                chunk = b""
            if not chunk:
                raise AssertionError(f"terminal closed before {marker!r}; got:\n{seen.decode(errors='replace')}")
            seen.extend(chunk)


def test_a_person_drives_a_run_from_a_terminal(tmp_path):
    master, slave = os.openpty()
    proc = subprocess.Popen([*AGENT_RUN, "--llm", "human", "--max-steps", "3", "--run-dir", str(tmp_path / "run")],
                            cwd=REPO, env={**clean_env(), "COLUMNS": "120", "TERM": "dumb"},
                            stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    seen = bytearray()
    deadline = time.monotonic() + 60
    try:
        end_hint = b'End it with a line holding only "." (or Ctrl-D).'
        _read_until(master, end_hint, seen, deadline)
        assert b"----- user -----" in seen and b"Step 1 of 3." in seen
        # a multi-line answer, pasted, ended with "."
        os.write(master, b'Let me look around first.\n{"action": "List Files",\n "args": {"dir_path": "."}}\n.\n')
        _read_until(master, b"Step 2 of 3.", seen, deadline)
        _read_until(master, end_hint, seen, deadline)
        os.write(master, b'{"action": "Final Answer", "args": {"final_answer": "typed by hand"}}\n.\n')
        _read_until(master, b"trace:", seen, deadline)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    trace = json.loads((tmp_path / "run" / "trace.json").read_text())
    assert [s["action"]["name"] for s in trace["steps"]] == ["List Files", "Final Answer"]
    assert trace["steps"][0]["action"]["raw_response"] == \
        'Let me look around first.\n{"action": "List Files",\n "args": {"dir_path": "."}}'
    assert trace["end_reason"] == "final answer"
    calls = [json.loads(line) for line in (tmp_path / "run" / "llm_calls.jsonl").read_text().splitlines()]
    # a person has no price: the calls are unpriced, never a made-up $0.0000 (issue 34, item 7)
    assert [c["model"] for c in calls] == ["human", "human"] and all(c["cost_usd"] is None for c in calls)
    assert b"$0.0000" not in seen and b"cost unknown" in seen, seen.decode(errors="replace")


def test_reading_a_typed_answer():
    import io

    assert read_answer(io.StringIO("one\n\ntwo\n.\nnot read\n")) == "one\n\ntwo"
    assert read_answer(io.StringIO("a line\n..\nend\n.\n")) == "a line\n.\nend"  # ".." stands for "."
    assert read_answer(io.StringIO("ended by Ctrl-D\n")) == "ended by Ctrl-D"
    assert read_answer(io.StringIO(".\n")) == ""
    with pytest.raises(LLMError, match="ended the input without typing an answer"):
        read_answer(io.StringIO(""))


def test_replay_skips_the_calls_of_a_step_cut_short_by_a_crash(tmp_path):
    def call(step, session, text):
        return json.dumps({"step": step, "session": session, "role": "main", "completion": text, "error": None})

    log = tmp_path / "llm_calls.jsonl"
    # session a crashed during step 3; session b resumed at step 3
    log.write_text("\n".join([call(1, "a", "1"), call(2, "a", "2"), call(3, "a", "3 lost"), call(3, "b", "3"),
                              call(4, "b", "4")]) + "\n")
    assert [c["completion"] for c in load_recording(tmp_path)] == ["1", "2", "3", "4"]
    script = tmp_path / "script.jsonl"
    script.write_text('"plain"\n{"completion": "object", "prompt_tokens": 3}\n')
    assert [c["completion"] for c in load_recording(script)] == ["plain", "object"]


@pytest.mark.slow  # a whole run in a terminal
def test_a_person_calls_the_research_agents_tools_from_a_terminal(tmp_path):
    """The human backend takes tools (issue 41): the offered tools are listed, `@tool NAME {json}` calls one, a
    malformed call is asked again, and the research agent's native-tools mode reaches a scored run."""
    from tests.fixtures.cli import MLAB

    master, slave = os.openpty()
    proc = subprocess.Popen([*MLAB, "run", "--task", "lite/wine", "--agent", "research", "--agent-option",
                             "tools=native", "--llm", "human", "--max-steps", "3", "--sandbox", "local",
                             "--run-dir", str(tmp_path / "run")],
                            cwd=tmp_path, env={**clean_env(), "COLUMNS": "120", "TERM": "dumb",
                                               "MLAB_HOME": os.environ["MLAB_HOME"]},
                            stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    seen = bytearray()
    deadline = time.monotonic() + 240
    fields = {"reflection": "r", "research_plan_and_status": "p", "fact_check": "f", "thought": "t"}
    try:
        end_hint = b'End it with a line holding only "." (or Ctrl-D).'
        _read_until(master, end_hint, seen, deadline)
        assert b"Call one with a line: @tool NAME {JSON arguments}" in seen and b"execute_script:" in seen
        os.write(master, b"@tool no_such_tool {}\n.\n")
        _read_until(master, b"type the whole answer again", seen, deadline)
        call = {**fields, "script_name": "train.py"}
        os.write(master, b"Running the starter.\n@tool execute_script " + json.dumps(call).encode() + b"\n.\n")
        del seen[:]
        _read_until(master, end_hint, seen, deadline)
        assert b"----- tool (result of call call_h1_0) -----" in seen, seen.decode(errors="replace")
        done = {**fields, "final_answer": "the starter's submission"}
        os.write(master, b"@tool final_answer " + json.dumps(done).encode() + b"\n.\n")
        _read_until(master, b"trace:", seen, deadline)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    trace = json.loads((tmp_path / "run" / "trace.json").read_text())
    assert [s["action"]["name"] for s in trace["steps"]] == ["Execute Script", "Final Answer"]
    assert trace["end_reason"] == "final answer" and trace["final_score"] is not None
    calls = [json.loads(line) for line in (tmp_path / "run" / "llm_calls.jsonl").read_text().splitlines()]
    assert [c["tool_calls"][0]["name"] for c in calls] == ["execute_script", "final_answer"]
