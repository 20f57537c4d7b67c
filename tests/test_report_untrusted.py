"""A bench folder is untrusted (issue 31): its results.db can point a run anywhere and put text where numbers
belong. `mlab report` reads nothing outside the bench folder and never crashes on a bad row: each such run is
left out with one line."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from mlab.core.bench.results import ResultsDB
from mlab.core.models import RunConfig, Trace
from tests.fixtures.cli import mlab_in_process


def report(folder: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return mlab_in_process("report", folder, "--no-plots", "--out", out, *extra, home=folder.parent / "home")


def write_run(run_dir: Path, marker: str) -> None:
    run_dir.mkdir(parents=True)
    trace = Trace(run_id=marker, config=RunConfig(task="lite/wine", agent="baseline"), started_at=time.time(),
                  status="finished", end_reason=marker)
    (run_dir / "trace.json").write_text(trace.model_dump_json())
    (run_dir / "errors.log").write_text(f"{marker}\n")


def bench_with(tmp_path: Path, **bad: object) -> Path:
    """A bench of two runs: a good one and `bad`'s, whose fields (run_dir, steps, ...) are set as given."""
    bench = tmp_path / "bench"
    write_run(bench / "runs" / "good", "GOOD-RUN")
    with ResultsDB(bench / "results.db") as db:
        common = {"task": "lite/wine", "agent": "baseline", "llm": None, "status": "finished", "final_score": 0.9,
                      "higher_is_better": 1, "metric": "accuracy", "steps": 3, "time_s": 1.0, "prompt_tokens": 0,
                      "completion_tokens": 0, "cost_usd": 0.0}
        db.upsert_run("good", seed=0, run_dir="runs/good", **common)
        db.upsert_run("bad", **{**common, "seed": 1, "run_dir": "runs/good", **bad})
    return bench


def one_warning(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, result.stderr
    for fragment in fragments:
        assert fragment in warnings[0], warnings[0]


@pytest.mark.slow
def test_a_run_folder_outside_the_bench_is_not_read(tmp_path):
    write_run(tmp_path / "elsewhere" / "secret", "SECRET-OUTSIDE")
    for where in ("../elsewhere/secret", str(tmp_path / "elsewhere" / "secret")):
        bench = bench_with(tmp_path / where.replace("/", "_").replace(".", "d"), run_dir=where)
        (bench.parent / "elsewhere").symlink_to(tmp_path / "elsewhere")  # ../elsewhere exists from the bench
        out = bench.parent / "out"
        result = report(bench, out, "--json")
        one_warning(result, "run 'bad' skipped", "outside the bench folder")
        written = "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())
        assert "SECRET-OUTSIDE" not in result.stdout + written and "GOOD-RUN" in written
        assert [r["key"] for r in json.loads(result.stdout)["runs"]] == ["good"]


def test_a_link_inside_the_bench_to_a_folder_outside_is_not_read(tmp_path):
    write_run(tmp_path / "elsewhere" / "secret", "SECRET-LINKED")
    bench = bench_with(tmp_path, run_dir="runs/linked")
    (bench / "runs" / "linked").symlink_to(tmp_path / "elsewhere" / "secret")
    result = report(bench, tmp_path / "out", "--json")
    one_warning(result, "outside the bench folder")
    assert "SECRET-LINKED" not in "".join(p.read_text(errors="replace") for p in (tmp_path / "out").rglob("*")
                                          if p.is_file())


@pytest.mark.slow
def test_text_where_a_number_belongs_is_one_line_not_a_traceback(tmp_path):
    for field, value, why in (("steps", "abc", "steps is 'abc', not an integer"),
                              ("time_s", "1 hour", "time_s is '1 hour', not a number"),
                              ("final_score", "high", "final_score is 'high', not a number"),
                              ("prompt_tokens", -5, "prompt_tokens is -5, out of range"),
                              ("seed", "x" * 100, "seed is 'xxxx")):
        bench = bench_with(tmp_path / field, **{field: value})
        result = report(bench, tmp_path / field / "out")
        one_warning(result, "run 'bad' skipped", why)
        assert "good" not in result.stderr


def test_a_file_that_is_no_database_is_one_line(tmp_path):
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "results.db").write_text("not sqlite at all " * 100)
    result = report(bench, tmp_path / "out")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
