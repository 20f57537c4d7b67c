"""What the search agent asks its model: one whole solution script per operator."""
from __future__ import annotations

import re

from .fitness import METRIC_TAG

PLAN_CHARS = 800  # of a node's plan kept in its memory and shown in later prompts

ROLE = ("You are an experienced machine-learning engineer. You solve the task below by writing complete, "
        "self-contained Python scripts; each one is run as it is and judged by its validation score.")
HARNESS_SCORE = "the harness's validation score"  # what a node's fitness is called when the harness validates


def score_name(validated: bool) -> str:
    return HARNESS_SCORE if validated else METRIC_TAG


def metric_rule(direction: str | None) -> str:
    if direction is None:
        return ("print the validation score as a number where higher is better (print minus the value of an "
                "error or a loss)")
    return f"print the task's metric on the validation data ({direction} is better)"


# Task texts address an agent that reads files step by step; this agent's model writes whole scripts and reads
# nothing itself (the harness shows it the data overview), so those requests are turned into what holds for it.
_NO_CSV_READING = re.compile(r"\s*Do not read the CSV files directly[^.;]*(?:\([^)]*\))?[^.;]*;?[^.]*\.",
                             re.IGNORECASE)
_READ_FIRST = re.compile(r"\b(?:Start by reading|Read) (\S+\.(?:txt|md)) to ([^.;\n]*)", re.IGNORECASE)


def for_script_writer(task: str) -> str:
    """The task's text without the requests a writer of whole scripts cannot carry out: reading a description
    file (the overview shows it) and not reading the CSV files (only the scripts read them)."""
    task = _NO_CSV_READING.sub("", task)
    return _READ_FIRST.sub(lambda m: f"{m.group(1)} (shown in the data overview below) is there to {m.group(2)}",
                           task)


def clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 5].rstrip() + " [...]"


def write_and_run(path: str, code: str) -> str:
    """The Python REPL command of one node: write the script and run it as `python SCRIPT` from the workspace,
    its output streamed, a failed exit told as Execute Script tells it."""
    return (f"import pathlib as _p, subprocess as _s, sys as _y\n"
            f"_f = _p.Path({path!r})\n"
            f"_f.parent.mkdir(parents=True, exist_ok=True)\n"
            f"_f.write_text({code!r}, encoding='utf-8')\n"
            f"_r = _s.run([_y.executable, '-u', {path!r}], stderr=_s.STDOUT)\n"
            f"if _r.returncode:\n    print(f'[exit code {{_r.returncode}}]')\n"
            f"del _p, _s, _y, _f, _r\n")


def requirements(direction: str | None, validation: tuple[str, str] | None = None) -> str:
    """What every script must do; with validation (the validation inputs file, the file the script writes its
    predictions for them to) the harness scores the script instead of a line it prints."""
    if validation is None:
        measure = [
            "- It trains only on the training data and holds part of it out (or cross-validates) to measure itself.",
            f"- It must {metric_rule(direction)} on one line of its own, exactly like `{METRIC_TAG}: 0.8123`.",
        ]
    else:
        inputs, predictions = validation
        measure = [
            f"- Besides the submission, it predicts the rows of `{inputs}` (validation inputs: their labels are "
            f"kept by the harness, which scores these predictions; the training data holds none of these rows) "
            f"and writes them, in the format of the submission, to `{predictions}` (exactly this path).",
        ]
    return "\n".join([
        "Requirements for every script:",
        "- It runs from the workspace folder as `python SCRIPT`, unattended, with the packages already installed.",
        *measure,
        "- It writes the submission file exactly as the task says, in the workspace folder.",
        "- It finishes in a few minutes: no long hyperparameter sweeps.",
    ])


def listing_and_starter(listing: str, starter_name: str, starter: str) -> str:
    return (f"## Files\n{listing}\n\n## The task's starter script, {starter_name}\n```python\n{starter}\n```")


def context(task: str, overview: str, direction: str | None, validation: tuple[str, str] | None = None) -> str:
    """The system prompt: the role, the task, the data overview the harness took, the requirements."""
    return (f"{ROLE}\n\n# Task\n{task}\n\n# Data overview (read from the workspace by the harness)\n"
            f"{overview}\n\n{requirements(direction, validation)}")


def reply_format() -> str:
    return ("Reply with a short plan (two to five sentences: what the script does and why), then the whole "
            "script in a single ```python code block. Nothing after the code block.")


def draft(results: str) -> str:
    return ("# Your job: a new solution\nWrite a new, reasonably simple solution to the task, different from the "
            f"earlier drafts listed below.\n\n# Results so far\n{results}\n\n{reply_format()}")


def improve(code: str, output: str, fitness: float, results: str, score: str = METRIC_TAG) -> str:
    return ("# Your job: improve a working solution\nThe script below ran and got "
            f"{score} = {fitness:g}. Make one focused change likely to improve that score (a feature, a "
            "model, a hyperparameter, a training detail), and keep everything that works.\n\n"
            f"```python\n{code}\n```\n\nIts output:\n```\n{output}\n```\n\n# Results so far\n{results}\n\n"
            f"{reply_format()}")


def debug(code: str, output: str, problem: str) -> str:
    return ("# Your job: fix a failing solution\nThe script below did not work: "
            f"{problem}. Find the cause and fix it, keeping the approach; if it ran too long, make it faster.\n\n"
            f"```python\n{code}\n```\n\nIts output:\n```\n{output}\n```\n\n{reply_format()}")


def crossover(first: tuple[str, float], second: tuple[str, float], results: str, score: str = METRIC_TAG) -> str:
    (code_a, fit_a), (code_b, fit_b) = first, second
    return ("# Your job: combine two working solutions\nSolution A got "
            f"{score} = {fit_a:g} and solution B {score} = {fit_b:g}. Write one script that combines "
            "the strongest ideas of both (e.g. B's features with A's model, or an ensemble of the two).\n\n"
            f"Solution A:\n```python\n{code_a}\n```\n\nSolution B:\n```python\n{code_b}\n```\n\n"
            f"# Results so far\n{results}\n\n{reply_format()}")


def correction(problem: str) -> str:
    return f"That reply could not be used: {problem}. {reply_format()}"
