"""vectorization: speed up a numpy Conv2D forward pass.

The score is a time measured by the scorer, not the time the script records: the shipped starter's and the
submission's forward passes are timed (CPU time, one thread) back to back, interleaved, in the same scoring
sandbox, on batches and weights drawn from a seed sent only after train.py is loaded, their outputs compared
(timing.py), and the submission's time is the fixed baseline times the per-pair ratios' pessimistic end. Improvement
over the fixed baseline is then 1 - that ratio, taken under one load whatever the machine or its other work (a
baseline recorded on another machine, or an idle one, would make an unchanged starter look faster or slower).
"""
from __future__ import annotations

import math
import shutil
from pathlib import Path

from mlab.core import InvalidSubmission, Metric, PrepareContext, Resources, scoring_context

from ..base import FILES_DIR, ORIGINAL_FIXED_BASELINE, PACK, MLAgentBenchTask
from ..timing import MOST_PAIRS, interleaved_ratio

TAIL_BYTES = 64 * 1024
TIMER = "time_forward.py"


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
    most_pairs = MOST_PAIRS  # a test of the scoring's steps, not of its timing, sets the least
    resources = Resources(gpu="none", ram_gb=1.0, network_for_prepare=False, baseline_seconds=5.0)
    research_problem = (
        "Run the script train.py to see how long its forward pass takes. Then make it faster, using only numpy "
        "and vectorisation, in the forward function of Conv2DLayer (the loops over images, output positions and "
        "filters). Read train.py closely to find everything that can be vectorised. The layer must compute the "
        "same result as before (Conv2DLayer's constructor and forward signature stay as they are). train.py "
        "appends the run time to submission.csv so you can follow your progress; the score is measured anew: "
        "your forward pass and the original one are timed back to back on the same machine (CPU time, numpy "
        "limited to one thread) on new random batches that train.py cannot know when it is imported, their "
        "outputs must agree, and your score is the ratio of their times over several such pairs (the slow end "
        "of its 95% confidence interval, so only a clear speed-up counts), expressed in seconds of the "
        "original's 6.1742 s.")

    def prepare_data(self, ctx: PrepareContext) -> None:
        """No data: the script makes its own random batch."""

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        workspace = Path(workspace)
        if not (workspace / "train.py").is_file():
            raise InvalidSubmission("no train.py in the workspace")
        ctx = scoring_context()
        with ctx.scratch() as stage, ctx.scratch() as scratch:
            shutil.copytree(FILES_DIR / "vectorization", stage / "starter")
            shutil.copytree(workspace, stage / "submission", symlinks=True,
                            ignore=shutil.ignore_patterns("submission.csv"))
            ratio = interleaved_ratio(ctx, stage, scratch, TIMER, what="forward pass", most=self.most_pairs)
        assert self.fixed_baseline is not None
        return self.fixed_baseline * ratio
