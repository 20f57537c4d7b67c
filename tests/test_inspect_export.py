"""`mlab export --format inspect`: runs as Inspect AI eval logs, read back with inspect_ai's own reader and shown by
`inspect view` in a real headless Chromium."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.fixtures.agents_fixtures import fixture_registry, research_response, run_agent
from tests.fixtures.bench_cli import REGISTRY
from tests.fixtures.cli import mlab, mlab_in_process


def inspect_log():
    """inspect_ai's log module, imported when a test reads a log (at collection it costs every worker seconds)."""
    return pytest.importorskip("inspect_ai.log", reason="inspect-ai is not installed (pip install -e '.[inspect]')")


LIST = ("List Files", {"dir_path": "."})
RUN = ("Execute Script", {"script_name": "train.py"})
FINAL = ("Final Answer", {"final_answer": "done"})


def exported(folder: Path, out: Path, home: Path) -> list[Path]:
    result = mlab_in_process("export", "--format", "inspect", folder, "--out", out, "--json", home=home)
    assert result.returncode == 0, result.stderr
    return [Path(p) for p in json.loads(result.stdout)["logs"]]


def reported(folder: Path, home: Path) -> dict[str, dict]:
    result = mlab_in_process("report", folder, "--json", "--no-plots", "--no-html", "--out", folder.parent / "report",
                             home=home)
    assert result.returncode == 0, result.stderr
    return {row["run_dir"]: row for row in json.loads(result.stdout)["runs"]}


def check_against_report(logs: list[Path], rows: dict[str, dict], bench: Path) -> int:
    """Every sample's scores, tokens and counts equal the report's row for its run; returns the samples seen."""
    seen = 0
    for path in logs:
        log = inspect_log().read_eval_log(str(path))
        assert log.status == "success" and log.samples
        assert [s.epoch for s in log.samples] == list(range(1, len(log.samples) + 1))
        for sample in log.samples:
            run_dir = Path(sample.metadata["run_dir"]).relative_to(bench).as_posix()
            row = rows[run_dir]
            assert (log.eval.task, log.eval.solver) == (row["task"], row["agent"])
            assert sample.metadata["seed"] == row["seed"]
            scores = {name: score.value for name, score in sample.scores.items()}
            expected = {"final_score": row["score"], "improvement": row["improvement"], "success": row["success"],
                        "valid": row["valid"]}
            assert scores == {k: v for k, v in expected.items() if v is not None}, (run_dir, scores, expected)
            tokens = sum(u.total_tokens for u in sample.model_usage.values())
            assert tokens == row["prompt_tokens"] + row["completion_tokens"]
            model_events = [e for e in sample.events if e.event == "model"]
            tool_events = [e for e in sample.events if e.event == "tool"]
            assert len(model_events) == row["llm_calls"] and len(tool_events) == row["steps"]
            assert sum(e.output.usage.total_tokens for e in model_events) == tokens
            # the first prompt, then per step the reply that chose the action and the observation it got
            replies = [m for m in sample.messages if m.role == "assistant"]
            answers = [m for m in sample.messages if m.role == "tool"]
            assert len(replies) == len(answers) == row["steps"]
            assert [m.tool_calls[0].function for m in replies] == [e.function for e in tool_events]
            assert [m.text for m in answers] == [e.result for e in tool_events]
            seen += 1
    return seen


# ---- fast: a small bench of the test plugins -------------------------------------------------------------
@pytest.fixture(scope="module")
def small_bench(tmp_path_factory):
    root = tmp_path_factory.mktemp("small-bench")
    home, bench = root / "home", root / "bench"
    result = mlab("bench", "--tasks", "fixture/counter", "--agents", "fixture-appender,baseline", "--runs", "2",
                  "--workers", "2", "--agent-option", "steps=3", "--bench-dir", bench, "--registry", REGISTRY,
                  home=home)
    assert result.returncode == 0, result.stderr
    return bench, home


@pytest.mark.slow
def test_a_bench_exports_one_log_per_task_and_agent_with_the_reports_numbers(small_bench, tmp_path):
    bench, home = small_bench
    logs = exported(bench, tmp_path / "logs", home)
    assert len(logs) == 2 and all(p.suffix == ".eval" and p.parent == tmp_path / "logs" for p in logs)
    rows = reported(bench, home)
    assert check_against_report(logs, rows, bench) == 4
    improvements = [r["improvement"] for r in rows.values() if r["agent"] == "fixture-appender"]
    assert all(i is not None and i > 0 for i in improvements), rows  # the verdict carried, not only the score
    headers = [inspect_log().read_eval_log(str(p), header_only=True) for p in logs]
    assert len({h.eval.task_id for h in headers}) == 2  # inspect view groups retries by task_id
    for header in headers:
        assert header.eval.config.epochs == 2 and header.results.total_samples == 2
        means = {s.name: s.metrics["mean"].value for s in header.results.scores if s.metrics}
        agent_rows = [r for r in rows.values() if r["agent"] == header.eval.solver]
        assert means["final_score"] == pytest.approx(sum(r["score"] for r in agent_rows) / 2)


def test_one_run_folder_exports_its_messages_events_and_usage(tmp_path):
    replies = [research_response(*LIST, 1), research_response(*FINAL, 2)]
    trace = run_agent(tmp_path / "run", "research", replies)
    from mlab.core.bench.export_inspect import export

    [path] = export(tmp_path / "run", tmp_path / "logs", registry=fixture_registry())
    log = inspect_log().read_eval_log(str(path))
    [sample] = log.samples
    assert (log.eval.task, log.eval.solver, sample.epoch) == (trace.config.task, "research", 1)
    assert [m.role for m in sample.messages] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert [m.text for m in sample.messages if m.role == "assistant"] == replies
    assert sample.messages[2].tool_calls[0].arguments == LIST[1]
    assert sample.messages[3].text == trace.steps[0].observation
    kinds = [(e.event, getattr(e, "function", None)) for e in sample.events]
    assert kinds == [("model", None), ("tool", "List Files"), ("model", None), ("tool", "Final Answer")]
    [usage] = sample.model_usage.values()
    assert (usage.input_tokens, usage.output_tokens) == (trace.usage.prompt_tokens, trace.usage.completion_tokens)
    # it submitted nothing: no score, an invalid run, and why in the explanation
    assert trace.final_score is None and "final_score" not in sample.scores
    assert sample.scores["valid"].value is False and sample.scores["success"].value is False
    assert trace.final_score_error in sample.scores["valid"].explanation


@pytest.mark.parametrize("args, fragment", [
    (["export", "--format", "inspect", "no-such-folder"], "does not exist"),
    (["export", "--format", "csv", "."], "'csv' is not one of 'inspect'"),
    (["export", "tests"], "Missing option '--format'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, fragment):
    result = mlab_in_process(*args, cwd=tmp_path if "no-such-folder" in args else None)
    assert result.returncode == 2, result.stdout + result.stderr
    assert fragment in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_folder_without_runs_is_refused_before_anything_is_written(tmp_path):
    result = mlab_in_process("export", "--format", "inspect", tmp_path, "--out", tmp_path / "logs")
    assert result.returncode == 2 and "holds no runs" in result.stderr, result.stderr
    assert not (tmp_path / "logs").exists()


# ---- slow: the acceptance bench, two agents x two lite tasks x two seeds, and inspect view --------------
@pytest.fixture(scope="module")
def lite_export(tmp_path_factory):
    root = tmp_path_factory.mktemp("lite-bench")
    home, bench = root / "home", root / "bench"
    script = root / "react.jsonl"
    script.write_text("".join(json.dumps(research_response(*step, n)) + "\n"
                              for n, step in enumerate((LIST, RUN, FINAL), start=1)))
    result = mlab("bench", "--tasks", "lite/wine,lite/diabetes", "--agents", "baseline,react", "--llm",
                  f"scripted:{script}", "--runs", "2", "--workers", "2", "--bench-dir", bench, home=home, timeout=900)
    assert result.returncode == 0, result.stderr
    return bench, home, exported(bench, root / "logs", home)


@pytest.mark.slow
def test_the_lite_bench_reads_back_with_the_reports_scores_tokens_and_counts(lite_export):
    bench, home, logs = lite_export
    assert len(logs) == 4
    rows = reported(bench, home)
    assert check_against_report(logs, rows, bench) == 8
    react = [r for r in rows.values() if r["agent"] == "react"]
    assert all(r["improvement"] is not None and r["llm_calls"] == 3 and r["steps"] == 3 for r in react), react


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("chromedriver") is None or shutil.which("chromium") is None,
                    reason="no chromium and chromedriver on PATH (`make browser`)")
def test_inspect_view_shows_the_exported_samples_in_chromium(lite_export, tmp_path):
    from tests.fixtures.webdriver import Browser

    _bench, _home, logs = lite_export
    port = _free_port()
    inspect = Path(sys.executable).with_name("inspect")
    server = subprocess.Popen([str(inspect), "view", "start", "--log-dir", str(logs[0].parent), "--host",
                               "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/logs", timeout=5) as response:
                    listing = json.loads(response.read())
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "inspect view did not start"
                time.sleep(0.5)
        assert len(listing["files"]) == 4
        react = next(p for p in logs if "-react-" in p.name and "wine" in p.name)
        with Browser(tmp_path / "profile") as browser:
            browser.open(f"http://127.0.0.1:{port}/")
            # the listing: four logs, each agent a task of its own (not hidden as a retry of another)
            browser.wait_for("return document.body.innerText.includes('4 rows')", timeout_s=60)
            # a log's sample list: both seeds as epochs, with the verdict's scores as columns
            browser.open(f"http://127.0.0.1:{port}/#/logs/{urllib.parse.quote(react.name)}")
            text = browser.wait_for("var t = document.body.innerText; "
                                    "return t.includes('2 Samples') && t.includes('IMPROVEMENT') ? t : null",
                                    timeout_s=60)
            assert "lite/wine" in text and "FINAL_SCORE" in text and "SUCCESS" in text
            # one sample's transcript: the model calls and the actions as tool calls
            sample = urllib.parse.quote("lite/wine", safe="")
            browser.open(f"http://127.0.0.1:{port}/#/logs/{urllib.parse.quote(react.name)}/samples/sample/{sample}/2/")
            text = browser.wait_for("var t = document.body.innerText; return t.includes('Epoch 2') && "
                                    "t.includes('Execute Script') ? t : null", timeout_s=60)
            assert "List Files" in text and "Final Answer" in text and "MODEL CALL" in text.upper()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
