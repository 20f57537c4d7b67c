"""A node's fitness: which way the task's metric points, and what a script's run says about the node."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from mlab.core.agentkit import read_validation

METRIC_TAG = "VALIDATION_METRIC"
_METRIC_LINE = re.compile(rf"^\s*{METRIC_TAG}\s*[:=]\s*(\S+)", re.MULTILINE)
_TIMEOUT = "ran past the time limit"
_TRACEBACK = "Traceback (most recent call last):"
_FAILED_EXIT = re.compile(r"^\[exit code -?[1-9]\d*\]\s*$", re.MULTILINE)  # a script that exited non-zero

# Said outright in a research problem.
_SAYS_LOWER = re.compile(r"lower is better|smaller is better|\bminimi[sz]e\b|\blower the\b", re.IGNORECASE)
_SAYS_HIGHER = re.compile(r"higher is better|larger is better|\bmaximi[sz]e\b", re.IGNORECASE)
# Named metrics whose direction is standard.
_LOWER_METRICS = re.compile(r"\b(mean (absolute|squared) error|root mean squared error|r?mse|mae|mcrmse|smape|"
                            r"perplexity|log[- ]?loss|cross[- ]entropy|error rate)\b", re.IGNORECASE)
_HIGHER_METRICS = re.compile(r"\b(accuracy|f1|auc|roc[- ]auc|dice|map@\d+|precision|recall|r2|r²)(?!\w)",
                             re.IGNORECASE)


def infer_direction(research_problem: str) -> str | None:
    """"higher" or "lower" when the task's text makes it plain which way its metric points, else None."""
    lower, higher = bool(_SAYS_LOWER.search(research_problem)), bool(_SAYS_HIGHER.search(research_problem))
    if lower != higher:
        return "lower" if lower else "higher"
    lower, higher = bool(_LOWER_METRICS.search(research_problem)), bool(_HIGHER_METRICS.search(research_problem))
    if lower != higher:
        return "lower" if lower else "higher"
    return None


@dataclass
class RunOutcome:
    status: str  # ok, buggy or timeout
    fitness: float | None
    error: str  # why it is not ok, in one line


def read_outcome(observation: str, is_error: bool, need_metric: bool = True) -> RunOutcome:
    """Classify a node's Execute Script observation: a timeout, a failure, a run without a usable metric line,
    or an ok run with the last metric it printed. Without need_metric (the harness validates the node) an ok run
    has no fitness yet."""
    if is_error and _TIMEOUT in observation:
        return RunOutcome("timeout", None, "ran past the time limit")
    if is_error or _TRACEBACK in observation or _FAILED_EXIT.search(observation):
        return RunOutcome("buggy", None, _last_error_line(observation))
    if not need_metric:
        return RunOutcome("ok", None, "")
    values = _METRIC_LINE.findall(observation)
    if not values:
        return RunOutcome("buggy", None, f"printed no {METRIC_TAG} line")
    try:
        value = float(values[-1])
    except ValueError:
        return RunOutcome("buggy", None, f"{METRIC_TAG} is not a number: {values[-1][:40]}")
    if not math.isfinite(value):
        return RunOutcome("buggy", None, f"{METRIC_TAG} is {values[-1]}")
    return RunOutcome("ok", value, "")


def read_validated(observation: str, is_error: bool) -> tuple[RunOutcome, str | None]:
    """A node's Validate Submission observation: (ok with the harness's score, and which way the score points),
    or (buggy with why the predictions could not be scored, None)."""
    scored = None if is_error else read_validation(observation)
    if scored is None:
        reason = observation.removeprefix("EnvError: ").strip().splitlines()[0] if observation.strip() else "?"
        return RunOutcome("buggy", None, f"validation: {reason}"[:200]), None
    return RunOutcome("ok", scored[0], ""), scored[1]


def _last_error_line(observation: str) -> str:
    """The line that names the error: the last one of a traceback, else the last non-empty line."""
    lines = [line.strip() for line in observation.splitlines() if line.strip() and not line.startswith("[")]
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b", line):
            return line[:200]
    return (lines[-1] if lines else "failed")[:200]
