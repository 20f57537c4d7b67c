"""`mlab runs`: the runs under a folder (found at any depth), one line each: status, task, agent, steps, score."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from mlab.core.bench.results import classify
from mlab.core.bench.run_folders import runs_in
from mlab.core.bench.verdict import VERDICT_FIELDS, spent, trace_judge
from mlab.core.errors import MlabError
from mlab.core.models import Trace
from mlab.core.run.task_params import shown as shown_params
from mlab.core.run.trace import read_trace
from mlab.core.view.live import run_in_progress

from .console import fitted_table, make_console, print_fitted

BUDGETS = ("max_calls", "max_tokens", "max_cost")  # the run's budgets (None: not set), as RunConfig names them


def run_row(root: Path, run_dir: Path, judge: Callable[[Path, Trace], dict[str, Any]] | None = None) -> dict[str, Any]:
    """What the listing shows of one run: its verdict (the one rule's, through `judge`) and what it spent; an
    unreadable trace is listed with its problem, not skipped."""
    # a single run is named by its folder, not "."
    where = run_dir.resolve().name if run_dir == root else run_dir.relative_to(root).as_posix()
    try:
        trace = read_trace(run_dir)
    except MlabError as exc:
        return {"run": where, "run_dir": str(run_dir), "status": "unreadable", "error": str(exc), "task": None,
                "agent": None, "llm": None, "seed": None, "max_steps": None, **dict.fromkeys(BUDGETS),
                "end_reason": None, "score": None, "score_error": None, "started_at": None, "task_params": {},
                "tags": [], "meta": {}, "hardware": None,
                "failure": None,
                **dict.fromkeys(("steps", "llm_calls", "tokens", "cost_usd", "time_s")),
                **dict.fromkeys(VERDICT_FIELDS)}
    c = trace.config
    status: str = trace.status
    if status == "running" and run_in_progress(run_dir) is False:
        status = "interrupted"  # its process is gone: `mlab run --resume` continues it
    return {"run": where, "run_dir": str(run_dir), "status": status, "error": None, "task": c.task,
            "agent": c.agent, "llm": c.llm, "seed": c.seed, "max_steps": c.max_steps,
            "max_calls": c.max_calls, "max_tokens": c.max_tokens, "max_cost": c.max_cost,
            "end_reason": trace.end_reason, "score": trace.final_score, "score_error": trace.final_score_error,
            "task_params": c.task_params, "tags": c.tags, "meta": c.meta,
            "hardware": trace.hardware.summary() if trace.hardware else None,
            "failure": classify(trace),  # eval's and the report's word for what the run lacks
            **spent(trace), "started_at": trace.started_at,
            **(judge(run_dir, trace) if judge else dict.fromkeys(VERDICT_FIELDS))}


_STYLE = {"finished": "green", "failed": "red", "running": "cyan", "interrupted": "yellow", "unreadable": "red"}


@click.command()
@click.argument("folder", default="runs", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per run, as a list.")
@click.option("--tag", "tags", multiple=True, metavar="NAME",
              help="Only the runs tagged NAME (mlab run --tag); repeated: runs with every one.")
def runs(folder: Path, as_json: bool, tags: tuple[str, ...]) -> None:
    """List the runs in FOLDER (default: runs), searched at any depth: a run, a folder of runs or a bench. A run
    whose process is gone before it ended is shown as interrupted (mlab run --resume continues it)."""
    judge = trace_judge()
    rows = [run_row(folder, run_dir, judge) for run_dir in runs_in(folder)]
    if tags:
        rows = [r for r in rows if set(tags) <= set(r["tags"])]
        if not rows and not as_json:
            make_console().print(f"no run in {folder} is tagged {' and '.join(tags)}", highlight=False)
            return
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    tagged = any(r["task_params"] or r["tags"] or r["meta"] for r in rows)  # a column only where one says something
    columns = ("run", "status", "task", "agent", "steps", "score", "improvement", "end") + (
        ("params, tags",) if tagged else ())
    cells = []
    for r in rows:
        style = _STYLE.get(r["status"], "")
        agent = r["agent"] if not r["llm"] else f"{r['agent']} ({r['llm']})"
        score = f"{r['score']:.6g}" if r["score"] is not None else "-"
        cells.append([r["run"], f"[{style}]{r['status']}[/{style}]" if style else r["status"],
                      escape(r["task"] or "-"), escape(agent or "-"), steps_cell(r), score, improvement_cell(r),
                      escape(r["end_reason"] or r["error"] or r["score_error"] or ""),
                      *([tagging_cell(r)] if tagged else [])])
    console = make_console()
    # a cell keeps its words whole: the run's name is cut from its front (its seed is at the end) and, at a narrow
    # terminal, the least needed columns are left out, named under the table
    print_fitted(console, *fitted_table(
        console, f"runs in {folder}", columns, cells, tail_kept="run",
        wrapped=("steps", "improvement", "end", "params, tags"),
        left_out_first=("params, tags", "end", "task", "steps", "agent")))


def steps_cell(r: dict[str, Any]) -> str:
    """Steps of the step limit, then what each budget the run had has used: a run its call, token or cost limit
    ended must not read as one that stopped early at "10/50" for no reason."""
    if r["steps"] is None:
        return "-"
    steps = f"{r['steps']}/{r['max_steps']}"
    used = []
    if r["max_calls"] is not None:
        used.append(f"{r['llm_calls']}/{r['max_calls']} calls")
    if r["max_tokens"] is not None:
        used.append(f"{r['tokens']:,}/{r['max_tokens']:,} tokens")
    if r["max_cost"] is not None:
        spent = "?" if r["cost_usd"] is None else f"${r['cost_usd']:.4g}"
        used.append(f"{spent}/${r['max_cost']:g}")
    return ", ".join([f"{steps} steps", *used]) if used else steps


def tagging_cell(r: dict[str, Any]) -> str:
    """The task's parameters, then the tags (#name) and notes (key=value) the run was started with."""
    parts = [shown_params(r["task_params"])] if r["task_params"] else []
    parts += [f"#{tag}" for tag in r["tags"]] + [f"{key}={value}" for key, value in sorted(r["meta"].items())]
    return escape(" ".join(parts))


def improvement_cell(r: dict[str, Any]) -> str:
    """The improvement and the original's success, with a placeholder baseline's note: people read success here."""
    if r["improvement"] is None:
        return "-"
    text = f"{r['improvement']:+.1%}" + (" success" if r["success"] else "")
    return text + (" (any valid submission succeeds)" if r["baseline_note"] else "")
