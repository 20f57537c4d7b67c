"""A model on a local OpenAI-compatible server (vLLM, llama.cpp) through `--llm-api-base`: `mlab bench` and
`mlab run` need no provider key for it; and a bench imports litellm once, in the process its runs are forked from,
never in each run, nor at all when no run uses a litellm model.

Imports are observed with PYTHONPROFILEIMPORTTIME: each process writes one line per module it imports to its
stderr, which for the bench's zygote is logs/workers.log and for each run its own log."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.fixtures.bench_cli import REGISTRY, db_rows
from tests.fixtures.cli import entry, mlab
from tests.fixtures.llm_agent import AGENT_NAME, respond
from tests.fixtures.llm_server import FakeLLMServer

TASK = "fixture/counter"
NO_KEYS = dict.fromkeys(("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY"))
IMPORT_TIMES = {"PYTHONPROFILEIMPORTTIME": "1"}
LITELLM_IMPORTED = re.compile(r"^import time:.*\|\s*litellm\s*$", re.MULTILINE)


def bench(bench_dir: Path, *args: object, env: dict):
    return mlab("bench", "--tasks", TASK, "--bench-dir", bench_dir, "--registry", REGISTRY, "--agents",
                "fixture-llm-stepper", "--agent-option", "steps=2", "--runs", "2", "--workers", "2", *args,
                env=env, timeout=300)


def imports_litellm(path: Path) -> bool:
    return LITELLM_IMPORTED.search(path.read_text(errors="replace")) is not None


def assert_scored(bench_dir: Path, runs: int) -> None:
    rows = db_rows(bench_dir)
    assert [r["status"] for r in rows] == ["finished"] * runs, [r["end_reason"] for r in rows]
    assert all(r["final_score"] is not None and r["final_score_error"] is None for r in rows), rows


@pytest.mark.slow
def test_a_bench_against_a_local_server_needs_no_api_key(tmp_path):
    with FakeLLMServer(lambda body: "go on") as server:
        result = bench(tmp_path / "bench", "--llm", "openai/gpt-4o-mini", "--llm-api-base", server.base_url,
                       env=NO_KEYS)
        assert result.returncode == 0, result.stderr
        assert len(server.requests) == 2 * 2  # each run asked at each of its 2 steps
    assert_scored(tmp_path / "bench", 2)


@pytest.mark.slow
def test_a_bench_of_a_provider_model_without_its_key_stops_with_one_line(tmp_path):
    result = bench(tmp_path / "bench", "--llm", "openai/gpt-4o-mini", env=NO_KEYS)
    assert result.returncode == 2
    assert result.stderr == "mlab: error: LLM 'openai/gpt-4o-mini': openai/gpt-4o-mini needs an API key: set " \
                            "OPENAI_API_KEY\n"
    assert not (tmp_path / "bench" / "runs").exists()


@pytest.mark.slow
def test_a_run_against_a_local_server_needs_no_api_key(tmp_path):
    with FakeLLMServer(respond) as server:
        result = mlab("run", "--task", TASK, "--agent", AGENT_NAME, "--llm", "openai/gpt-4o-mini", "--llm-api-base",
                      server.base_url, "--run-dir", tmp_path / "run", entry=entry("tests.fixtures.llm_agent"),
                      env=NO_KEYS, timeout=300)
        assert result.returncode == 0, result.stderr
        assert server.requests
    trace = json.loads((tmp_path / "run" / "trace.json").read_text())
    assert trace["status"] == "finished" and trace["final_score"] is not None, trace["end_reason"]


@pytest.mark.slow
def test_a_bench_imports_litellm_once_before_its_runs_fork(tmp_path):
    out = tmp_path / "bench"
    with FakeLLMServer(lambda body: "go on") as server:
        result = bench(out, "--llm", "openai/gpt-4o-mini", "--llm-api-base", server.base_url,
                       env={**NO_KEYS, "OPENAI_API_KEY": "sk-local", **IMPORT_TIMES})
        assert result.returncode == 0, result.stderr
    assert_scored(out, 2)
    assert imports_litellm(out / "logs" / "workers.log")  # the zygote, which forks the runs
    run_logs = [p for p in (out / "logs").iterdir() if p.name != "workers.log"]
    assert len(run_logs) == 2 and not any(map(imports_litellm, run_logs))


@pytest.mark.slow
def test_a_bench_of_scripted_models_never_imports_litellm(tmp_path):
    script = tmp_path / "answers.jsonl"
    script.write_text("\n".join(json.dumps("go on") for _ in range(10)) + "\n")
    out = tmp_path / "bench"
    result = bench(out, "--llm", f"scripted:{script}", env={**NO_KEYS, **IMPORT_TIMES})
    assert result.returncode == 0, result.stderr
    assert_scored(out, 2)
    assert len(list((out / "logs").iterdir())) == 3 and not any(map(imports_litellm, (out / "logs").iterdir()))
    assert LITELLM_IMPORTED.search(result.stderr) is None  # nor the bench's own process
