"""The tool tasks score the agent's tool: the scorer runs it in the scoring sandbox on hidden inputs, with the
model behind the budgeted LLM proxy (a unix socket; the key stays in the harness).

The model is a real HTTP server on 127.0.0.1 (OpenAI-compatible) playing a small scripted LLM: it answers the
reference tools' prompts from what an LLM would know (which paper a name refers to) and from the prompt's text.
"""
from __future__ import annotations

import http.server
import json
import re
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

from mlab.core import InvalidSubmission
from mlab.core.llm.proxy import LLMProxy, ProxyBudget, Reply
from mlab.core.plugins.registry import load_registry
from mlab.core.run import taskdata
from tests.fixtures.harness import check_task
from tests.fixtures.llm_server import send_json

QUIET = {"log": lambda _m: None}
SECRET = "secret-key-7731"
# What the scripted model "knows": the paper each name refers to, as search keywords.
KNOWN = {
    "LoRA": "low-rank adaptation large language models", "Adam": "Adam stochastic optimization",
    "dropout": "preventing co-adaptation feature detectors", "batch normalization": "batch normalization",
    "ResNet": "deep residual learning image recognition", "Vision Transformer": "image patches transformers",
    "VGG": "very deep convolutional networks", "U-Net": "biomedical image segmentation",
    "Open Graph Benchmark": "open graph benchmark datasets", "graph convolutional networks": "graph convolutional",
    "GraphSAGE": "inductive representation learning large graphs", "graph attention networks": "graph attention",
    "knowledge distillation": "distilling knowledge", "DistilBERT": "distilled version BERT",
    "mixed precision training": "mixed precision training", "Chinchilla": "compute-optimal large language models",
    "Toolformer": "teach themselves tools", "Self-Consistency": "self-consistency chain thought",
    "Tree of Thoughts": "tree thoughts deliberate problem solving", "Reflexion": "verbal reinforcement learning",
    "PromptTuning": "parameter-efficient prompt tuning", "Transformer": "attention all you need",
    "BERT": "pre-training deep bidirectional transformers", "GLUE": "multi-task benchmark language understanding",
    "ReAct": "synergizing reasoning acting", "chain-of-thought": "chain-of-thought prompting elicits",
    "MLAgentBench": "evaluating language agents machine learning experimentation",
}
# ... and the searches it would suggest for a topic.
SEARCHES = {
    "parameter-efficient": ["low-rank adaptation", "prompt tuning frozen", "adapter modules transfer"],
    "factual": ["hallucination detection", "truthful falsehoods", "faithfulness factuality summarization",
                "hallucination benchmark"],
    "agents": ["reasoning acting agents", "tools language models", "agents verbal reinforcement",
               "generative agents behavior"],
    "node classification": ["graph convolutional", "graph attention", "inductive node embeddings"],
    "generative models of images": ["generative adversarial", "variational autoencoder", "diffusion images"],
}
STOP = set("the of and for with that this from into which language models model large using based".split())


def _words(text: str) -> set[str]:
    return {w.removesuffix("s") for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 3 and w not in STOP}


def scripted_answer(prompt: str) -> str:
    if prompt.startswith("TASK: find citations"):
        paragraph = prompt.split("Paragraph:\n", 1)[1].lower()
        found = [name for name in KNOWN if name.lower() in paragraph]
        found = [n for n in found if not any(n != m and n.lower() in m.lower() for m in found)]
        return json.dumps([{"phrase": n, "query": KNOWN[n]} for n in found])
    if prompt.startswith("TASK: choose the cited paper"):
        phrase = re.search(r'defines "(.*?)"', prompt).group(1)
        candidates = re.findall(r"^(\d{4}\.\d{4,5}): (.*?) \(\d{4}\)\.", prompt, re.MULTILINE)
        wanted = _words(KNOWN.get(phrase, phrase))
        best = max(candidates, key=lambda c: len(wanted & _words(c[1])))
        return json.dumps({"arxiv_id": best[0] if wanted & _words(best[1]) else None})
    if prompt.startswith("TASK: search queries"):
        topic = prompt.split("on this topic: ", 1)[1].split("\n")[0]
        return json.dumps(next((q for key, q in SEARCHES.items() if key in topic.lower()), [topic]))
    if prompt.startswith("TASK: select relevant papers"):
        topic_line = prompt.split("Topic: ", 1)[1].split("\n")[0]
        topic = _words(topic_line + " " + " ".join(
            next((q for key, q in SEARCHES.items() if key in topic_line.lower()), [])))
        rows = re.findall(r"^(\d{4}\.\d{4,5}): (.*)$", prompt, re.MULTILINE)
        return json.dumps([i for i, text in rows if len(topic & _words(text)) >= 2])
    if prompt.startswith("TASK: summarize a paper"):
        abstract = prompt.split("Abstract: ", 1)[1]
        return f"The paper's main point: {abstract} This makes it a useful reference for the topic."
    if prompt.startswith("TASK: conclude"):
        return ("Across these works a common theme is that simple, general methods scale well, while they "
                "differ in what they assume about data and compute. Open questions remain about robustness, "
                "evaluation and how the methods combine; the reviewed papers give a solid starting point.")
    return "ok"


class ScriptedModel(http.server.BaseHTTPRequestHandler):
    calls: list = []  # (authorization header, prompt)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        ScriptedModel.calls.append((self.headers.get("Authorization"), prompt))
        text = scripted_answer(prompt)
        send_json(self, {"choices": [{"message": {"role": "assistant", "content": text}}],
                         "usage": {"prompt_tokens": len(prompt) // 4, "completion_tokens": len(text) // 4}})

    def log_message(self, *args):
        pass


@pytest.fixture
def model(monkeypatch):
    """The scripted model on 127.0.0.1, configured for the tool tasks with a key file agent code could see."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ScriptedModel)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    keys = Path(tempfile.mkdtemp(prefix="mlab-keys-", dir="/var/tmp"))
    (keys / "key.txt").write_text(SECRET + "\n")
    monkeypatch.setenv("MLAB_TOOL_LLM", "openai:scripted")
    monkeypatch.setenv("MLAB_TOOL_LLM_BASE_URL", f"http://127.0.0.1:{server.server_address[1]}/v1")
    monkeypatch.setenv("MLAB_TOOL_LLM_KEY_FILE", str(keys / "key.txt"))
    monkeypatch.setenv("MLAB_SANDBOX_RO", str(keys))  # shown to runs: scoring must cover it
    ScriptedModel.calls.clear()
    yield keys / "key.txt"
    server.shutdown()
    shutil.rmtree(keys, ignore_errors=True)


def get_task(short):
    return load_registry().get("tasks", f"mlagentbench/{short}")


def prepared_workspace(task, tmp_path: Path) -> Path:
    taskdata.prepare(task, **QUIET)
    workspace = tmp_path / f"ws-{task.short}"
    shutil.copytree(taskdata.public_dir(task), workspace)
    return workspace


def usage_records(task) -> list[dict]:
    path = taskdata.task_dir(task) / "scoring_llm_usage.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


# ---- the proxy itself ----------------------------------------------------------------------------------
def _post(socket_path: Path, payload: dict) -> tuple[int, dict]:
    import http.client
    import socket

    class Connection(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(str(socket_path))

    connection = Connection("localhost", timeout=10)
    connection.request("POST", "/v1/chat/completions", json.dumps(payload), {"Content-Type": "application/json"})
    response = connection.getresponse()
    answer = json.loads(response.read())
    connection.close()
    return response.status, answer


def test_proxy_counts_calls_and_tokens_and_refuses_beyond_the_budget(tmp_path):
    seen = []

    def upstream(messages, max_tokens, temperature):
        seen.append(max_tokens)
        return Reply(text="fine", prompt_tokens=30, completion_tokens=10)

    with LLMProxy(upstream, ProxyBudget(max_calls=3, max_tokens=100, max_tokens_per_call=64), tmp_path) as proxy:
        ask = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 500}
        answers = [_post(proxy.socket_path, ask) for _ in range(4)]
        malformed = _post(proxy.socket_path, {"prompt": "no messages"})
    with LLMProxy(upstream, ProxyBudget(max_calls=3, max_tokens=100), tmp_path) as small:
        huge = _post(small.socket_path, {"messages": [{"role": "user", "content": "word " * 200}]})
    assert huge[0] == 429 and small.usage.refused == 1 and len(seen) == 3  # never sent upstream
    # a call goes through while tokens are left (80 of 100 after two), then the budget is spent
    assert [status for status, _a in answers] == [200, 200, 200, 429]
    assert answers[0][1]["choices"][0]["message"]["content"] == "fine"
    assert "budget spent" in answers[3][1]["error"]["message"]
    assert seen == [64, 50, 10]  # completion tokens capped per call, then by what is left beside the prompt
    assert malformed[0] == 400
    assert proxy.usage.summary() == {"calls": 3, "prompt_tokens": 90, "completion_tokens": 30, "refused": 1,
                                     "failed": 1}
    assert not proxy.socket_path.exists()


def test_proxy_reports_an_upstream_failure_without_spending_budget(tmp_path):
    def upstream(messages, max_tokens, temperature):
        raise ConnectionError("endpoint down")

    with LLMProxy(upstream, ProxyBudget(max_calls=1, max_tokens=100), tmp_path) as proxy:
        status, answer = _post(proxy.socket_path, {"messages": [{"role": "user", "content": "hi"}]})
    assert status == 502 and "endpoint down" in answer["error"]["message"]
    assert proxy.usage.calls == 0 and proxy.usage.failed == 1


class EndpointRecorder(http.server.BaseHTTPRequestHandler):
    """Anthropic's messages API (with usage) and an OpenAI-compatible server that reports no usage."""

    seen: list = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        EndpointRecorder.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        if self.path.endswith("/messages"):
            reply = {"content": [{"type": "text", "text": "from claude"}],
                     "usage": {"input_tokens": 11, "output_tokens": 3}}
        else:
            reply = {"choices": [{"message": {"content": "from a local server"}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_http_upstream_speaks_both_providers_with_the_key_from_the_harness(tmp_path):
    from mlab.core.llm.proxy import HttpUpstream

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EndpointRecorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    key = tmp_path / "key"
    key.write_text("k-42\n")
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "x" * 400}]
    try:
        claude = HttpUpstream("anthropic", "claude-x", base, str(key))(messages, 50, 0.0)
        local = HttpUpstream("openai", "local-x", base)(messages, 50, 0.0)
    finally:
        server.shutdown()
    (path_a, headers_a, body_a), (path_o, headers_o, body_o) = EndpointRecorder.seen[-2:]
    assert path_a == "/v1/messages" and headers_a["x-api-key"] == "k-42" and body_a["system"] == "be brief"
    assert [m["role"] for m in body_a["messages"]] == ["user"] and body_a["model"] == "claude-x"
    assert (claude.text, claude.prompt_tokens, claude.completion_tokens) == ("from claude", 11, 3)
    assert path_o == "/v1/chat/completions" and "authorization" not in headers_o and body_o["max_tokens"] == 50
    assert local.text == "from a local server" and local.prompt_tokens == 102  # no usage reported: estimated


# ---- scoring the tool ----------------------------------------------------------------------------------
HAND_WRITTEN_TEX = ("We use the method proposed in PromptTuning \\cite{x} to adapt a frozen Transformer language "
                    "model to new tasks, and we compare it with fine-tuning BERT on the GLUE benchmark.")


@pytest.mark.slow
def test_hand_written_outputs_earn_nothing_beyond_the_placeholder(model, tmp_path):
    bib, review = get_task("bibtex-generation"), get_task("literature-review-tool")
    for task in (bib, review):
        workspace = prepared_workspace(task, tmp_path)
        placeholder = task.evaluate(workspace, taskdata.hidden_dir(task))
        assert placeholder == pytest.approx(0.1)  # the paragraph kept / a report written, nothing cited
        outputs = workspace / "outputs"
        outputs.mkdir()
        if task is bib:  # the issue's hand-written outputs, and the same for the second example
            for n in (1, 2):
                (outputs / f"paragraph_{n}.tex").write_text(HAND_WRITTEN_TEX)
                (outputs / f"paragraph_{n}.bib").write_text("@misc{x, title={Prompt tuning}, author={A. Person}, "
                                                            "year={2021}}")
        else:
            for n in (1, 2):
                (outputs / f"review_{n}.md").write_text(
                    "# Review\n\n## A paper (arXiv:2399.00001)\n\n" + "words " * 40 +
                    "\n\n## Another (arXiv:2399.00002)\n\n" + "words " * 40 +
                    "\n\n## Conclusion\n\n" + "conclusion " * 40)
        assert task.evaluate(workspace, taskdata.hidden_dir(task)) == pytest.approx(placeholder)
        (workspace / task.tool_script).unlink()
        with pytest.raises(InvalidSubmission, match="the scorer runs your tool"):
            task.evaluate(workspace, taskdata.hidden_dir(task))
    assert ScriptedModel.calls == []  # the placeholders call no model


DUMPING_TOOLS = {  # no LLM: cite every paper of the corpus everywhere / review the whole corpus
    "bibtex-generation": '''
import sys, paper_search
from pathlib import Path
papers = paper_search.papers()
every = " \\\\cite{" + ",".join(paper_search.cite_key(p) for p in papers) + "}"
text = Path(sys.argv[1]).read_text()
Path(sys.argv[2] + ".tex").write_text(" ".join(word + every for word in text.split()))
Path(sys.argv[2] + ".bib").write_text("\\n".join(paper_search.bibtex(p) for p in papers))
''',
    "literature-review-tool": '''
import sys, paper_search
from pathlib import Path
parts = ["# Review"] + [f"## {p['title']} (arXiv:{p['arxiv_id']})\\n\\n{p['abstract']}" for p in paper_search.papers()]
parts.append("## Conclusion\\n\\n" + "Many papers were reviewed here and they cover a wide range of subjects. " * 4)
Path(sys.argv[2]).write_text("\\n\\n".join(parts))
''',
}


@pytest.mark.slow
def test_a_tool_citing_the_whole_corpus_earns_little(model, tmp_path):
    for short, tool in DUMPING_TOOLS.items():
        task = get_task(short)
        workspace = prepared_workspace(task, tmp_path)
        (workspace / task.tool_script).write_text(tool)
        assert 0.1 < task.evaluate(workspace, taskdata.hidden_dir(task)) < 0.4, short  # the reference: ~1


@pytest.mark.slow
def test_reference_tools_score_high_through_the_proxy_and_the_key_stays_out(model, tmp_path):
    from mlab_tasks_mlagentbench.base import REFERENCE_DIR

    for short, floor in (("bibtex-generation", 0.9), ("literature-review-tool", 0.8)):
        task = get_task(short)
        workspace = prepared_workspace(task, tmp_path)
        shutil.copytree(REFERENCE_DIR / short, workspace, dirs_exist_ok=True)
        before = len(ScriptedModel.calls)
        score = task.evaluate(workspace, taskdata.hidden_dir(task))
        assert score >= floor, (short, score)
        calls = ScriptedModel.calls[before:]
        assert calls and all(auth == f"Bearer {SECRET}" for auth, _p in calls)  # the harness holds the key
        record = usage_records(task)[-1]
        assert record["inputs"] == 5 and record["calls"] == len(calls) and record["model"] == "scripted"
        assert record["prompt_tokens"] > 0 and record["refused"] == 0


SNOOPING_TOOL = '''
import os, sys, llm_tool
found = []
try:
    found.append("key file holds " + repr(open(%r).read()))  # covered: empty
except OSError as exc:
    found.append("key file unreadable: " + type(exc).__name__)
found.append("llm_config.json there: " + str(os.path.exists("llm_config.json")))
found.append(repr(sorted(os.environ.items())))
llm_tool.complete("SNOOP " + " | ".join(found))
'''


def test_no_key_reaches_the_scoring_sandbox(model, tmp_path):
    task = get_task("bibtex-generation")
    workspace = prepared_workspace(task, tmp_path)
    (workspace / "bibtex_generation.py").write_text(SNOOPING_TOOL % str(model))
    task.evaluate(workspace, taskdata.hidden_dir(task))
    snoops = [prompt for _auth, prompt in ScriptedModel.calls if prompt.startswith("SNOOP")]
    assert len(snoops) == 5  # one per hidden paragraph, each through the proxy
    for prompt in snoops:
        assert SECRET not in prompt
        assert ("key file unreadable" in prompt or "key file holds ''" in prompt)
        assert "llm_config.json there: False" in prompt
        assert "MLAB_LLM_PROXY_SOCKET" in prompt and "MLAB_TOOL_LLM" not in prompt


LOOPING_TOOL = '''
import sys, llm_tool
from pathlib import Path
paragraph = Path(sys.argv[1]).read_text()
Path(sys.argv[2] + ".tex").write_text(paragraph)  # what it produced before looping
refused = 0
while %s:
    try:
        llm_tool.complete("again")
    except llm_tool.LLMBudgetExhausted:
        refused += 1
'''


@pytest.mark.slow
def test_a_tool_that_loops_on_calls_is_cut_off_by_the_budget_and_scored_on_what_it_wrote(model, tmp_path,
                                                                                          monkeypatch):
    from mlab_tasks_mlagentbench.tasks import tools

    monkeypatch.setattr(tools, "SCORING_BUDGET", ProxyBudget(max_calls=4, max_tokens=10_000))
    task = get_task("bibtex-generation")
    workspace = prepared_workspace(task, tmp_path)
    (workspace / "bibtex_generation.py").write_text(LOOPING_TOOL % "refused < 50")
    assert task.evaluate(workspace, taskdata.hidden_dir(task)) == pytest.approx(0.1)  # the paragraph it kept
    assert sum(prompt == "again" for _a, prompt in ScriptedModel.calls) == 4 * 5  # the budget, per input
    record = usage_records(task)[-1]
    assert record["calls"] == 20 and [entry["refused"] for entry in record["per_input"]] == [50] * 5


@pytest.mark.slow
def test_a_tool_that_never_stops_is_cut_off_by_the_time_limit_and_scored_on_what_it_wrote(model, tmp_path,
                                                                                          monkeypatch):
    from mlab_tasks_mlagentbench.tasks import tools

    monkeypatch.setattr(tools, "SCORING_BUDGET", ProxyBudget(max_calls=4, max_tokens=10_000))
    monkeypatch.setattr(tools, "SECONDS_PER_INPUT", 6.0)
    task = get_task("bibtex-generation")
    workspace = prepared_workspace(task, tmp_path)
    (workspace / "bibtex_generation.py").write_text(LOOPING_TOOL % "True")
    assert task.evaluate(workspace, taskdata.hidden_dir(task)) == pytest.approx(0.1)
    assert sum(prompt == "again" for _a, prompt in ScriptedModel.calls) == 4 * 5
    assert all(entry["refused"] > 0 for entry in usage_records(task)[-1]["per_input"])


def test_the_harness_scorer_runs_the_tool_in_bwrap_through_the_proxy(model, tmp_path):
    from mlab_tasks_mlagentbench.base import REFERENCE_DIR
    from tests.fixtures.harness import harness

    if not load_registry().items["sandboxes"]["bwrap"].available()[0]:
        pytest.skip("bubblewrap cannot run here")
    task = get_task("bibtex-generation")
    workspace = prepared_workspace(task, tmp_path)
    for name in ("llm_tool.py", "paper_search.py", "paper_corpus.json", "llm_config.json"):
        (workspace / name).unlink()  # a submission holds no read-only files: the scorer links them in
    shutil.copytree(REFERENCE_DIR / task.short, workspace, dirs_exist_ok=True)
    score, error = harness(sandbox="bwrap").scorer.score_path(task, workspace)
    assert error is None and score == pytest.approx(1.0)
    assert all(auth == f"Bearer {SECRET}" for auth, _p in ScriptedModel.calls) and ScriptedModel.calls


def test_scoring_needs_no_network_and_says_so(model):
    for short in ("bibtex-generation", "literature-review-tool"):
        task = get_task(short)
        assert task.resources.network_at_run_time and not task.offline_ready  # the tool's LLM endpoint
        assert "paper_search.py" in task.read_only_files and "network" not in task.research_problem.split(
            "The score is")[0].lower()


@pytest.mark.slow
def test_check_task_passes_for_both_tool_tasks(model):
    for short in ("bibtex-generation", "literature-review-tool"):
        report = check_task(get_task(short))
        assert report.status == "passed", report
        assert report.starter == pytest.approx(0.1) and report.baseline_source.startswith("measured")
        assert report.reference >= 0.8


@pytest.mark.slow  # over 2 s on two cores
def test_an_endpoint_that_fails_every_call_gives_no_score_rather_than_a_low_one(monkeypatch, tmp_path):
    import socket

    from mlab_tasks_mlagentbench.base import REFERENCE_DIR
    from tests.fixtures.harness import harness

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("MLAB_TOOL_LLM", "openai:gone")
    monkeypatch.setenv("MLAB_TOOL_LLM_BASE_URL", f"http://127.0.0.1:{port}/v1")
    task = get_task("bibtex-generation")
    workspace = prepared_workspace(task, tmp_path)
    shutil.copytree(REFERENCE_DIR / task.short, workspace, dirs_exist_ok=True)
    score, error = harness().scorer.score_path(task, workspace)
    assert score is None and "the LLM endpoint failed on every call while scoring" in error
    assert "Connection refused" in error or "URLError" in error
