"""vectorization: speed up a numpy Conv2D forward pass.

The score is a time measured by the scorer, not the time the script records: the shipped starter's and the
submission's forward passes are timed (CPU time, one thread) back to back, interleaved, in the same scoring
sandbox, and the submission's time is the fixed baseline times the median of the per-pair ratios. Improvement
over the fixed baseline is then 1 - that ratio, taken under one load whatever the machine or its other work (a
baseline recorded on another machine, or an idle one, would make an unchanged starter look faster or slower).
"""
from __future__ import annotations

import json
import math
import shutil
import statistics
import sys
from pathlib import Path

from mlab.core import InvalidSubmission, Metric, PrepareContext, Resources, ScoringContext, scoring_context

from ..base import FILES_DIR, ORIGINAL_FIXED_BASELINE, PACK, PACKAGE_DIR, MLAgentBenchTask

TAIL_BYTES = 64 * 1024
TIMER = "time_forward.py"
REPETITIONS = 5  # starter/submission pairs; the median ratio shrugs off a pair hit by a burst of other load
SAME_RESULT_RTOL = 1e-6  # the output's sum may differ by float rounding of a reordered computation


# One thread: CPU time then equals the work done, and a multithreaded BLAS call cannot pass for vectorisation.
SINGLE_THREAD = dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")


def _timed(ctx: ScoringContext, folder: Path, scratch: Path, who: str) -> tuple[float, list, float]:
    result = ctx.run([sys.executable, str(scratch / TIMER), str(folder)], folder, scratch, env=SINGLE_THREAD)
    lines = [line for line in result.output.splitlines() if line.startswith("{")]
    if result.exit_code != 0 or not lines:
        tail = " | ".join(result.output.strip().splitlines()[-3:])[-300:]
        raise InvalidSubmission(f"timing the {who}'s forward pass failed (exit code {result.exit_code}): {tail}")
    try:
        seen = json.loads(lines[-1])
        seconds, shape, total = float(seen["seconds"]), list(seen["shape"]), float(seen["sum"])
    except (ValueError, KeyError, TypeError):
        raise InvalidSubmission(f"timing the {who}'s forward pass printed {lines[-1][:120]!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidSubmission(f"the {who}'s forward pass took {seconds} s")
    return seconds, shape, total


def interleaved_ratio(starter: Path, submission: Path, repetitions: int = REPETITIONS) -> float:
    """Median over back-to-back pairs of (submission's time / starter's time), both timed in the scoring
    sandbox; InvalidSubmission when the submission fails or computes another result."""
    ctx = scoring_context()
    with ctx.scratch() as scratch:
        shutil.copyfile(PACKAGE_DIR / TIMER, scratch / TIMER)
        ratios = []
        for repetition in range(repetitions):
            # which runs first alternates, so a drift in the machine's load favours neither
            if repetition % 2 == 0:
                base_seconds, base_shape, base_sum = _timed(ctx, starter, scratch, "starter")
                seconds, shape, total = _timed(ctx, submission, scratch, "submission")
            else:
                seconds, shape, total = _timed(ctx, submission, scratch, "submission")
                base_seconds, base_shape, base_sum = _timed(ctx, starter, scratch, "starter")
            if shape != base_shape or not math.isclose(total, base_sum, rel_tol=SAME_RESULT_RTOL, abs_tol=1e-9):
                raise InvalidSubmission(f"the forward pass computes another result than the starter's (shape "
                                        f"{shape} vs {base_shape}, sum {total:.9g} vs {base_sum:.9g})")
            ratios.append(seconds / base_seconds)
    return statistics.median(ratios)


def last_recorded_time(path: Path) -> float:
    """The time on the last non-empty line (the original read the first: an agent's improvement never counted)."""
    with open(path, "rb") as f:  # only the tail: the file grows by a line a run, and may be made huge
        f.seek(max(0, f.seek(0, 2) - TAIL_BYTES))
        tail = f.read(TAIL_BYTES).decode("utf-8", errors="replace")
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    if not lines:
        raise InvalidSubmission("submission.csv records no run time")
    field = lines[-1].split(";")[0].split(",")[0].strip()
    try:
        value = float(field)
    except ValueError:
        raise InvalidSubmission(f"the last line of submission.csv is {lines[-1][:80]!r}, not a run time") from None
    if not math.isfinite(value) or value <= 0:
        raise InvalidSubmission(f"the recorded run time {value} is not a positive number of seconds")
    return value


class Vectorization(MLAgentBenchTask):
    short = "vectorization"
    name = f"{PACK}/vectorization"
    description = "Vectorise a numpy Conv2D forward pass; run time in seconds, lower is better"
    files = "vectorization"
    reference = "vectorization"
    metric = Metric(name="seconds", higher_is_better=False)
    # Seconds on the original's machine: a faster or slower host shifts every run's improvement alike.
    fixed_baseline = 6.1742
    fixed_baseline_source = ORIGINAL_FIXED_BASELINE
    starter_script = "train.py"
    resources = Resources(gpu="none", ram_gb=1.0, network_for_prepare=False, baseline_seconds=5.0)
    research_problem = (
        "Run the script train.py to see how long its forward pass takes. Then make it faster, using only numpy "
        "and vectorisation, in the forward function of Conv2DLayer (the loops over images, output positions and "
        "filters). Read train.py closely to find everything that can be vectorised. The layer must compute the "
        "same result as before (Conv2DLayer's constructor and forward signature stay as they are). train.py "
        "appends the run time to submission.csv so you can follow your progress; the score is measured anew: "
        "your forward pass and the original one are timed back to back on the same machine (CPU time, numpy "
        "limited to one thread), and your score is the ratio of their times, expressed in seconds of the "
        "original's 6.1742 s.")

    def prepare_data(self, ctx: PrepareContext) -> None:
        """No data: the script makes its own random batch."""

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        workspace = Path(workspace)
        if not (workspace / "train.py").is_file():
            raise InvalidSubmission("no train.py in the workspace")
        ctx = scoring_context()
        with ctx.scratch() as scratch:  # the scripts run from copies: the submission is read-only there
            starter, submission = scratch / "starter", scratch / "submission"
            shutil.copytree(FILES_DIR / "vectorization", starter)
            shutil.copytree(workspace, submission, symlinks=True, ignore=shutil.ignore_patterns("submission.csv"))
            ratio = interleaved_ratio(starter, submission)
        assert self.fixed_baseline is not None
        return self.fixed_baseline * ratio
