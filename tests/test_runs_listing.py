"""What `mlab runs` and `mlab eval` list: a run whose process is gone is interrupted, a single run is named by
its folder, and a bench's results database is opened a fixed number of times whatever the bench's size."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.fixtures.cli import entry, mlab, mlab_in_process

BENCH = entry("tests.fixtures.gated_run", "mlab")  # the CLI with fixture/counter and fixture-appender


def _appender_run(tmp_path, home):
    run_dir = tmp_path / "my-run"
    done = mlab("run", "--task", "fixture/counter", "--agent", "fixture-appender", "--run-dir", run_dir,
                "--sandbox", "local", entry=BENCH, home=home)
    assert done.returncode == 0, done.stderr
    return run_dir


@pytest.mark.slow  # over 2 s on two cores
def test_eval_calls_a_run_whose_process_is_gone_interrupted(tmp_path):
    home = tmp_path / "home"
    run_dir = _appender_run(tmp_path, home)
    trace = json.loads((run_dir / "trace.json").read_text())
    trace["status"] = "running"  # what a killed `mlab run` leaves
    (run_dir / "trace.json").write_text(json.dumps(trace))
    shown = mlab("eval", run_dir, entry=BENCH, home=home)
    assert shown.returncode == 0, shown.stderr
    assert "interrupted" in shown.stdout and "running" not in shown.stdout, shown.stdout


def test_runs_names_a_single_run_by_its_folder(tmp_path):
    home = tmp_path / "home"
    run_dir = _appender_run(tmp_path, home)
    listed = json.loads(mlab("runs", run_dir, "--json", entry=BENCH, home=home).stdout)
    assert [r["run"] for r in listed] == ["my-run"]


def _fake_bench(root: Path, runs: int) -> Path:
    """A bench folder listing `runs` finished runs of lite/wine (traces written, nothing run)."""
    from mlab.core.bench.results import ResultsDB
    from mlab.core.models import RunConfig, Trace
    from mlab.core.run.trace import write_trace

    bench = root / "bench"
    with ResultsDB(bench / "results.db") as db:
        for seed in range(runs):
            rel = f"runs/wine--s{seed}"
            (bench / rel).mkdir(parents=True)
            write_trace(bench / rel, Trace(run_id=f"s{seed}", config=RunConfig(task="lite/wine", agent="baseline",
                                                                                  seed=seed),
                                           status="finished", started_at=time.time(), final_score=0.7))
            db.upsert_run(f"lite/wine|baseline|-|s{seed}", task="lite/wine", agent="baseline", llm=None, seed=seed,
                          run_dir=rel, status="finished", steps=0, final_score=0.7, higher_is_better=1)
        db.set_baseline("lite/wine", 0.6, "stored")
    return bench


def test_runs_of_a_bench_opens_its_database_a_fixed_number_of_times_whatever_its_size(tmp_path, monkeypatch):
    from mlab.core.bench.results import ResultsDB

    opened: list[Path] = []
    real = ResultsDB.__init__

    def counting(self, path, *args, **kwargs):
        opened.append(Path(path))
        real(self, path, *args, **kwargs)

    monkeypatch.setattr(ResultsDB, "__init__", counting)
    counts = []
    for runs in (2, 8):
        bench = _fake_bench(tmp_path / str(runs), runs)
        opened.clear()
        shown = mlab_in_process("runs", "--json", bench, home=tmp_path / "home")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.count('"improvement": 0.16') == runs  # each judged against the bench's baseline
        counts.append(len(opened))
    assert counts[0] == counts[1] <= 2, counts  # before: once per run (504 runs: 504 x 504 folders resolved)
