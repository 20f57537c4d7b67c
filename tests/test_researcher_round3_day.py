"""Issue 44, items 6-16: the rough edges a researcher met in a day's work, one test (or a few) each."""
from __future__ import annotations

import time
from pathlib import Path

from tests.fixtures.cli import mlab_in_process


# ---- item 6: `mlab runs` of a large bench reads its results.db once, not once per run ----------------------------
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
