"""Program agents (issue 32): a user's own agent program runs in the run's sandbox, reaches the run's model only
through mlab's endpoint, is budgeted, traced one step per model call and scored, and sees no hidden file."""
from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from mlab.core.llm.client import read_call_log
from tests.fixtures.asking_program import ASK
from tests.fixtures.cli import mlab
from tests.fixtures.llm_server import FakeLLMServer
from tests.fixtures.sandboxes import CONFINING, make_sandbox

pytestmark = pytest.mark.timeout(300)

# The user's agent: plain urllib against $OPENAI_BASE_URL. It reads its task, asks the model, runs the starter
# (which writes submission.csv), looks for what it must not see, tells the model, and exits; a refused call
# (a budget) makes it stop at once.
AGENT = textwrap.dedent('''
    import json, os, subprocess, sys, urllib.error, urllib.request

    BASE = os.environ["OPENAI_BASE_URL"].rstrip("/")
    history = [{"role": "system", "content": "You are a research agent."}]

    def ask(text):
        history.append({"role": "user", "content": text})
        body = json.dumps({"model": os.environ["MLAB_MODEL"], "messages": history}).encode()
        request = urllib.request.Request(BASE + "/chat/completions", data=body, method="POST",
                                         headers={"Content-Type": "application/json",
                                                  "Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            print("REFUSED", exc.code, exc.read().decode()[:300])
            sys.exit(0)
        text = answer["choices"][0]["message"]["content"]
        history.append({"role": "assistant", "content": text})
        print("USAGE", answer["usage"]["total_tokens"])
        return text

    task = open(os.environ["MLAB_TASK_FILE"]).read()
    print("PLAN", ask("Task:\\n" + task[:300] + "\\nWhat first?"))
    subprocess.run([sys.executable, "train.py"], check=True)
    found = []
    for root in PROBES:
        if os.path.isfile(root):
            found.append(root)
        for folder, _dirs, names in os.walk(root):
            found += [os.path.join(folder, name) for name in names]
    found += [k for k in os.environ if "KEY" in k and os.environ[k] != "mlab-endpoint-no-key"]
    print("NEXT", ask("Probe found: " + (" | ".join(found) or "NOTHING")))
    print("DONE", ask("Anything else?"))
''')


def _agent_script(tmp_path: Path, probes: list[str]) -> Path:
    script = tmp_path / "my_agent.py"
    script.write_text(f"PROBES = {probes!r}\n" + AGENT)
    return script


def _run(tmp_path: Path, server: FakeLLMServer, sandbox: str, *extra: str):
    make_sandbox(sandbox)  # skips where it cannot run here; starts the tests' Docker engine for docker
    run_dir = tmp_path / "run"
    home = Path(os.environ["MLAB_HOME"])
    probes = [str(home), str(run_dir / "trace.json"), str(run_dir / "llm_calls.jsonl"), str(run_dir / "snapshots"),
              str(tmp_path / "my_agent.py")]
    _agent_script(tmp_path, probes)
    done = mlab("run", "--task", "lite/wine", "--agent", "command", "--agent-option", "command=python my_agent.py",
                "--llm", "openai/gpt-4o-mini", "--llm-api-base", server.base_url, "--sandbox", sandbox,
                "--max-steps", "10", "--run-dir", run_dir, *extra, cwd=tmp_path,
                env={"OPENAI_API_KEY": "sk-user-secret"})
    return done, run_dir


def _trace(run_dir: Path) -> dict:
    return json.loads((run_dir / "trace.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", CONFINING)
def test_command_agent_runs_sandboxed_through_the_endpoint_and_is_scored(tmp_path, sandbox):
    with FakeLLMServer(lambda body: f"answer {len(body['messages'])}") as server:
        done, run_dir = _run(tmp_path, server, sandbox)
    assert done.returncode == 0, done.stderr + done.stdout
    trace = _trace(run_dir)
    assert trace["status"] == "finished" and trace["end_reason"] == "agent program exited (code 0)"
    assert trace["final_score"] is not None
    calls = read_call_log(run_dir / "llm_calls.jsonl")
    assert len(calls) == 3 == len(server.requests)
    assert all(c["prompt_tokens"] > 0 and c["completion_tokens"] > 0 and c["error"] is None for c in calls)
    assert [c["step"] for c in calls] == [1, 2, 3]
    # the user's key went nowhere: not to the program (probe), not to the upstream from the program
    assert all("sk-user-secret" not in json.dumps(r.body) for r in server.requests)
    probe = calls[1]["messages"][-1]["content"]
    assert probe == "Probe found: NOTHING", probe
    # one step per model call: its newest messages, its completion, the changes and output that followed
    steps = trace["steps"]
    assert [s["action"]["name"] for s in steps] == ["Model Call"] * 3
    assert steps[0]["action"]["args"]["messages"][-1]["content"].startswith("Task:")
    assert steps[0]["action"]["raw_response"] == "answer 2"
    assert "+ submission.csv" in steps[0]["observation"] and "PLAN answer 2" in steps[0]["observation"]
    assert "(none)" in steps[2]["observation"].split("Program output:")[0]  # the last call changed nothing
    assert (run_dir / "snapshots" / "step_0001.json").is_file()
    # the run's calls as chat records for training: call for call with llm_calls.jsonl, with the run's score
    import pandas as pd

    exported = mlab("export", "--format", "chat-jsonl", run_dir, "--out", tmp_path / "chat", "--json")
    assert exported.returncode == 0, exported.stderr
    written = Path(json.loads(exported.stdout)["out"])
    assert written == tmp_path / "chat" / "chat.jsonl"
    records = pd.read_json(written, lines=True, precise_float=True).to_dict("records")  # a JSON-lines reader, not ours
    assert len(records) == len(calls) and [r["call"] for r in records] == [1, 2, 3]
    assert [r["messages"][:-1] for r in records] == [c["messages"] for c in calls]
    assert [r["messages"][-1] for r in records] == [{"role": "assistant", "content": c["completion"]} for c in calls]
    assert {r["score"] for r in records} == {trace["final_score"]} and all("success" in r for r in records)


@pytest.mark.slow
def test_a_token_budget_ends_the_program_cleanly_and_the_run_is_scored(tmp_path):
    with FakeLLMServer(lambda body: "go on " * 5) as server:
        # the first prompt may cost 359 tokens (a token a byte): it fits in 450, the longer second one cannot
        done, run_dir = _run(tmp_path, server, "local", "--token-limit", "450")
    assert done.returncode == 0, done.stderr + done.stdout
    trace = _trace(run_dir)
    assert trace["status"] == "finished" and trace["end_reason"].startswith("budget reached:")
    assert trace["final_score"] is not None  # the submission written before the budget ran out is scored
    calls = read_call_log(run_dir / "llm_calls.jsonl")
    assert len(calls) == 1 == len(server.requests)  # the refused call never reached the model
    assert "REFUSED 429" in trace["steps"][-1]["observation"]


def test_command_agent_without_a_command_is_one_line(tmp_path):
    done = mlab("run", "--task", "lite/wine", "--agent", "command", "--llm", "openai/gpt-4o-mini",
                "--run-dir", tmp_path / "run", cwd=tmp_path, env={"OPENAI_API_KEY": "sk-x"})
    assert done.returncode == 2, done.stderr
    assert "agent command needs its program" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def _smol_script(probes: list[str]):
    """A scripted model for smolagents' CodeAgent: run the starter, probe, then give the final answer."""
    answers = [
        "Thought: run the starter.\n<code>\nimport subprocess, sys\n"
        "done = subprocess.run([sys.executable, 'train.py'], capture_output=True, text=True)\n"
        "print(done.returncode, done.stdout[-200:])\n</code>",
        "Thought: look around.\n<code>\nimport os\nfound = []\n"
        f"for root in {probes!r}:\n"
        "    if os.path.isfile(root):\n        found.append(root)\n"
        "    for folder, _d, names in os.walk(root):\n        found += [os.path.join(folder, n) for n in names]\n"
        "print('PROBE', found or 'NOTHING')\n</code>",
        "Thought: done.\n<code>\nfinal_answer('submission.csv written')\n</code>",
    ]
    calls = iter(range(100))

    def respond(body: dict) -> str:
        n = next(calls)
        return answers[min(n, len(answers) - 1)]
    return respond


def _program_run(tmp_path: Path, server: FakeLLMServer, agent: str, sandbox: str, *extra: str):
    run_dir = tmp_path / "run"
    return mlab("run", "--task", "lite/wine", "--agent", agent, "--llm", "openai/gpt-4o-mini",
                "--llm-api-base", server.base_url, "--sandbox", sandbox, "--max-steps", "10", "--run-dir", run_dir,
                *extra, cwd=tmp_path, env={"OPENAI_API_KEY": "sk-user-secret"}), run_dir


def _scored_in_three_calls(tmp_path: Path, agent: str, script, sandbox: str):
    """Runs `agent` against a fake model answering `script(probes)`, the probes being paths it must not see;
    checks what every such run shows (finished and scored; three calls logged with their tokens, each a step;
    the first writing submission.csv) and returns the trace's steps and the logged calls."""
    run_dir = tmp_path / "run"
    probes = [os.environ["MLAB_HOME"], str(run_dir / "trace.json"), str(run_dir / "llm_calls.jsonl")]
    with FakeLLMServer(script(probes)) as server:
        done, run_dir = _program_run(tmp_path, server, agent, sandbox)
    assert done.returncode == 0, done.stderr + done.stdout
    trace = _trace(run_dir)
    assert trace["status"] == "finished", trace["end_reason"]
    assert trace["final_score"] is not None
    calls = read_call_log(run_dir / "llm_calls.jsonl")
    assert len(calls) == 3 == len(server.requests)
    assert all(c["prompt_tokens"] > 0 and c["completion_tokens"] > 0 for c in calls)
    steps = trace["steps"]
    assert [s["action"]["name"] for s in steps] == ["Model Call"] * 3
    assert "+ submission.csv" in steps[0]["observation"]
    return steps, calls


@pytest.mark.slow
# two sandboxes: this agent's loop is alike in each; the first test reaches the endpoint from every confining one
@pytest.mark.parametrize("sandbox", ["local", "bwrap"])
def test_smolagents_from_pypi_runs_through_the_endpoint_and_is_scored(tmp_path, sandbox):
    pytest.importorskip("smolagents", reason="pip install -e 'plugins/agents/smolagents[agent]'")
    steps, _calls = _scored_in_three_calls(tmp_path, "smolagents", _smol_script, sandbox)
    assert "PROBE NOTHING" in steps[1]["observation"], steps[1]["observation"]
    assert "FINAL ANSWER: submission.csv written" in steps[2]["observation"]


# A program that is killed while it waits after its second call, and on resume (MLAB_RESUMED=1) goes on from the
# workspace it finds: the notes written after call 1 (the snapshot when call 2 arrived), not those after call 2.
RESUMABLE = ASK + textwrap.dedent('''

    if os.environ["MLAB_RESUMED"] == "0":
        ask("first")
        open("notes.txt", "w").write("after call 1\\n")
        ask("second")
        open("notes.txt", "a").write("after call 2\\n")
        time.sleep(600)  # the harness is killed here
    told = open(os.environ["MLAB_TASK_FILE"]).read()
    ask("resumed: " + open("notes.txt").read().strip() + " | told: " + str("resumed" in told))
    subprocess.run([sys.executable, "train.py"], check=True)
    ask("done")
''')


def _killed_after_call_2_then_resumed(tmp_path: Path, sandbox: str, agent: list[str], respond):
    """Runs `mlab run` with `agent` (its --agent arguments) against a fake model answering `respond`, kills the
    harness's process group (kill -9) once the program has written notes.txt "after call 2" in the workspace, then
    `mlab run --resume`s it. Checks what every such run shows (2 calls logged before the kill; after the resume it
    finishes and is scored, each request that reached the model logged once, two sessions) and returns the trace
    and the logged calls."""
    import signal
    import subprocess
    import time

    from mlab.core.llm.client import usage_of_log
    from tests.fixtures.cli import MLAB, cli_env

    run_dir = tmp_path / "run"
    with FakeLLMServer(respond) as server:
        args = ["run", "--task", "lite/wine", *agent, "--llm", "openai/gpt-4o-mini", "--llm-api-base",
                server.base_url, "--sandbox", sandbox, "--max-steps", "10", "--run-dir", str(run_dir)]
        env = cli_env({"OPENAI_API_KEY": "sk-user-secret"}, None)
        proc = subprocess.Popen([*MLAB, *args], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=open(tmp_path / "first.err", "w"),
                                start_new_session=True)
        notes = run_dir / "workspace" / "notes.txt"
        deadline = time.monotonic() + 120
        while not (notes.is_file() and "after call 2" in notes.read_text()):
            assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "first.err").read_text()
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert len(read_call_log(run_dir / "llm_calls.jsonl")) == 2 == len(server.requests)

        done = subprocess.run([*MLAB, "run", "--resume", str(run_dir)], cwd=tmp_path, env=env,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr + done.stdout
    trace = _trace(run_dir)
    assert trace["status"] == "finished", trace["end_reason"]
    assert trace["final_score"] is not None
    # every call that reached the model is in the log once, in order: 2 before the kill, the rest after the resume
    calls = read_call_log(run_dir / "llm_calls.jsonl")
    def said(messages: list[dict]) -> list[tuple]:  # role and text: tool calls are logged in mlab's own shape
        return [(m["role"], m.get("content") or "") for m in messages]

    assert [said(c["messages"]) for c in calls] == [said(r.body["messages"]) for r in server.requests]
    assert len({c["session"] for c in calls}) == 2 and [c["step"] for c in calls][:3] == [1, 2, 2]
    assert usage_of_log(calls).model_dump() == trace["usage"]  # the killed session's call 2 was paid for too
    return trace, calls


@pytest.mark.slow
# two sandboxes: this agent's loop is alike in each; the first test reaches the endpoint from every confining one
@pytest.mark.parametrize("sandbox", ["local", "bwrap"])
def test_kill_9_then_resume_continues_the_program_and_logs_each_call_once(tmp_path, sandbox):
    (tmp_path / "resumable.py").write_text(RESUMABLE)
    trace, calls = _killed_after_call_2_then_resumed(
        tmp_path, sandbox, ["--agent", "command", "--agent-option", "command=python resumable.py"],
        lambda body: "ok " + body["messages"][-1]["content"])
    assert trace["end_reason"] == "agent program exited (code 0)"
    sent = [c["messages"][-1]["content"] for c in calls]
    assert sent == ["first", "second", "resumed: after call 1 | told: True", "done"]
    assert [c["step"] for c in calls] == [1, 2, 2, 3]
    # the trace: call 1, then the resumed session's two calls; call 2 of the killed session is done again
    steps = trace["steps"]
    assert [s["index"] for s in steps] == [1, 2, 3]
    assert [s["action"]["args"]["messages"][-1]["content"] for s in steps] == ["first", *sent[2:]]


def _resumable_script(agent: str):
    """A scripted model for smolagents or mini-SWE-agent, one command a reply, counted over both sessions: run the
    starter; write notes.txt and hang (the harness is killed there); after the resume, say whether notes.txt and
    submission.csv are in the workspace; finish."""
    import re

    look = "import os; print('RESUMED', os.path.exists('notes.txt'), os.path.exists('submission.csv'))"
    calls = iter(range(100))

    def respond(body: dict) -> str:
        n = min(next(calls), 3)
        if agent == "smolagents":
            code = ["import subprocess, sys\nsubprocess.run([sys.executable, 'train.py'], check=True)",
                    "import pathlib, time\npathlib.Path('notes.txt').write_text('after call 2')\ntime.sleep(600)",
                    look, "final_answer('submission.csv written')"][n]
            return f"Thought: step {n}.\n<code>\n{code}\n</code>"
        told = next(m["content"] for m in body["messages"] if m["role"] == "user")
        python = re.search(r"run Python with (\S+)\. Submit", told).group(1)
        command = [f"{python} train.py | tail -3", "echo 'after call 2' > notes.txt && sleep 600",
                   f'{python} -c "{look}"', "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"][n]
        return f"THOUGHT: step {n}.\n\n```mswea_bash_command\n{command}\n```"
    return respond


@pytest.mark.slow
# One sandbox each, one of each: a resume is the harness's, alike in every sandbox (the command agent's case above
# resumes in both), and each agent runs in both in its scored case; the cross of the two cost ~50 CPU-s more.
@pytest.mark.parametrize(("agent", "sandbox"), [("smolagents", "local"), ("mini-swe-agent", "bwrap")])
def test_kill_9_then_resume_continues_a_third_party_agent(tmp_path, agent, sandbox):
    module, folder = {"smolagents": ("smolagents", "smolagents"), "mini-swe-agent": ("minisweagent", "miniswe")}[agent]
    pytest.importorskip(module, reason=f"pip install -e 'plugins/agents/{folder}[agent]'")
    trace, calls = _killed_after_call_2_then_resumed(tmp_path, sandbox, ["--agent", agent],
                                                     _resumable_script(agent))
    assert len(calls) == 4 and [c["step"] for c in calls] == [1, 2, 2, 3]
    # the resumed agent starts afresh, told so, on the workspace as it was when call 2 arrived: the starter's
    # submission.csv is there, notes.txt (written after call 2) is not
    resumed = calls[2]["messages"]
    assert "interrupted and resumed" in json.dumps(resumed) and "after call 2" not in json.dumps(resumed)
    assert "RESUMED False True" in json.dumps(calls[3]["messages"]), calls[3]["messages"][-1]
    assert [s["index"] for s in trace["steps"]] == [1, 2, 3]


def _mini_script(probes: list[str]):
    """A scripted model for mini-SWE-agent: one bash block a reply (run the starter with the Python the task names,
    probe, submit)."""
    import re

    def respond(body: dict) -> str:
        told = next(m["content"] for m in body["messages"] if m["role"] == "user")
        python = re.search(r"run Python with (\S+)\. Submit", told).group(1)
        turn = sum(m["role"] == "assistant" for m in body["messages"])
        probe = ("import os\nfound = []\n"
                 f"for root in {probes!r}:\n"
                 "    found += [root] if os.path.isfile(root) else []\n"
                 "    for folder, _d, names in os.walk(root):\n"
                 "        found += [os.path.join(folder, n) for n in names]\n"
                 "found += [k for k in os.environ if 'KEY' in k and os.environ[k] != 'mlab-endpoint-no-key']\n"
                 "print('PROBE', found or 'NOTHING')\n")
        commands = [f"{python} train.py | tail -3", f"{python} - <<'EOF'\n{probe}EOF",
                    "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
        return f"THOUGHT: step {turn}.\n\n```mswea_bash_command\n{commands[min(turn, 2)]}\n```"
    return respond


@pytest.mark.slow
# two sandboxes: this agent's loop is alike in each; the first test reaches the endpoint from every confining one
@pytest.mark.parametrize("sandbox", ["local", "bwrap"])
def test_mini_swe_agent_from_pypi_runs_through_the_endpoint_and_is_scored(tmp_path, sandbox):
    pytest.importorskip("minisweagent", reason="pip install -e 'plugins/agents/miniswe[agent]'")
    steps, calls = _scored_in_three_calls(tmp_path, "mini-swe-agent", _mini_script, sandbox)
    # what the probe printed comes back to the model with the next call
    assert "PROBE NOTHING" in calls[2]["messages"][-1]["content"], calls[2]["messages"][-1]["content"]
    assert "EXIT STATUS: Submitted" in steps[2]["observation"]


@pytest.mark.slow
def test_a_token_budget_stops_mini_swe_agent_cleanly(tmp_path):
    pytest.importorskip("minisweagent", reason="pip install -e 'plugins/agents/miniswe[agent]'")
    with FakeLLMServer(_mini_script([])) as server:
        # mini's first prompt may cost 4,438 tokens (a token a byte): it fits in 5000, the longer second one cannot
        done, run_dir = _program_run(tmp_path, server, "mini-swe-agent", "local", "--token-limit", "5000")
    assert done.returncode == 0, done.stderr + done.stdout
    trace = _trace(run_dir)
    assert trace["status"] == "finished" and trace["end_reason"].startswith("budget reached:"), trace["end_reason"]
    assert trace["final_score"] is not None
    calls = read_call_log(run_dir / "llm_calls.jsonl")
    assert len(calls) == len(server.requests) < 3
    assert "mini-swe-agent stopped" in trace["steps"][-1]["observation"]


@pytest.mark.slow
def test_mlab_agents_lists_program_agents_and_says_how_to_install_a_missing_one(tmp_path):
    import subprocess
    import sys

    from tests.fixtures.cli import cli_env

    # mini-swe-agent's package made unimportable in this process: as on a machine that lacks it
    hide = "import sys; sys.modules['minisweagent'] = None; from mlab.cli.main import main; main()"
    listed = subprocess.run([sys.executable, "-c", hide, "agents", "--json"], capture_output=True, text=True,
                            env=cli_env(), timeout=120)
    assert listed.returncode == 0, listed.stderr
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert rows["research"]["program"] is None  # an agent the core steps needs no program
    assert rows["command"]["program"]["found"] is True
    mini = rows["mini-swe-agent"]["program"]
    assert mini["found"] is False and "mini-swe-agent==2.4.6" in mini["install"]
    assert mini["missing"] == ("mini-swe-agent is not installed; run: pip install -e 'plugins/agents/miniswe[agent]'"
                               "  (mini-swe-agent==2.4.6)")
    table = subprocess.run([sys.executable, "-c", hide, "agents"], capture_output=True, text=True,
                           env=cli_env(), timeout=120)
    assert table.returncode == 0, table.stderr
    assert table.stdout.splitlines()[-1] == "mini-swe-agent: " + mini["missing"]
    assert "missing" in table.stdout and "found" in table.stdout
    # and a run of it stops before writing anything, with the same line
    run = subprocess.run([sys.executable, "-c", hide, "run", "--task", "lite/wine", "--agent", "mini-swe-agent",
                          "--llm", "openai/gpt-4o-mini", "--run-dir", str(tmp_path / "run")], capture_output=True,
                         text=True, env=cli_env({"OPENAI_API_KEY": "sk-x"}), timeout=120)
    assert run.returncode == 2 and run.stderr.strip().splitlines() == [
        "mlab: error: agent 'mini-swe-agent' cannot run here: " + mini["missing"]], run.stderr
    assert not (tmp_path / "run").exists()
