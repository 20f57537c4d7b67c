"""Timing a submission against the starter under one load, for the pack's speed tasks (vectorization,
llama-inference).

The scorer times the shipped starter and the submission back to back, interleaved, in the scoring sandbox, and
the score is taken from the per-pair ratios (submission's time / starter's time): the two runs of a pair see about
the same load, where a time compared with a baseline recorded under other load would not. The score is the ratio the
submission is at most, at 95% confidence (`conservative_ratio`), so noise never passes for a speed-up: beside
stress-ng a robust mean of up to 6 pairs scored an unchanged llama-inference starter 12.7% faster (a false success).
Pairs that disagree are timed more, up to MOST_PAIRS.
What is timed, and on what: time_pair.py (one sandboxed command per pair, running no submission code itself)
loads each script in a worker process, and only then draws the inputs from a seed of its own and sends them; it
times the CPU time of the worker and everything it started from the inputs going out to the outputs coming back,
and checks the submission's outputs against the starter's on the same inputs (vectorization: the forward pass's
output; llama-inference: the generated tokens). A script can thus neither precompute its outputs while it loads
nor skip the work, and its loading is bounded against the starter's. Within a run the fastest of several passes
counts where the timed part can be repeated (vectorization): other load only ever adds CPU time. Beside
`stress-ng --cpu 2` on a loaded 2-core machine one starter's single-pass CPU times ranged from 1.86 to 3.2 s, and
each estimate from one pass per run (median ratio, ratio of the fastest runs) scored an unchanged starter 14-16%
off in one of 5 scorings.

Layout: `stage` (read-only to every timed command) holds the timers, `starter/`, `submission/` and the task's
shared files; each run gets a fresh writable copy of its script folder in `scratch`, with links to the shared
files, and what a run leaves running is killed before the next, so one run cannot change or slow what the next
one runs (a submission slowing the starter down would win).
"""
from __future__ import annotations

import importlib
import json
import math
import os
import shutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mlab.core import InvalidSubmission, ScoringContext

from .base import PACKAGE_DIR

REPETITIONS = 4  # starter/submission pairs, half with the starter first: the least a scoring times
# The most, timed while the pairs disagree. 4 pairs of the same code, at their slow end, read llama-inference's
# starter -26%..+2% beside stress-ng and vectorization's -28% (a quiet machine's `make test`, its own stress-ng
# beside): 8 narrow the interval by about half.
MOST_PAIRS = 8
# More pairs while the pairs disagree, up to a cap the task sets: the slow end of the one-sided BOUND_CONFIDENCE
# interval of their mean log ratio (the score) must be within PRECISION of the mean, in relative terms.
PRECISION = 0.03
BOUND_CONFIDENCE = 0.95
# One thread: CPU time then equals the work done, and more threads cannot pass for a faster algorithm.
SINGLE_THREAD = dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1")
WHO = ("starter", "submission")

Report = dict[str, Any]  # the timer's JSON line: "seconds" and whatever tells results apart


def stage_task_files(source: Path, stage: Path, names: Iterable[str], *, link: bool) -> None:
    """Put the task's files `names` (below source, the prepared public folder) into stage: hard links where
    `link` (the stage is then a read-only bind in a confined sandbox, so nothing writes through them) and the
    file system allows, else copies. Never a path into the task home, which the scoring sandbox hides."""
    def place(src: str, dst: str) -> None:
        if link:
            try:
                os.link(src, dst)
                return
            except OSError:  # another file system, or links not allowed there
                pass
        shutil.copyfile(src, dst)

    for name in names:
        path = source / name
        if path.is_dir():
            shutil.copytree(path, stage / name, copy_function=place)
        else:
            place(str(path), str(stage / name))


PAIR_TIMER = "time_pair.py"  # runs each pair: draws the inputs, times the workers, checks the outputs
FRAMES = "time_frames.py"  # the pipe framing the timer and its workers share


def _timed_pair(ctx: ScoringContext, stage: Path, scratch: Path, mode: str, order: tuple[str, str],
                what: str, shared: list[str]) -> dict[str, Report]:
    """One pair's reports, timed by time_pair.py (whose inputs and checks no script can see or change)."""
    argv = [sys.executable, "-s", str(stage / PAIR_TIMER), mode, str(stage), str(scratch), ",".join(order),
            ",".join(shared)]
    # -s: no user site-packages, which a run could plant in the shared HOME for the next one
    result = ctx.run(argv, stage, scratch, env={**SINGLE_THREAD, "HOME": str(scratch), "TMPDIR": str(scratch)})
    lines = [line for line in result.output.splitlines() if line.startswith("{")]
    if result.exit_code != 0 or not lines:
        tail = " | ".join(result.output.strip().splitlines()[-3:])[-300:]
        raise InvalidSubmission(f"timing the {what} failed (exit code {result.exit_code}): {tail}")
    try:
        reports: dict[str, Any] = json.loads(lines[-1])
        if reports.get("problem"):
            raise InvalidSubmission(str(reports["problem"]))
        for who in WHO:
            seconds = float(reports[who]["seconds"])
            if not math.isfinite(seconds) or seconds <= 0:
                raise InvalidSubmission(f"the {who}'s {what} took {seconds} s")
            reports[who]["seconds"] = seconds
    except (ValueError, KeyError, TypeError):
        raise InvalidSubmission(f"timing the {what} printed {lines[-1][:120]!r}") from None
    return reports


def _scipy_stats() -> Any:
    """scipy.stats when first needed (the task registry imports this module; scipy ships no type hints)."""
    return importlib.import_module("scipy.stats")


def _log_bounds(ratios: list[float]) -> tuple[float, float]:
    """The mean of the log ratios and the upper end of its one-sided BOUND_CONFIDENCE Student t interval."""
    import numpy as np

    logs = np.log(ratios)
    mean = float(np.mean(logs))
    if float(np.ptp(logs)) == 0.0:  # no spread: the t interval is undefined, and the ratio is known
        return mean, mean
    interval = _scipy_stats().ttest_1samp(logs, 0.0, alternative="less").confidence_interval(BOUND_CONFIDENCE)
    return mean, float(interval.high)


def conservative_ratio(ratios: list[float]) -> float:
    """The submission's time over the starter's from the pairs' ratios: the upper end of a one-sided
    BOUND_CONFIDENCE interval of their geometric mean. Spread between the pairs makes a submission look slower,
    never faster: an unchanged starter scores about 1 or above, and a real speed-up scores near its ratio when the
    pairs agree."""
    return math.exp(_log_bounds(ratios)[1])


def settled(ratios: list[float], *, least: int = REPETITIONS, most: int = REPETITIONS) -> bool:
    """Whether the pairs timed so far are enough: at least `least`, an even number (half with the starter first),
    and either `most` or agreeing well enough (the score's bound at most PRECISION above their mean, in relative
    terms)."""
    count = len(ratios)
    if count < least or count % 2:
        return False
    if count >= most:
        return True
    mean, high = _log_bounds(ratios)
    return high - mean <= math.log1p(PRECISION)


def stage_timer(stage: Path, worker: str) -> None:
    """Copy the pair timer, `worker` and the framing they share into stage, where the timing command runs them."""
    for script in (worker, PAIR_TIMER, FRAMES):
        shutil.copyfile(PACKAGE_DIR / script, stage / script)


def timed_ratio(next_ratio: Callable[[int], float], *, most: int = REPETITIONS) -> float:
    """`conservative_ratio` over pairs timed by next_ratio(index) (submission's time / starter's) until `settled`,
    at most `most` pairs."""
    if most < REPETITIONS or most % 2:
        raise ValueError(f"timing needs an even number of pairs, at least {REPETITIONS}, not {most}")
    ratios: list[float] = []
    while not settled(ratios, most=most):
        ratios.append(next_ratio(len(ratios)))
    return conservative_ratio(ratios)


def interleaved_ratio(ctx: ScoringContext, stage: Path, scratch: Path, worker: str, *, what: str,
                      shared: Iterable[str] = (), most: int = REPETITIONS) -> float:
    """`timed_ratio` over back-to-back pairs of the submission's time and the starter's, alternating which runs
    first (so neither gets more of the runs that come second). `worker` (a script of the pack: time_forward.py or
    time_generation.py) loads a script in the pair timer's worker process; a submission whose outputs are not the
    starter's on the same inputs is InvalidSubmission. `shared` names the task's files in the stage that the timer
    links into each run's folder."""
    modes = {"time_forward.py": "forward", "time_generation.py": "generation"}
    stage_timer(stage, worker)
    shared = list(shared)

    def next_ratio(index: int) -> float:
        order = WHO if index % 2 == 0 else WHO[::-1]  # alternating: a drift in the load favours neither
        reports = _timed_pair(ctx, stage, scratch, modes[worker], order, what, shared)
        return float(reports["submission"]["seconds"] / reports["starter"]["seconds"])

    return timed_ratio(next_ratio, most=most)
