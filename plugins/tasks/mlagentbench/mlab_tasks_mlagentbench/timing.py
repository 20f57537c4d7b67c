"""Timing a submission against the starter under one load, for the pack's speed tasks (vectorization,
llama-inference).

The scorer times the shipped starter and the submission back to back, interleaved, in the scoring sandbox, and
the score is a robust mean of the per-pair ratios (submission's time / starter's time): the two runs of a pair see
about the same load, where a time compared with a baseline recorded under other load would not. A task whose runs
disagree more (llama-inference times its part once per run) times more pairs while they disagree, up to a cap.
Timers report the fastest of several repeats within a run where the timed part can be repeated (vectorization):
other load only ever adds CPU time (context switches cost cache). Beside `stress-ng --cpu 2` on a loaded 2-core
machine one starter's single-pass CPU times ranged from 1.86 to 3.2 s, and each estimate from one pass per run
(median ratio, ratio of the fastest runs) scored an unchanged starter 14-16% off in one of 5 scorings.

Layout: `stage` (read-only to every timed command) holds the timer, `starter/`, `submission/` and the task's shared
files; each timed run gets a fresh writable copy of its script folder in `scratch`, with links to the shared
files, so one run cannot change what the next one runs (a submission slowing the starter down would win).
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
# More pairs while the pairs disagree, up to a cap the task sets: the estimate's 90% confidence interval (Student's
# t on the log ratios) must be within PRECISION of it, in relative terms.
PRECISION = 0.03
CONFIDENCE = 0.90
TRIM = 0.25  # the share of log ratios cut from each end for the estimate: with 4 pairs, the median
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


def _timed_run(ctx: ScoringContext, stage: Path, scratch: Path, timer: str, who: str, what: str,
               shared: Iterable[str]) -> Report:
    # One folder for every run: the starter and the submission then start with the same argv and environment.
    # Run from folders of different names, two identical scripts differed by up to 14% for a whole scoring,
    # consistently (their stacks sit at other alignments), and by other amounts in other scorings.
    run_dir, home = scratch / "run", scratch / "home"
    for folder in (run_dir, home):
        shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(stage / who, run_dir, symlinks=True)
    home.mkdir()
    for name in shared:
        os.symlink(stage / name, run_dir / name)
    # -s: no user site-packages, which a run could plant in the shared HOME for the next one
    argv = [sys.executable, "-s", str(stage / timer), str(run_dir), str(stage / "starter")]
    result = ctx.run(argv, stage, scratch, env={**SINGLE_THREAD, "HOME": str(home), "TMPDIR": str(home)})
    lines = [line for line in result.output.splitlines() if line.startswith("{")]
    if result.exit_code != 0 or not lines:
        tail = " | ".join(result.output.strip().splitlines()[-3:])[-300:]
        raise InvalidSubmission(f"timing the {who}'s {what} failed (exit code {result.exit_code}): {tail}")
    try:
        report = json.loads(lines[-1])
        seconds = float(report["seconds"])
    except (ValueError, KeyError, TypeError):
        raise InvalidSubmission(f"timing the {who}'s {what} printed {lines[-1][:120]!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise InvalidSubmission(f"the {who}'s {what} took {seconds} s")
    report["seconds"] = seconds
    return report


def _scipy_stats() -> Any:
    """scipy.stats when first needed (the task registry imports this module; scipy ships no type hints)."""
    return importlib.import_module("scipy.stats")


def ratio_estimate(ratios: list[float]) -> float:
    """The submission's time over the starter's from the pairs' ratios: the trimmed mean of their logarithms (a
    pair whose run met a burst of load is cut, and the rest are averaged): for 4 pairs, the geometric mean of
    the middle two."""
    import numpy as np

    return math.exp(float(_scipy_stats().trim_mean(np.log(ratios), TRIM)))


def settled(ratios: list[float], *, least: int = REPETITIONS, most: int = REPETITIONS) -> bool:
    """Whether the pairs timed so far are enough: at least `least`, an even number (half with the starter first),
    and either `most` or agreeing well enough (the half-width of the t confidence interval of their mean log ratio
    at most PRECISION in relative terms)."""
    count = len(ratios)
    if count < least or count % 2:
        return False
    if count >= most:
        return True
    import numpy as np

    logs = np.log(ratios)
    spread = float(np.std(logs, ddof=1)) / math.sqrt(count)
    critical = float(_scipy_stats().t.ppf((1 + CONFIDENCE) / 2, count - 1))
    return critical * spread <= math.log1p(PRECISION)


def interleaved_ratio(ctx: ScoringContext, stage: Path, scratch: Path, timer: str, *, what: str,
                      shared: Iterable[str] = (), most: int = REPETITIONS,
                      difference: Callable[[Report, Report], str | None] | None = None) -> float:
    """`ratio_estimate` over back-to-back pairs of the submission's time and the starter's, alternating which runs
    first (so neither gets more of the runs that come second), until `settled` (at most `most` pairs). `timer` (a
    script of the pack) is run as `python TIMER RUN_FOLDER STARTER_FOLDER` with the stage as its working
    directory; `difference` says how the submission's result differs from the starter's (InvalidSubmission), or
    None."""
    if most < REPETITIONS or most % 2:
        raise ValueError(f"timing needs an even number of pairs, at least {REPETITIONS}, not {most}")
    shutil.copyfile(PACKAGE_DIR / timer, stage / timer)
    shared = list(shared)
    ratios: list[float] = []
    while not settled(ratios, most=most):
        order = WHO if len(ratios) % 2 == 0 else WHO[::-1]  # alternating: a drift in the load favours neither
        reports = {who: _timed_run(ctx, stage, scratch, timer, who, what, shared) for who in order}
        problem = difference(reports["starter"], reports["submission"]) if difference else None
        if problem:
            raise InvalidSubmission(problem)
        ratios.append(reports["submission"]["seconds"] / reports["starter"]["seconds"])
    return ratio_estimate(ratios)
