"""A run folder is untrusted (issue 40): `mlab export` reads its files as `mlab view` does, never through a symlink,
so a run whose llm_calls.jsonl, steps.jsonl or trace.json links to another run's (or to any file of the host) exports
nothing of it, and one line says what was refused."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from mlab.core.bench.results import ResultsDB
from mlab.core.models import Action, RunConfig, Step, Trace
from tests.fixtures.agents_fixtures import TASK_NAME, fixture_registry
from tests.fixtures.cli import mlab_in_process

FORMATS = ("chat-jsonl", "inspect")


def write_run(run_dir: Path, marker: str, steps: int = 1) -> None:
    """A finished run of the fixture task: its trace, a step log and one model call, each text tagged with marker."""
    run_dir.mkdir(parents=True)
    now = time.time()
    trace = Trace(run_id=marker, config=RunConfig(task=TASK_NAME, agent="research", llm="scripted:none"),
                  started_at=now, status="finished", end_reason=marker, steps=[
                      Step(index=i, action=Action(name="List Files", args={"dir_path": "."}), started_at=now,
                           duration_s=0.1, observation=f"{marker} observation {i}", snapshot=f"step_{i:04d}")
                      for i in range(1, steps + 1)])
    (run_dir / "trace.json").write_text(trace.model_dump_json())
    header = json.loads(trace.model_dump_json(exclude={"steps"}))
    (run_dir / "steps.jsonl").write_text("".join(
        json.dumps(record) + "\n" for record in [{"kind": "run", "trace": header, "steps": 0}] +
        [{"kind": "step", "step": json.loads(s.model_dump_json())} for s in trace.steps]))
    (run_dir / "llm_calls.jsonl").write_text(call_line(marker, now))


def call_line(marker: str, now: float) -> str:
    return json.dumps({"role": "main", "model": "scripted", "step": 1, "time": now, "latency_s": 0.1,
                       "messages": [{"role": "user", "content": f"{marker} prompt"}], "completion": f"{marker} answer",
                       "prompt_tokens": 3, "completion_tokens": 2, "cost_usd": 0.0}) + "\n"


def export(fmt: str, folder: Path, out: Path) -> tuple[subprocess.CompletedProcess, str]:
    """The command's result and all it wrote, as text (an Inspect log read back whole)."""
    result = mlab_in_process("export", "--format", fmt, folder, "--out", out, home=folder.parent / "home",
                             registry=fixture_registry)
    if fmt == "chat-jsonl":
        written = (out / "chat.jsonl").read_text() if (out / "chat.jsonl").exists() else ""
    else:
        read_eval_log = pytest.importorskip("inspect_ai.log").read_eval_log
        written = "".join(read_eval_log(str(p)).model_dump_json() for p in sorted(out.glob("*.eval")))
    return result, written


def one_warning(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, result.stderr
    for fragment in fragments:
        assert fragment in warnings[0], warnings[0]


def one_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("target", ["other run", "host file"])
def test_a_call_log_linked_out_of_the_run_is_left_out_with_one_line(tmp_path, fmt, target):
    write_run(tmp_path / "a", "RUN-A")
    write_run(tmp_path / "b", "SECRET-B")
    (tmp_path / "host.jsonl").write_text(call_line("SECRET-HOST", time.time()))
    (tmp_path / "a" / "llm_calls.jsonl").unlink()
    (tmp_path / "a" / "llm_calls.jsonl").symlink_to(
        tmp_path / "b" / "llm_calls.jsonl" if target == "other run" else tmp_path / "host.jsonl")
    result, written = export(fmt, tmp_path / "a", tmp_path / "out")
    assert "SECRET" not in written + result.stdout + result.stderr
    one_warning(result, "llm_calls.jsonl", "symlink")
    if fmt == "inspect":  # the run itself is exported, without the calls
        assert "RUN-A observation 1" in written
    else:
        assert written == ""  # its calls are all chat-jsonl has of a run


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_step_log_linked_to_another_runs_is_refused_in_one_line(tmp_path, fmt):
    write_run(tmp_path / "a", "RUN-A", steps=1)
    write_run(tmp_path / "b", "SECRET-B", steps=3)  # its steps 2 and 3 would be taken as A's latest
    (tmp_path / "a" / "steps.jsonl").unlink()
    (tmp_path / "a" / "steps.jsonl").symlink_to(tmp_path / "b" / "steps.jsonl")
    result, written = export(fmt, tmp_path / "a", tmp_path / "out")
    assert "SECRET" not in written + result.stdout + result.stderr
    one_error(result, "steps.jsonl", "symlink")


def test_a_bench_runs_trace_linked_out_of_the_bench_is_refused_in_one_line(tmp_path):
    bench = tmp_path / "bench"
    for name in ("a", "b"):
        write_run(bench / "runs" / name, f"RUN-{name.upper()}")
    write_run(tmp_path / "elsewhere", "SECRET-B")
    (bench / "runs" / "a" / "trace.json").unlink()  # the bench's results.db, not a search, names it
    (bench / "runs" / "a" / "trace.json").symlink_to(tmp_path / "elsewhere" / "trace.json")
    (bench / "runs" / "a" / "steps.jsonl").unlink()  # a run written before the step log: trace.json alone
    with ResultsDB(bench / "results.db") as db:
        for seed, name in enumerate(("a", "b")):
            db.upsert_run(name, task=TASK_NAME, agent="research", llm="scripted:none", seed=seed,
                          run_dir=f"runs/{name}", status="finished", final_score=None, higher_is_better=1,
                          metric="accuracy", steps=1, time_s=1.0, prompt_tokens=3, completion_tokens=2, cost_usd=0.0)
    result, written = export("inspect", bench, tmp_path / "out")
    assert "SECRET" not in written + result.stdout + result.stderr
    one_error(result, "trace.json", "symlink")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_linked_run_folder_in_a_folder_of_runs_is_not_exported(tmp_path, fmt):
    write_run(tmp_path / "runs" / "a", "RUN-A")
    write_run(tmp_path / "elsewhere" / "b", "SECRET-B")
    (tmp_path / "runs" / "b").symlink_to(tmp_path / "elsewhere" / "b")
    result, written = export(fmt, tmp_path / "runs", tmp_path / "out")
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "RUN-A" in written and "SECRET" not in written + result.stdout + result.stderr
