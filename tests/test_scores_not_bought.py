"""Scores and budgets that agent code cannot buy (issue 31, items 10-12): the tool tasks' LLM budget holds under
concurrent calls, timing scorers time what the submission computes on inputs it cannot know, and Validate
Submission cannot be mined for the held-out labels."""
from __future__ import annotations

import http.server
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mlab.core import LLM, BudgetExceeded, Completion
from mlab.core.llm.client import LLMClient
from mlab.core.llm.proxy import HttpUpstream, LLMProxy, ProxyBudget
from tests.fixtures.llm_server import send_json


# ---- item 12: the LLM budget under concurrency -----------------------------------------------------------
class SlowGreedyModel(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible model that takes its time and always uses every completion token it is allowed;
    it counts what it charged, apart from the proxy's own accounting."""

    charged: list[int] = []
    lock = threading.Lock()
    delay_s = 0.3

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = sum(len(m["content"]) for m in body["messages"]) // 4
        completion = int(body["max_tokens"])
        time.sleep(self.delay_s)
        with self.lock:
            self.charged.append(prompt + completion)
        send_json(self, {"choices": [{"message": {"role": "assistant", "content": "w " * completion}}],
                         "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})

    def log_message(self, *args):
        pass


def _proxy_post(socket_path: Path, payload: dict) -> int:
    import http.client
    import socket

    class Connection(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(str(socket_path))

    connection = Connection("localhost", timeout=120)
    connection.request("POST", "/v1/chat/completions", json.dumps(payload), {"Content-Type": "application/json"})
    status = connection.getresponse().status
    connection.close()
    return status


def test_forty_concurrent_calls_through_the_proxy_stay_within_the_token_budget(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowGreedyModel)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    SlowGreedyModel.charged = []
    upstream = HttpUpstream("openai", "greedy", f"http://127.0.0.1:{server.server_address[1]}/v1")
    budget = ProxyBudget(max_calls=100, max_tokens=60_000, max_tokens_per_call=2048)
    ask = {"messages": [{"role": "user", "content": "summarize this paragraph. " * 160}], "max_tokens": 4096}
    try:
        with LLMProxy(upstream, budget, tmp_path) as proxy:
            with ThreadPoolExecutor(40) as pool:
                statuses = list(pool.map(lambda _i: _proxy_post(proxy.socket_path, ask), range(40)))
    finally:
        server.shutdown()
    charged = sum(SlowGreedyModel.charged)
    assert charged <= budget.max_tokens, f"{charged} tokens charged upstream, budget {budget.max_tokens}"
    assert proxy.usage.tokens == charged
    # calls wait for those in flight rather than being refused while the budget still has room
    answered = statuses.count(200)
    assert answered == len(SlowGreedyModel.charged) and answered >= budget.max_tokens // (1000 + 2048) - 1
    assert statuses.count(429) == 40 - answered and proxy.usage.refused == 40 - answered


class SlowBackend(LLM):
    """An in-process backend that takes its time and uses all the completion tokens it may."""

    name = "slow"

    def complete(self, messages, **params):
        time.sleep(0.2)
        # the prompt is 120 bytes: a byte-level tokenizer makes at most 120 tokens of it
        return Completion(text="x", prompt_tokens=100,
                          completion_tokens=int(params.get("max_completion_tokens") or 400))


def test_concurrent_calls_of_the_run_client_overshoot_the_token_limit_by_at_most_one_call(tmp_path):
    backend = SlowBackend("m")
    llm = LLMClient({"main": backend, "fast": backend, "edit": backend}, log_path=tmp_path / "llm_calls.jsonl",
                    max_tokens=3000)

    def call(_i):
        try:
            llm.complete("hello " * 20, max_completion_tokens=400)
            return "ok"
        except BudgetExceeded:
            return "refused"

    with ThreadPoolExecutor(20) as pool:
        outcomes = list(pool.map(call, range(20)))
    # one call costs 500 tokens: the limit is crossed by at most the call that crossed it
    assert llm.usage.total_tokens <= 3000 + 500, llm.usage.total_tokens
    assert outcomes.count("ok") >= 6 and "refused" in outcomes
