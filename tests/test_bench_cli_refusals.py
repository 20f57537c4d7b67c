"""Issue 44, items 7 and 15: what `mlab bench` refuses before it writes anything (a run folder as --bench-dir, a
--label given twice), and a --fail-fast summary that counts the runs it never started."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.bench_cli import REGISTRY
from tests.fixtures.cli import entry, mlab, mlab_in_process

TASK = "fixture/counter"


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else b"" for p in folder.rglob("*")}


def _bench(bench_dir: Path, *args: str, home: Path):
    return mlab_in_process("bench", "--tasks", TASK, "--agents", "fixture-appender", "--runs", "1",
                           "--bench-dir", bench_dir, "--registry", REGISTRY, *args, home=home)


# ---- item 7 ------------------------------------------------------------------------------------------------------
def test_a_run_folder_or_a_folder_inside_one_is_no_bench_dir(tmp_path):
    home = tmp_path / "home"
    run_dir = tmp_path / "my-run"
    made = mlab("run", "--task", TASK, "--agent", "fixture-appender", "--run-dir", run_dir, "--sandbox", "local",
                entry=entry("tests.fixtures.gated_run", "mlab"), home=home)
    assert made.returncode == 0, made.stderr
    before = _tree(run_dir)
    for given in (run_dir, run_dir / "workspace", run_dir / "workspace" / "new-bench"):
        refused = _bench(given, home=home)
        assert refused.returncode == 2, (given, refused.stdout, refused.stderr)
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "run folder" in lines[0] and str(run_dir) in lines[0], refused.stderr
        assert _tree(run_dir) == before and not refused.stdout  # nothing written into the run


# ---- item 15 -----------------------------------------------------------------------------------------------------
def test_a_label_given_twice_for_an_agent_or_naming_another_agent_is_refused(tmp_path):
    home = tmp_path / "home"
    for labels, says in ((("--label", "fixture-appender=A", "--label", "fixture-appender=B"),
                          "fixture-appender is given two labels"),
                         (("--label", "fixture-appender=A", "--label", "fixture-appender=A"),
                          "fixture-appender is given two labels"),
                         (("--label", "fixture-appender=baseline"), "another agent's name")):
        refused = mlab_in_process("bench", "--tasks", TASK, "--agents", "fixture-appender,baseline", "--runs", "1",
                                  "--bench-dir", tmp_path / "b", "--registry", REGISTRY, *labels, home=home)
        assert refused.returncode == 2 and says in refused.stderr, (labels, refused.stderr)
        assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "b").exists()


def test_a_run_label_given_twice_is_refused(tmp_path):
    refused = mlab_in_process("run", "--task", "lite/wine", "--agent", "baseline", "--label", "A", "--label", "B",
                              "--run-dir", tmp_path / "r", home=tmp_path / "home")
    assert refused.returncode == 2 and "--label is given twice" in refused.stderr, refused.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.slow  # over 2 s on two cores
def test_the_fail_fast_summary_counts_the_runs_never_started(tmp_path):
    from tests.fixtures.bench_plugins import SCENARIOS

    errored = SCENARIOS.index("agent_error")
    # one worker: seeds in order, so the seeds after the crash never start
    done = mlab("bench", "--tasks", TASK, "--agents", "fixture-scenario", "--runs", str(errored + 3), "--workers",
                "1", "--fail-fast", "--bench-dir", tmp_path / "b", "--registry", REGISTRY, home=tmp_path / "home")
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fail-fast: run ") and "2 never started" in lines[0], lines
    assert "2 never started" in done.stdout, done.stdout
