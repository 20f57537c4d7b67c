"""Scores and budgets that agent code cannot buy (issue 31, items 10-12): the tool tasks' LLM budget holds under
concurrent calls, timing scorers time what the submission computes on inputs it cannot know, and Validate
Submission cannot be mined for the held-out labels."""
from __future__ import annotations

import http.server
import importlib.util
import json
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mlab.core import LLM, BudgetExceeded, Completion, InvalidSubmission
from mlab.core.llm.client import LLMClient
from mlab.core.llm.proxy import HttpUpstream, LLMProxy, ProxyBudget
from mlab.core.plugins.registry import load_registry
from mlab.core.run import taskdata
from mlab.core.run.scoring import judge
from tests.fixtures.llm_server import send_json
from tests.fixtures.mlagentbench import text


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


# ---- item 11: timing scorers that time what the submission computes ------------------------------------
needs_transformers = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("torch", "transformers", "accelerate")),
    reason="needs the pack's llama extra (torch, transformers, accelerate)")

# The attack on the old timer, which seeded numpy with 0 after importing train.py: compute, while imported
# (untimed), the output for that batch with the slow forward, and make the timed forward a lookup.
PRECOMPUTING_TRAIN_PY = '''
_slow_forward = Conv2DLayer.forward
np.random.seed(0)
_batch = np.random.randn(32, 64, 64, 3)
_known = _slow_forward(Conv2DLayer(3, 8, 3, 2, 2, "relu"), _batch)
Conv2DLayer.forward = lambda self, features_batch: _known
'''


def pack_task(short):
    return load_registry().get("tasks", f"mlagentbench/{short}")


def not_a_success(task, workspace) -> str:
    """How the scorer turned the submission down: 'invalid: why' or its verdict; fails on a success."""
    try:
        score = task.evaluate(workspace, taskdata.hidden_dir(task))
    except InvalidSubmission as exc:
        return f"invalid: {exc}"
    verdict = judge(score, task.fixed_baseline, task)
    assert not verdict.success, verdict
    return str(verdict)


@pytest.mark.slow
def test_a_vectorization_train_py_that_precomputes_its_outputs_while_imported_is_no_success(tmp_path):
    task = pack_task("vectorization")
    taskdata.prepare(task, log=lambda _m: None)
    workspace = tmp_path / "ws"
    shutil.copytree(taskdata.public_dir(task), workspace)
    script = workspace / "train.py"
    script.write_text(script.read_text().replace('\nif __name__ == "__main__":',
                                                 PRECOMPUTING_TRAIN_PY + '\nif __name__ == "__main__":'))
    outcome = not_a_success(task, workspace)
    assert "another result than the starter's on the same inputs" in outcome, outcome


def test_the_pair_timer_bounds_loading_and_checks_outputs_against_the_starter():
    from mlab_tasks_mlagentbench import time_pair

    def report(load, clock="cpu", **digest):
        return {"load_seconds": load, "clock": clock, "digests": [digest]}

    forward = {"shape": [32, 33, 33, 8], "sum": 1000.0, "weighted": -12.5}
    assert time_pair.difference("forward", report(0.2, **forward), report(0.3, **forward)) is None
    slow_loader = time_pair.difference("forward", report(0.2, **forward), report(9.0, **forward))
    assert "9.0 s of CPU before its timed part" in slow_loader
    other = time_pair.difference("forward", report(0.2, **forward), report(0.2, **{**forward, "weighted": -12.4}))
    assert "another result" in other
    claims_gpu = time_pair.difference("forward", report(0.2, **forward), report(0.2, "wall", **forward))
    assert "another device" in claims_gpu
    tokens = list(range(100))
    assert time_pair.difference("generation", report(5, tokens=tokens), report(5, tokens=tokens[:95] + [0] * 5)) \
        is None  # a few flipped argmaxes (half precision on a GPU) are allowed
    assert "0 tokens" in time_pair.difference("generation", report(5, tokens=tokens), report(5, tokens=[]))
    assert "matched" in time_pair.difference("generation", report(5, tokens=tokens), report(5, tokens=[7] * 100))


@pytest.fixture
def llama_workspace(tmp_path, monkeypatch):
    """llama-inference prepared from the tiny LLaMA-architecture model the pack's tests use."""
    monkeypatch.setenv("MLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLAB_ALLOW_NO_GPU", "1")
    task = pack_task("llama-inference")
    taskdata.prepare(task, text.llama_and_wikitext(tmp_path / "src", lines=120), log=lambda _m: None)
    workspace = tmp_path / "ws"
    shutil.copytree(taskdata.public_dir(task), workspace)
    return task, workspace


# Above the first DO NOT EDIT block: load the model and data as the setup will, and generate for every batch
# (untimed under the old timer); the timed loop only looks the answers up.
LLAMA_PRECOMPUTE = '''
import torch as _torch
from transformers import AutoModelForCausalLM as _Model, AutoTokenizer as _Tokenizer
_dir = json.load(open("inference_config.json"))["model_dir"]
_tok, _lm = _Tokenizer.from_pretrained(_dir), _Model.from_pretrained(_dir)
_lines = [line for line in open("wikitext-103/wiki.test.tokens", encoding="utf-8").read().splitlines() if line.strip()]
_ids = [ids for ids in _tok(_lines, truncation=True, max_length=128)["input_ids"] if len(ids) == 128]
with _torch.no_grad():
    _answers = [_lm.generate(input_ids=_torch.tensor(_ids[i:i + 4]), max_length=129)[:, 128:].tolist()
                for i in range(0, min(len(_ids), 400), 4)]
'''
LLAMA_LOOKUP_LOOP = '''with torch.no_grad():
    total_time = 0
    generated_tokens = list(_answers)
    print("Average per token generation time: ", total_time / 100)
'''
LLAMA_NOTHING_LOOP = '''with torch.no_grad():
    total_time = 0
    generated_tokens = []
    print("Average per token generation time: ", total_time / 100)
'''


def _llama_with(workspace, timed_loop, before_setup=""):
    script = workspace / "inference.py"
    source = script.read_text()
    setup_at = source.index("#### DO NOT EDIT ######")
    loop_at, footer_at = source.index("with torch.no_grad():"), source.rindex("#### DO NOT EDIT ######")
    script.write_text(source[:setup_at] + before_setup + "\n" + source[setup_at:loop_at] + timed_loop + "\n"
                      + source[footer_at:])


@needs_transformers
@pytest.mark.slow
def test_a_llama_submission_that_generates_before_the_clock_and_looks_up_is_no_success(llama_workspace):
    task, workspace = llama_workspace
    _llama_with(workspace, LLAMA_LOOKUP_LOOP, LLAMA_PRECOMPUTE)
    outcome = not_a_success(task, workspace)
    assert "generated other tokens than the starter's" in outcome, outcome


@needs_transformers
@pytest.mark.slow
def test_a_llama_submission_that_generates_nothing_is_no_success(llama_workspace):
    task, workspace = llama_workspace
    _llama_with(workspace, LLAMA_NOTHING_LOOP)
    outcome = not_a_success(task, workspace)
    assert "generated other tokens than the starter's" in outcome and "0 tokens" in outcome, outcome


# ---- item 10: Validate Submission is no label oracle -----------------------------------------------------
def test_the_one_row_attack_on_validate_submission_recovers_at_most_its_call_budget_less_one(tmp_path):
    import csv

    from mlab.core.models import Action
    from mlab.core.run.harness import Harness
    from mlab.core.run.snapshot import SnapshotStore
    from mlab.core.run.taskdata import TaskHome

    harness = Harness(load_registry(), TaskHome(tmp_path / "home"), sandbox="local")
    task = harness.task("lite/wine")
    harness.prepare(task)
    workspace = harness.new_workspace(task, tmp_path / "run" / "workspace", allow_validate=True)
    env = harness.environment(task, workspace, store=SnapshotStore(tmp_path / "run" / "store"),
                              sandbox_home=tmp_path / "run" / "home", timeout_s=60, allow_validate=True)
    try:
        budget = task.validation.max_calls
        assert f"At most {budget} calls a run" in env.available_actions()["Validate Submission"].description
        with open(workspace / "data" / "valid.csv", newline="") as f:
            ids = [row["id"] for row in csv.DictReader(f)]
        with open(harness.home.hidden_dir(task) / "valid_answers.csv", newline="") as f:
            truth = {row["id"]: int(row["label"]) for row in csv.DictReader(f)}

        def score(predictions: dict[str, int]) -> tuple[float | None, str]:
            with open(workspace / "valid_submission.csv", "w", newline="") as f:
                csv.writer(f).writerows([["id", "label"], *([i, predictions[i]] for i in ids)])
            observation, error = env.execute(Action(name="Validate Submission", args={}))
            return (None if error else float(observation.split(": ")[1].split(" ")[0])), observation

        # The attack: all rows 0, then one row at a time set to 1; the score going up, down or not at all tells
        # that row's label (1, 0 or 2).
        base, first = score(dict.fromkeys(ids, 0))
        assert first.endswith(f"call 1 of {budget}."), first
        recovered, answered, refused = {}, 1, ""
        for row in ids:
            probe, observation = score({**dict.fromkeys(ids, 0), row: 1})
            if probe is None:
                refused = observation
                break
            answered += 1
            recovered[row] = 1 if probe > base else 0 if probe < base else 2
    finally:
        env.close()
    assert answered == budget and "no Validate Submission calls left" in refused, (answered, refused)
    right = sum(truth[row] == label for row, label in recovered.items())
    assert right <= budget - 1 < len(ids), (right, budget, len(ids))  # the README's bound for this attack
