"""The speed tasks' scores are taken at scoring time (vectorization, llama-inference): the starter and the
submission are timed back to back, interleaved, in the scoring sandbox, so load from other processes moves both
alike."""
from __future__ import annotations

import functools
import importlib.util
import json
import math
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mlab.core import InvalidSubmission
from mlab.core.plugins.registry import load_registry
from mlab.core.run import taskdata
from mlab.core.run.scoring import judge
from mlab_tasks_mlagentbench.base import FILES_DIR, REFERENCE_DIR
from mlab_tasks_mlagentbench.time_generation import MARK, instrumented
from mlab_tasks_mlagentbench.timing import MOST_PAIRS, REPETITIONS, conservative_ratio, settled, timed_ratio
from tests.fixtures import cli
from tests.fixtures.mlagentbench import text

# The CPU load outlives the longest timing case's hang guard (the llama one's, below).
LOAD_S = 2400
BUSY_LOOP = f"import time\nend = time.monotonic() + {LOAD_S}\nwhile time.monotonic() < end:\n    pass\n"


@pytest.fixture
def timed_pairs(monkeypatch):
    """Records each timed pair's CPU seconds and the machine's steal time around it, for a failure to say what the
    pairs were (a stress run once scored an unchanged starter 10.8% faster; the pairs were not kept)."""
    from mlab_tasks_mlagentbench import timing

    pairs: list[str] = []
    original = timing._timed_pair

    def recording(*args, **kwargs):
        steal = _steal_ticks()
        reports = original(*args, **kwargs)
        pairs.append(f"{args[4][0]} first: starter {reports['starter']['seconds']:.3f} s, submission "
                     f"{reports['submission']['seconds']:.3f} s, steal {_steal_ticks() - steal} ticks")
        return reports

    monkeypatch.setattr(timing, "_timed_pair", recording)
    return pairs


def _steal_ticks() -> int:
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) if len(fields) > 8 else 0


def vectorization():
    return load_registry().get("tasks", "mlagentbench/vectorization")


def fresh_workspace(task, tmp_path: Path) -> Path:
    taskdata.prepare(task, log=lambda _m: None)
    workspace = tmp_path / "ws"
    shutil.copytree(taskdata.public_dir(task), workspace)
    return workspace


@pytest.fixture
def cpu_load():
    """Two processes keeping both cores busy: stress-ng when installed, else Python busy loops. Beside other xdist
    workers, whose cases are load enough (as a bench's other runs are to its scorings), they run at the lowest
    priority: they fill only what those leave idle; at the normal one they would take their share of both cores
    from the suite's other cases for the minutes these take."""
    shared = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1) > 1
    lowest = functools.partial(os.nice, 19) if shared else None
    if shutil.which("stress-ng"):
        procs = [subprocess.Popen(["stress-ng", "--cpu", "2", "--timeout", f"{LOAD_S}s", "--quiet"], preexec_fn=lowest)]
    else:
        procs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP], preexec_fn=lowest) for _ in range(2)]
    yield
    for proc in procs:
        proc.kill()
        proc.wait()


@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.timeout(1800)  # beside the suite's other workers and stress-test's load: 136 s alone beside its own
def test_an_unchanged_starter_improves_by_about_nothing_under_load(tmp_path, cpu_load, timed_pairs):
    task = vectorization()
    workspace = fresh_workspace(task, tmp_path)
    (workspace / "submission.csv").write_text("0.001\n")  # a recorded time is not what is scored
    score = task.evaluate(workspace, taskdata.hidden_dir(task))
    verdict = judge(score, task.fixed_baseline, task)
    # Never a false success. Beside stress-ng on a machine other jobs kept at a load of 8-24, 5 scorings gave
    # -4.5% to +6.3% (single-pass runs from folders of different names: up to 16% off); a wall-clock time
    # recorded under other load is off by 50-300%. At 4 pairs, the most then, one scoring read -27.7% (pairs of
    # 0.82-1.18): the pairs' disagreement now times up to MOST_PAIRS.
    assert abs(verdict.improvement) < 0.25 and not verdict.success, (verdict, timed_pairs)


# A vectorised forward pass succeeding (by more than 80%) is test_mlagentbench_light.py's check-task case.
@pytest.mark.slow
def test_a_wrong_vectorised_forward_pass_is_invalid(tmp_path):
    task = vectorization()
    workspace = fresh_workspace(task, tmp_path)
    shutil.copytree(REFERENCE_DIR / "vectorization", workspace, dirs_exist_ok=True)
    script = workspace / "train.py"
    script.write_text(script.read_text() + "\nConv2DLayer.forward = lambda self, x: x[:, ::2, ::2, :1]\n")
    with pytest.raises(InvalidSubmission, match="another result|failed"):
        task.evaluate(workspace, taskdata.hidden_dir(task))


def test_a_submission_without_train_py_is_invalid(tmp_path):
    with pytest.raises(InvalidSubmission, match="no train.py"):
        vectorization().evaluate(tmp_path, tmp_path)


@pytest.mark.slow
def test_tasks_show_the_measured_baseline_time_and_peak_memory(tmp_path):
    mlab = functools.partial(cli.mlab, home=tmp_path / "home", timeout=600)
    rows = {r["name"]: r for r in json.loads(mlab("tasks", "--json").stdout)}
    assert rows["lite/digits"]["measured_seconds"] is None and rows["lite/digits"]["measured_peak_memory_mb"] is None
    assert "not measured" in mlab("tasks").stdout
    assert mlab("baseline", "lite/digits", "--sandbox", "local").returncode == 0
    rows = {r["name"]: r for r in json.loads(mlab("tasks", "--json").stdout)}
    digits = rows["lite/digits"]
    assert 0 < digits["measured_seconds"] and 10 < digits["measured_peak_memory_mb"] < 64_000
    assert rows["lite/wine"]["measured_seconds"] is None
    assert "MB peak" in mlab("tasks", env={"COLUMNS": "400"}).stdout


def test_timing_stops_at_the_least_pairs_when_they_agree_and_times_more_while_they_disagree():
    agreeing = [1.01, 0.99, 1.00, 1.02]
    assert settled(agreeing, most=8)
    assert not settled(agreeing[:3], most=8)  # fewer than the least
    disagreeing = [1.03, 1.23, 1.18, 0.65]  # one scoring's pairs beside stress-ng
    assert not settled(disagreeing, most=8)
    assert not settled([*disagreeing, 1.0], most=8)  # an odd count: the starter would run first more often
    assert settled([*disagreeing, 1.0, 1.1, 0.9, 1.2], most=8)  # the cap
    assert settled(disagreeing)  # the most defaults to the least
    assert settled([1.0] * REPETITIONS, most=8)


def test_timing_scores_the_ratio_at_its_pessimistic_end_and_exactly_when_the_pairs_agree():
    assert conservative_ratio([0.5] * 6) == pytest.approx(0.5)
    assert conservative_ratio([0.8, 1.0, 1.1, 2.0]) > 1.2  # a wide spread: slower than any middle estimate
    # A burst of load on the starter's side makes the submission look no faster.
    assert conservative_ratio([1.0, 1.0, 1.0, 1.0, 1.0, 0.6]) >= 1.0


def unchanged_or_faster_scorings(true_ratio: float, most: int, scorings: int = 2000) -> list[float]:
    """Seeded scorings of a submission `true_ratio` of the starter's time, through the scorer's own loop, with
    pairs as noisy as beside stress-ng: log ratios spread by 8%, and a quarter of pairs hit by a 15-45% burst of
    load on either side (one scoring's pairs there read 1.03, 1.23, 1.18, 0.65)."""
    rng = random.Random(7)

    def next_ratio(_index: int) -> float:
        burst = rng.choice((-1, 1)) * rng.uniform(0.15, 0.45) if rng.random() < 0.25 else 0.0
        return true_ratio * math.exp(rng.gauss(0.0, 0.08) + burst)

    return [timed_ratio(next_ratio, most=most) for _ in range(scorings)]


# Seconds of scipy intervals (4 pairs: 4 s, up to 8 as llama-inference: 7-10 s): the slow tier runs it.
@pytest.mark.slow
@pytest.mark.parametrize("most", [REPETITIONS, MOST_PAIRS])
def test_noisy_pairs_almost_never_score_an_unchanged_starter_a_success_and_a_real_speed_up_always(most):
    # A success is a ratio below 0.9 (10% better than the starter's 1). A robust mean of the pairs (the middle of
    # them) read 6-9% of these scorings as one, and CI saw it happen (+12.7%).
    task = load_registry().get("tasks", "mlagentbench/llama-inference")
    succeeds = [judge(ratio, task.fixed_baseline, task).success
                for ratio in unchanged_or_faster_scorings(1.0, most)]
    assert sum(succeeds) / len(succeeds) < 0.005
    halved = [judge(ratio, task.fixed_baseline, task).success for ratio in unchanged_or_faster_scorings(0.5, most)]
    assert sum(halved) / len(halved) > 0.99


# ---- llama-inference -----------------------------------------------------------------------------
LLAMA_STARTER = FILES_DIR / "llama-inference" / "inference.py"
needs_transformers = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in ("torch", "transformers", "accelerate")),
    reason="needs the pack's llama extra (torch, transformers, accelerate)")


def llama():
    return load_registry().get("tasks", "mlagentbench/llama-inference")


def test_llama_timing_marks_keep_the_scripts_line_numbers():
    starter = LLAMA_STARTER.read_text()
    marked = instrumented(starter, starter).splitlines()
    assert len(marked) == len(starter.splitlines())
    changed = [(a, b) for a, b in zip(starter.splitlines(), marked, strict=True) if a != b]
    assert [b.split("  ")[0] for _a, b in changed] == [f"{MARK}('start')", f"{MARK}('end')"]
    assert changed[0][0] == "#################" and changed[1][0] == "#### DO NOT EDIT ######"


def test_llama_submission_with_a_changed_fixed_part_is_refused_before_anything_runs(tmp_path):
    task, workspace = llama(), tmp_path / "ws"
    workspace.mkdir()
    with pytest.raises(InvalidSubmission, match="no inference.py"):
        task.evaluate(workspace, tmp_path / "hidden")
    (workspace / "inference.py").write_text(LLAMA_STARTER.read_text().replace("context_length = 128",
                                                                              "context_length = 8"))
    with pytest.raises(InvalidSubmission, match="DO NOT EDIT parts differ"):
        task.evaluate(workspace, tmp_path / "hidden")  # nothing prepared, nothing timed: refused first


@pytest.fixture
def llama_workspace(tmp_path, monkeypatch):
    """llama-inference prepared from a tiny LLaMA-architecture model (under /tmp, where a sandbox with a private
    /tmp does not see it) and enough text for the starter's 100 batches (the longest timed part it allows: 400 lines
    give 74); a copy of the public folder as a workspace."""
    monkeypatch.setenv("MLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MLAB_ALLOW_NO_GPU", "1")
    task = llama()
    taskdata.prepare(task, text.llama_and_wikitext(tmp_path / "src", lines=560), log=lambda _m: None)
    workspace = tmp_path / "ws"
    shutil.copytree(taskdata.public_dir(task), workspace)
    return task, workspace


@needs_transformers
@pytest.mark.slow
@pytest.mark.timing
@pytest.mark.timeout(LOAD_S)  # two scorings of up to 8 timed pairs each under load: 401 s seen at load 5 with 6
def test_llama_unchanged_starter_improves_by_about_nothing_under_load_and_a_faster_one_succeeds(
        llama_workspace, cpu_load, timed_pairs):
    task, workspace = llama_workspace
    (workspace / "submission.csv").write_text("0.000001\n")  # a recorded time is not what is scored
    unchanged = judge(task.evaluate(workspace, taskdata.hidden_dir(task)), task.fixed_baseline, task)
    # Never a false success. A ~0.35 s part timed once per run, up to 8 pairs (timing.settled): beside stress-ng
    # their middle read -4.8%..+12.7% (CI); the score is the ratio's pessimistic end, so the pairs' spread makes
    # the starter look slower than itself (-2%..-31% at load 5 with 6 pairs), never faster.
    assert not unchanged.success and -0.5 < unchanged.improvement < 0.05, (unchanged, timed_pairs)
    # The reference: one forward pass instead of generate() for the single greedy token.
    shutil.copyfile(REFERENCE_DIR / "llama-inference" / "inference.py", workspace / "inference.py")
    faster = judge(task.evaluate(workspace, taskdata.hidden_dir(task)), task.fixed_baseline, task)
    assert faster.success and faster.improvement > unchanged.improvement + 0.1, (faster, unchanged)


@needs_transformers
@pytest.mark.slow
def test_llama_scoring_never_writes_to_the_prepared_model(llama_workspace):
    task, workspace = llama_workspace
    config = taskdata.public_dir(task) / "model" / "config.json"
    before = config.read_bytes()
    script = workspace / "inference.py"
    script.write_text(script.read_text().replace("batch_size = 4\n", "batch_size = 4\n"
                                                 "open('model/config.json', 'w').write('{}')\n"))
    try:
        task.evaluate(workspace, taskdata.hidden_dir(task))
    except InvalidSubmission as exc:  # a confined sandbox: the staged model is read-only
        assert "Read-only file system" in str(exc) or "Permission denied" in str(exc), exc
    assert config.read_bytes() == before
