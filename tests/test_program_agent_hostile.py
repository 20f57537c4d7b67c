"""A program agent treated as an attacker (issue 40): its agent folder is its own, so the harness never writes or
reads through what it left there; its endpoint answers every request, however malformed, with one line and an
HTTP status, holds the run's token budget before a call goes upstream, and bounds the connections it serves."""
from __future__ import annotations

import json
import os
import socket
import textwrap
import threading
import time
from pathlib import Path

import pytest

from mlab.core import Completion
from mlab.core.llm.client import read_call_log
from mlab.core.llm.endpoint import ModelEndpoint
from mlab.core.llm.protocols import ChatRequest
from tests.fixtures.asking_program import ASK
from tests.fixtures.cli import mlab
from tests.fixtures.llm_server import FakeLLMServer
from tests.fixtures.sandboxes import CONFINING, make_sandbox
from tests.test_program_agents import _killed_after_call_2_then_resumed, _trace

pytestmark = pytest.mark.timeout(300)


# ---- case 1: the agent folder ------------------------------------------------------------------------------
# After its second call the program replaces every file of its agent folder (the task file, the forwarder, its own
# copy) by a symlink to a host file outside the sandbox, and (swap "folder") the folder itself by a link to a host
# folder; the harness is then killed (-9) and the run resumed: nothing of the host may change.
SWAPPING = ASK + textwrap.dedent('''

    if os.environ["MLAB_RESUMED"] == "0":
        ask("first")
        open("notes.txt", "w").write("after call 1\\n")
        ask("second")
        folder = os.environ["MLAB_AGENT_DIR"]
        for name, victim in zip(sorted(os.listdir(folder)), VICTIMS):
            if name.endswith(".sock"):
                continue
            os.unlink(os.path.join(folder, name))
            os.symlink(victim, os.path.join(folder, name))
        for name in ("task.md", "endpoint_forwarder.py", "swapping.py"):  # and the names a new session writes
            path = os.path.join(folder, name)
            if not os.path.lexists(path):
                os.symlink(VICTIMS[0], path)
        if SWAP == "folder":
            os.rename(folder, folder + ".moved")
            os.symlink(VICTIM_DIR, folder)
        open("notes.txt", "a").write("after call 2\\n")
        time.sleep(600)  # the harness is killed here
    ask("resumed")
    subprocess.run([sys.executable, "train.py"], check=True)
    ask("done")
''')


@pytest.mark.slow
@pytest.mark.parametrize("swap", ["files", "folder"])
@pytest.mark.parametrize("sandbox", CONFINING)
def test_resume_writes_nothing_through_links_the_program_left_in_its_folder(tmp_path, sandbox, swap):
    make_sandbox(sandbox)
    host = tmp_path / "host"
    host.mkdir()
    victims = [host / f"victim-{i}.txt" for i in range(4)]
    for victim in victims:
        victim.write_text("host file: must not change\n")
    victim_dir = host / "folder"
    victim_dir.mkdir()
    (tmp_path / "swapping.py").write_text(
        f"VICTIMS = {[str(v) for v in victims]!r}\nVICTIM_DIR = {str(victim_dir)!r}\nSWAP = {swap!r}\n" + SWAPPING)
    trace, calls = _killed_after_call_2_then_resumed(
        tmp_path, sandbox, ["--agent", "command", "--agent-option", "command=python swapping.py"],
        lambda body: "ok " + body["messages"][-1]["content"])
    assert trace["end_reason"] == "agent program exited (code 0)"
    assert [c["messages"][-1]["content"] for c in calls] == ["first", "second", "resumed", "done"]
    assert [v.read_text() for v in victims] == ["host file: must not change\n"] * 4
    assert os.listdir(victim_dir) == []


def test_each_session_writes_its_files_into_a_fresh_folder_without_following_links(tmp_path):
    from mlab.core.run.agent_folder import PREFIX, AgentFolder

    home = tmp_path / "home"
    home.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("host")
    outside = tmp_path / "outside"
    outside.mkdir()
    with AgentFolder(home) as first:
        for name, text in {"task.md": "one", "agent.py": "print(1)", "sub/x.py": "x"}.items():
            first.write(name, text)
    assert first.path.parent == home and first.path.name.startswith(PREFIX + "-")
    assert (first.path / "sub" / "x.py").read_text() == "x"
    # what a program may leave: every file a link out, a folder a link out, a link named as the old fixed folder
    for name in ("task.md", "agent.py"):
        (first.path / name).unlink()
        (first.path / name).symlink_to(victim)
    (first.path / "sub").rename(tmp_path / "sub-gone")
    (first.path / "sub").symlink_to(outside)
    (home / PREFIX).symlink_to(outside)
    with AgentFolder(home) as second:
        for name, text in {"task.md": "two", "agent.py": "print(2)", "sub/x.py": "y"}.items():
            second.write(name, text)
        # a link planted in the fresh folder itself (a program outliving its harness) is not written through
        os.symlink(victim, second.path / "late.txt")
        with pytest.raises(OSError):
            second.write("late.txt", "through the link")
    assert second.path != first.path and second.path.parent == home and not second.path.is_symlink()
    assert (second.path / "task.md").read_text() == "two" and (second.path / "sub" / "x.py").read_text() == "y"
    assert victim.read_text() == "host" and os.listdir(outside) == []
    assert not os.path.lexists(first.path) and not os.path.lexists(home / PREFIX)  # removed, links unfollowed
    assert outside.is_dir()


# ---- cases 2 and 4: what reaches the endpoint ----------------------------------------------------------------
# The program sends what an attacker would: malformed HTTP and JSON, a lone surrogate, nonsense parameters, then
# one call asking for 10**9 completion tokens, a 2 MiB prompt and a 200k-character prompt, under --token-limit
# 3000. Each answer's status and first line is printed as ANSWER <case> <status> <one line>.
HOSTILE = textwrap.dedent(r'''
    import http.client, json, os, socket, time
    from urllib.parse import urlsplit

    url = urlsplit(os.environ["OPENAI_BASE_URL"])

    def raw(case, data, timeout=60):
        sock = socket.create_connection((url.hostname, url.port), timeout=timeout)
        started = time.monotonic()
        try:
            sock.sendall(data)
            reply = b""
            while b"\r\n\r\n" not in reply:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                reply += chunk
            head, _, rest = reply.partition(b"\r\n\r\n")
            status = head.split(b" ")[1].decode() if head.startswith(b"HTTP/") else "none"
            length = 0
            for line in head.split(b"\r\n")[1:]:
                key, _, value = line.partition(b":")
                if key.strip().lower() == b"content-length":
                    length = int(value)
            while len(rest) < length:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                rest += chunk
            lines = rest.decode("utf-8", "replace").strip().splitlines() or [""]
            print("ANSWER", case, status, len(lines), round(time.monotonic() - started), lines[0][:300], flush=True)
        except OSError as exc:
            print("ANSWER", case, "error", 1, round(time.monotonic() - started), repr(exc), flush=True)
        finally:
            sock.close()

    def post(case, body, headers=None):
        data = body if isinstance(body, bytes) else body.encode()
        head = {"Host": "x", "Content-Type": "application/json", "Content-Length": str(len(data)), **(headers or {})}
        raw(case, b"POST /v1/chat/completions HTTP/1.1\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in head.items()).encode() + b"\r\n" + data)

    def chat(case, text, **extra):
        post(case, json.dumps({"model": "mlab", "messages": [{"role": "user", "content": text}], **extra}))

    post("bad-length", "{}", {"Content-Length": "abc"})
    post("negative-length", "{}", {"Content-Length": "-5"})
    raw("chunked", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"2\r\n{}\r\n0\r\n\r\n")
    raw("garbage-head", b"\x00\xff\xfe GARBAGE\r\n\r\n")
    raw("bad-header", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\x00\xff: \xff\r\n\r\n{}")
    post("not-json", b"\xff\xfe{not json")
    post("not-utf8-json", b'{"messages": [{"role": "user", "content": "\xff\xfe"}]}')
    post("surrogate", '{"messages": [{"role": "user", "content": "lone \\ud800 surrogate"}]}')
    post("surrogate-role", '{"messages": [{"role": "\\udfff", "content": "x"}]}')
    post("messages-not-list", json.dumps({"messages": "hello"}))
    post("message-not-object", json.dumps({"messages": [7]}))
    post("content-object", json.dumps({"messages": [{"role": "user", "content": {"a": [1]}}]}))
    chat("max-tokens-text", "x", max_tokens="lots")
    chat("max-tokens-negative", "x", max_tokens=-4)
    chat("max-tokens-huge-float", "x", max_tokens=1e400)
    chat("temperature-text", "x", temperature="hot")
    chat("stop-object", "x", stop={"a": 1})
    chat("greedy", "hello", max_tokens=10**9)
    chat("two-mib", "y" * (2 * 2**20))
    chat("200k", "z" * 200_000)
''')


def _hostile_run(tmp_path: Path, sandbox: str):
    make_sandbox(sandbox)
    (tmp_path / "hostile.py").write_text(HOSTILE)
    # a greedy upstream: it bills a prompt at a token a byte and every completion token a call allows
    def usage(body: dict, text: str) -> tuple[int, int]:
        prompt = sum(len(str(m.get("content", "")).encode()) for m in body["messages"])
        return prompt, int(body.get("max_completion_tokens") or body.get("max_tokens") or 10**6)

    with FakeLLMServer(lambda body: "fine", usage=usage) as server:
        done = mlab("run", "--task", "lite/wine", "--agent", "command", "--agent-option",
                    "command=python hostile.py", "--llm", "openai/gpt-4o-mini", "--llm-api-base", server.base_url,
                    "--sandbox", sandbox, "--max-steps", "10", "--token-limit", "3000",
                    "--run-dir", tmp_path / "run", cwd=tmp_path, env={"OPENAI_API_KEY": "sk-user-secret"})
    return done, server, tmp_path / "run"


@pytest.mark.parametrize("sandbox", [pytest.param(s, marks=[pytest.mark.slow] if s != "local" else [])
                                     for s in CONFINING])
@pytest.mark.slow  # over 2 s on two cores
def test_hostile_requests_get_one_line_each_and_the_token_budget_holds(tmp_path, sandbox):
    done, server, run_dir = _hostile_run(tmp_path, sandbox)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    trace = _trace(run_dir)
    output = "\n".join(s["observation"] for s in trace["steps"])
    answers = {}
    for line in output.splitlines():
        if line.startswith("ANSWER "):
            _, case, status, lines, seconds, first = (line.split(" ", 5) + [""])[:6]
            answers[case] = (status, int(lines), int(seconds), first)
    malformed = ["bad-length", "negative-length", "chunked", "garbage-head", "bad-header", "not-json",
                 "not-utf8-json", "surrogate", "surrogate-role", "messages-not-list", "message-not-object",
                 "content-object", "max-tokens-text", "max-tokens-negative", "max-tokens-huge-float",
                 "temperature-text", "stop-object"]
    assert set(answers) == {*malformed, "greedy", "two-mib", "200k"}, output
    # each answered with an HTTP error and one line; a stall would end in the program's own socket timeout and
    # show as status "error", as would a dropped link
    for case in malformed:
        status, lines, _seconds, _first = answers[case]
        assert status.isdigit() and 400 <= int(status) < 500 and lines == 1, (case, answers[case])
    # the greedy call went upstream capped at what the budget had left; the big prompts never went
    assert len(server.requests) == 1, [len(json.dumps(r.body)) for r in server.requests]
    sent = server.requests[0].body
    assert sent["messages"][-1]["content"] == "hello"
    assert 0 < int(sent.get("max_completion_tokens") or sent.get("max_tokens")) < 3000
    assert answers["greedy"][0] == "200"
    assert answers["two-mib"][0] == answers["200k"][0] == "429"
    calls = read_call_log(run_dir / "llm_calls.jsonl")
    assert len(calls) == 1 and calls[0]["error"] is None
    assert trace["usage"]["prompt_tokens"] + trace["usage"]["completion_tokens"] <= 3000, trace["usage"]
    assert trace["end_reason"].startswith("budget reached:"), trace["end_reason"]


# ---- case 3: connections -------------------------------------------------------------------------------------
def _serve(request: ChatRequest) -> Completion:
    return Completion(text="hi", prompt_tokens=1, completion_tokens=1, model="m")


def _post(socket_path: Path) -> bytes:
    body = json.dumps({"messages": [{"role": "user", "content": "x"}]}).encode()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(30)
        sock.connect(str(socket_path))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
                     + body)
        return sock.recv(65536)


@pytest.mark.slow  # over 2 s on two cores
def test_idle_connections_neither_pile_up_threads_nor_shut_out_a_call_for_long(tmp_path, monkeypatch):
    from mlab.core.llm import unix_http

    monkeypatch.setattr(unix_http, "IDLE_TIMEOUT_S", 1.0)
    before = threading.active_count()
    idle: list[socket.socket] = []
    with ModelEndpoint(_serve, tmp_path) as endpoint:
        try:
            for _ in range(150):  # an attacker's connections that never send a byte
                sock = socket.socket(socket.AF_UNIX)
                sock.connect(str(endpoint.socket_path))
                idle.append(sock)
            peak = threading.active_count()
            time.sleep(0.5)
            peak = max(peak, threading.active_count())
            assert peak - before <= unix_http.MAX_CONNECTIONS + 2, peak - before
            # the server ends every idle connection after its read timeout, those queued beyond the cap in turn
            deadline = time.monotonic() + 60
            for sock in idle:
                sock.settimeout(max(0.1, deadline - time.monotonic()))
                while sock.recv(65536):
                    pass
            assert _post(endpoint.socket_path).startswith(b"HTTP/1.1 200")
        finally:
            for sock in idle:
                sock.close()


def test_an_idle_connection_is_closed_after_the_read_timeout(tmp_path, monkeypatch):
    from mlab.core.llm import unix_http

    monkeypatch.setattr(unix_http, "IDLE_TIMEOUT_S", 0.5)
    with ModelEndpoint(_serve, tmp_path) as endpoint, socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(endpoint.socket_path))
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\n")  # a request that never ends
        sock.settimeout(60)  # a deadline for the wait, not a bound on the server's timing
        closed = sock.recv(1024)
        assert closed == b"" or closed.startswith(b"HTTP/1.1 408"), closed


def test_held_budget_is_never_crossed_by_concurrent_greedy_calls(tmp_path):
    """Calls held to the budget (the endpoint's) reserve before they go: 16 at once, each asking for 10**9
    completion tokens from a backend that bills all it is allowed, never spend more than the limit."""
    from concurrent.futures import ThreadPoolExecutor

    from mlab.core.errors import BudgetExceeded
    from mlab.core.llm.client import LLMClient
    from tests.test_scores_not_bought import SlowBackend

    backend = SlowBackend("m")
    llm = LLMClient({"main": backend, "fast": backend, "edit": backend}, log_path=tmp_path / "llm_calls.jsonl",
                    max_tokens=3000)

    def call(_i: int) -> str:
        try:
            llm.complete("hello " * 20, hold_budget=True, max_completion_tokens=10**9)
            return "ok"
        except BudgetExceeded:
            return "refused"

    with ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(call, range(16)))
    assert llm.usage.total_tokens <= 3000, llm.usage.total_tokens
    assert "ok" in outcomes and "refused" in outcomes
    assert len(read_call_log(tmp_path / "llm_calls.jsonl")) == outcomes.count("ok")


def test_a_call_holding_a_lone_surrogate_keeps_its_line_in_the_call_log(tmp_path):
    """What the endpoint refuses may still come from an agent inside the harness: its call is logged, not lost."""
    from mlab.core.llm.client import LLMClient
    from mlab.core.models import Message
    from tests.test_scores_not_bought import SlowBackend

    backend = SlowBackend("m")
    llm = LLMClient({"main": backend, "fast": backend, "edit": backend}, log_path=tmp_path / "llm_calls.jsonl")
    llm.complete([Message(role="user", content="lone \ud800 surrogate")])
    calls = read_call_log(tmp_path / "llm_calls.jsonl")
    assert len(calls) == 1 and "surrogate" in calls[0]["messages"][0]["content"]


def test_held_cost_budget_caps_a_greedy_call_where_the_price_is_given(tmp_path):
    """Under --cost-limit with --price, a held call's completion is capped at what the money left buys, and a
    prompt that could cost more than is left is refused before it is sent."""
    from mlab.core.errors import BudgetExceeded
    from mlab.core.llm.client import LLMClient
    from tests.test_scores_not_bought import SlowBackend

    backend = SlowBackend("m")
    price = [1.0, 10.0]  # USD per million prompt and completion tokens
    llm = LLMClient({"main": backend, "fast": backend, "edit": backend}, log_path=tmp_path / "llm_calls.jsonl",
                    max_cost=0.01, prices={"main": price})
    llm.complete("hello " * 20, hold_budget=True, max_completion_tokens=10**9)
    assert llm.usage.cost_usd <= 0.01, llm.usage
    with pytest.raises(BudgetExceeded):
        llm.complete("x" * 20_000, hold_budget=True)  # $0.02 of prompt at most: more than is left
    assert len(read_call_log(tmp_path / "llm_calls.jsonl")) == 1


SOCKET_SWAP = textwrap.dedent(r'''
    import json, os, socket, urllib.request
    path = open(f"/proc/{os.getppid()}/cmdline").read().split("\0")[3]  # the forwarder's SOCKET argument
    for name, attempt in (("unlink", lambda: os.unlink(path)), ("rename", lambda: os.rename(path, path + ".x")),
                          ("replace", lambda: socket.socket(socket.AF_UNIX).bind(path + ".new") or
                           os.replace(path + ".new", path))):
        try:
            attempt()
            print("SOCKET", name, "done", flush=True)
        except OSError as exc:
            print("SOCKET", name, "refused", exc.errno, flush=True)
    body = json.dumps({"messages": [{"role": "user", "content": "still there?"}]}).encode()
    request = urllib.request.Request(os.environ["OPENAI_BASE_URL"] + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        print("ANSWERED", json.loads(response.read())["choices"][0]["message"]["content"], flush=True)
''')


@pytest.mark.parametrize("sandbox", [pytest.param(s, marks=[pytest.mark.slow] if s != "local" else [])
                                     for s in CONFINING])
@pytest.mark.slow  # over 2 s on two cores
def test_the_program_can_neither_remove_nor_replace_the_endpoints_socket(tmp_path, sandbox):
    make_sandbox(sandbox)
    (tmp_path / "swap.py").write_text(SOCKET_SWAP)
    with FakeLLMServer(lambda body: "yes") as server:
        done = mlab("run", "--task", "lite/wine", "--agent", "command", "--agent-option", "command=python swap.py",
                    "--llm", "openai/gpt-4o-mini", "--llm-api-base", server.base_url, "--sandbox", sandbox,
                    "--run-dir", tmp_path / "run", cwd=tmp_path, env={"OPENAI_API_KEY": "sk-x"})
    assert done.returncode == 0, done.stderr
    output = "\n".join(s["observation"] for s in _trace(tmp_path / "run")["steps"])
    assert [line.split()[2] for line in output.splitlines() if line.startswith("SOCKET ")] == ["refused"] * 3, output
    assert "ANSWERED yes" in output
    assert not list((tmp_path / "run").glob(".endpoint-*"))  # the socket's folder goes with the session
