"""Benches and their reports: `mlab bench` runs many (task, agent, seed) runs at once; `mlab report` sums them up."""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from mlab.core.bench.report_formats import FORMATS
from mlab.core.errors import MlabError
from mlab.core.run.task_lookup import find_task

from . import task_options
from .console import make_console
from .durations import Duration
from .run_cmds import method_label, model_settings_options, parse_agent_options
from .sizes import Size
from .view import BenchView


def _names(values: tuple[str, ...]) -> list[str]:
    """Repeatable options that also take comma lists: --tasks a,b --tasks c."""
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def _run_options(**given: object) -> dict[str, object]:
    """Only the options given, so runs keep the core's defaults for the rest."""
    return {key: value for key, value in given.items() if value is not None}


@click.command()
@click.option("--tasks", "tasks", multiple=True, required=True, help="Task names, comma-separated or repeated.")
@click.option("--agents", "agents", multiple=True, required=True, help="Agent names, comma-separated or repeated.")
@click.option("--llm", "llms", multiple=True, help="Model(s) for agents that need one; repeat to compare models.")
@click.option("--fast-llm", help="Model for summaries and reading files (default: --llm).")
@click.option("--edit-llm", help="Model for Edit Script actions (default: --llm).")
@click.option("--runs", default=8, show_default=True, type=click.IntRange(1, 1000), help="Seeds per task and agent.")
@click.option("--workers", type=click.IntRange(1, 1024), help="Runs at once (default: CPU count).")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True)
@click.option("--ray-address", help="Ray cluster to use (default: start a local Ray for this bench).")
@click.option("--cpus-per-run", type=click.FloatRange(0, min_open=True),
              help="CPUs each run's commands may use, and their OpenMP, MKL, OpenBLAS and numexpr threads: its own "
                   "CPUs while runs fit, a quota for a fraction (default: local, the cores / workers, at least 1; "
                   "Ray, cluster CPUs / workers, at most 1).")
@click.option("--gpus-per-run", type=click.IntRange(0, 64),
              help="GPUs each run holds alone while it runs: its sandbox shows only their device nodes and "
                   "CUDA_VISIBLE_DEVICES names them; runs wait for free ones (default: every run sees every GPU).")
@click.option("--memory-per-run", type=Size(), help="Memory each command of a run may use (default 16G).")
@click.option("--bench-dir", default="bench", show_default=True, type=click.Path(file_okay=False))
@click.option("--max-steps", default=50, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--action-timeout", "action_timeout_s", default="2h", show_default=True, type=Duration())
@click.option("--sandbox", default="auto", show_default=True,
              help="Sandbox of agent code: auto (bwrap, else local), local, bwrap, docker, or unconfined.")
@click.option("--agent-option", "agent_options", multiple=True, metavar="[AGENT:]KEY=VALUE",
              help="An agent option: KEY=VALUE for every agent that has it, AGENT:KEY=VALUE for one agent.")
@click.option("--label", "labels", multiple=True, metavar="AGENT=NAME",
              help="The name of AGENT's method in reports (default: agent (model)); repeat for each agent.")
@click.option("--allow-validate", is_flag=True,
              help="Offer the Validate Submission action: score predictions on each task's validation split.")
@click.option("--llm-api-base", metavar="URL",
              help="Server of the models, e.g. an OpenAI-compatible http://host:8000/v1.")
@click.option("--llm-timeout", "llm_timeout_s", type=Duration(), help="Time limit of one model request.")
@click.option("--llm-retries", type=click.IntRange(0, 100), help="Retries of a transient model failure.")
@click.option("--retry-failed", is_flag=True, help="Run failed runs again (finished runs are always kept).")
@click.option("--intermediate", is_flag=True, help="Also score step snapshots (at most 50 per run).")
@click.option("--max-connections", type=click.IntRange(1, 10_000),
              help="Model requests in flight at once, over all the bench's runs (default: no limit).")
@click.option("--retry-errors", default=0, show_default=True, type=click.IntRange(0, 100),
              help="Run a run that errored (harness, agent code or model error) again, up to N times; the errored "
                   "attempt is kept under BENCH_DIR/attempts.")
@click.option("--fail-fast", is_flag=True,
              help="Stop the bench at the first run that errored (after its retries); the others are resumable.")
@click.option("--registry", "registry_factory", hidden=True,
              help="module:function building the plugin registry (plugins under development, tests).")
@task_options.task_params
@task_options.run_tags
@model_settings_options  # generation parameters, prices and budgets: the same flags as `mlab run`
def bench(tasks: tuple[str, ...], agents: tuple[str, ...], llms: tuple[str, ...], fast_llm: str | None,
          edit_llm: str | None, runs: int, workers: int | None, engine: str, ray_address: str | None,
          cpus_per_run: float | None, gpus_per_run: int | None, memory_per_run: int | None, bench_dir: str,
          max_steps: int, action_timeout_s: float, sandbox: str,
          agent_options: tuple[str, ...], labels: tuple[str, ...], allow_validate: bool, llm_api_base: str | None,
          llm_timeout_s: float | None,
          llm_retries: int | None, retry_failed: bool, intermediate: bool, max_connections: int | None,
          retry_errors: int, fail_fast: bool, registry_factory: str | None, task_params: tuple[str, ...],
          tags: tuple[str, ...], meta: tuple[str, ...], model_settings: dict[str, Any]) -> None:
    """Run every task × agent × model × seed, many at once; results go to BENCH_DIR/results.db.

    Rerunning the same command skips finished runs and resumes interrupted ones; Ctrl-C stops cleanly.
    """
    from mlab.core.bench.driver import Bench, BenchSpec

    max_time_s = float(model_settings.pop("max_time_s"))
    spec = BenchSpec(tasks=_names(tasks), agents=_names(agents), llms=list(llms) or [None], runs=runs,
                     max_steps=max_steps, max_time_s=max_time_s, action_timeout_s=action_timeout_s, sandbox=sandbox,
                     fast_llm=fast_llm, edit_llm=edit_llm, agent_options=parse_agent_options(agent_options),
                     intermediate=intermediate, labels=_labels(labels, _names(agents)), run_options=_run_options(
                         **{key: value or None for key, value in model_settings.items()}, llm_api_base=llm_api_base,
                         llm_timeout_s=llm_timeout_s, allow_validate=allow_validate or None,
                         llm_retry=None if llm_retries is None else {"max_attempts": llm_retries + 1},
                         task_params=task_options.given_params(task_params) or None,
                         tags=task_options.parse_tags(tags) or None, meta=task_options.parse_meta(meta) or None))
    if engine == "local" and ray_address:
        raise MlabError("--ray-address names a Ray cluster: runs there need --engine ray")
    if max_connections and ray_address:  # its slot files are on this machine: a node elsewhere cannot share them
        raise MlabError("--max-connections holds across the processes of one machine: not with --ray-address")
    runner = Bench(Path(bench_dir), spec, workers=workers, engine=engine, retry_failed=retry_failed,
                   registry_factory=registry_factory, ray_address=ray_address, cpus_per_run=cpus_per_run,
                   max_connections=max_connections, retry_errors=retry_errors, fail_fast=fail_fast,
                   gpus_per_run=gpus_per_run, memory_per_run=memory_per_run)
    if allow_validate:
        _check_validation_splits(runner.registry, spec.tasks)
    for name in spec.tasks:  # -T applies to every task: each must declare it, with a value of its type
        find_task(runner.registry, name, task_options.given_params(task_params))
    console = make_console()
    started = time.monotonic()
    with BenchView(f"bench {bench_dir}") as view:
        try:
            status = runner.run(on_update=view.update)
        except KeyboardInterrupt:
            status = None
    if status is None:
        console.print(f"interrupted: finished runs are kept in {bench_dir}; rerun the same command to resume "
                      "the others", highlight=False)
        sys.exit(130)
    console.print(f"bench {bench_dir}: {status.done} finished, {status.failed} failed"
                  + (f", {status.never_started} never started" if status.never_started else "")
                  + f" ({status.skipped} already done before), {status.tokens:,} tokens, {status.cost_text()}, "
                  f"{time.monotonic() - started:.1f} s", highlight=False)
    if status.retried:
        console.print(f"retried: {status.retried} errored attempt(s) run again (--retry-errors); the errored "
                      f"attempts are kept in {Path(bench_dir) / 'attempts'}", highlight=False)
    if status.stopped_by:
        never = f", {status.never_started} never started" if status.never_started else ""
        make_console(stderr=True).print(f"fail-fast: run {status.stopped_by} errored; the bench stopped the other "
                                        f"runs{never} (rerun the same command to resume them)",
                                        highlight=False, markup=False, soft_wrap=True)
        sys.exit(1)
    console.print(f"results: {Path(bench_dir) / 'results.db'}; see: mlab report {bench_dir}", highlight=False)


def _labels(pairs: tuple[str, ...], agents: list[str]) -> dict[str, str]:
    """--label AGENT=NAME, repeated: each agent's method name."""
    out: dict[str, str] = {}
    for pair in pairs:
        agent, sep, name = pair.partition("=")
        if not sep or agent.strip() not in agents:
            raise click.UsageError(f"--label takes AGENT=NAME with AGENT one of --agents "
                                   f"({', '.join(agents)}), got {pair!r}")
        if agent.strip() in out:  # the later one would win unsaid
            raise click.UsageError(f"--label: {agent.strip()} is given two labels; give each agent one")
        out[agent.strip()] = str(method_label(name))
    for agent, name in out.items():  # reports would merge the two agents' runs as one method
        if name in agents and name != agent and name not in out:
            raise click.UsageError(f"--label {agent}={name}: {name} is another agent's name in this bench")
    if len(set(out.values())) < len(out):
        raise click.UsageError("--label: two agents were given the same name")
    return out


def _check_validation_splits(registry: Any, task_names: list[str]) -> None:
    """--allow-validate needs every task to declare a validation split: say which do not, before any run."""
    lacking = [name for name in task_names if registry.get("tasks", name).validation is None]
    if lacking:
        raise click.UsageError(f"--allow-validate: these tasks declare no validation split: {', '.join(lacking)}")


@click.command()
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write (default: FOLDER/report; for one run, ./report-RUN: never into a run folder).")
@click.option("--compare", nargs=2, metavar="AGENT_A AGENT_B",
              help="Paired comparison of two agents on the same tasks (automatic when there are exactly two).")
@click.option("--format", "table_format", type=click.Choice(FORMATS), default="table", show_default=True,
              help="How the tables are given: on the terminal, or as CSV files (numbers, intervals in their own "
                   "columns), LaTeX (booktabs) or JSON written to OUT/tables and printed (CSV: the files' paths).")
@click.option("--no-plots", is_flag=True, help="Skip the plots (PDF, SVG and 300-dpi PNG).")
@click.option("--no-html", is_flag=True, help="Skip the HTML report.")
@click.option("--json", "as_json", is_flag=True, help="Print the metrics as JSON instead of tables.")
def report(folder: Path, out_dir: Path | None, compare: tuple[str, str] | None, table_format: str, no_plots: bool,
           no_html: bool, as_json: bool) -> None:
    """Tables of the metrics of a bench, a folder of runs or one run; plots for a paper (PDF, SVG, PNG) and a
    static HTML report with a trace viewer."""
    import json

    from mlab.core.bench import report as rep
    from mlab.core.bench.report_formats import to_csv, to_json, to_latex

    if as_json and table_format != "table":
        raise click.UsageError("--json prints the metrics; --format prints the tables: give one of them")
    data = rep.load_any(folder, compare or None)
    data_on_stdout = as_json or table_format != "table"
    console = make_console(stderr=data_on_stdout)
    warn = make_console(stderr=True)
    for line in data.skipped:  # rows of an untrusted results.db that could not be used
        warn.print(f"warning: {line}", highlight=False, markup=False, soft_wrap=True)
    if not data.rows:
        raise MlabError(f"bench {str(folder)!r} has no runs yet")
    target = out_dir or rep.default_out(folder)
    rep.check_out(target)
    written = rep.write(data, target, plots=not no_plots, html=not no_html,
                        log=lambda msg: console.print(msg, highlight=False))
    tables = rep.report_tables(data)
    if table_format in ("csv", "json"):
        tables.append(rep.runs_table(data))  # one row per run: runs.csv
    if as_json:
        click.echo(json.dumps(data.as_dict(), indent=1, default=str))
    elif table_format == "table":
        for table in (t for t in tables if t.shown):  # runs.csv's table is for machines only
            console.print(rep.to_rich(table))
        sources = ", ".join(f"{t}: {s}" for t, s in data.baseline_sources.items())
        console.print(f"baselines — {sources}", highlight=False, markup=False)
        for note in sorted({f"{g.task}: {g.baseline_note}" for g in data.groups if g.baseline_note}):
            console.print(f"note: {note}", highlight=False, markup=False)
    else:
        tables_dir = target / "tables"
        tables_dir.mkdir(parents=True, exist_ok=True)
        if table_format == "csv":
            for table in tables:
                path = tables_dir / f"{table.key}.csv"
                path.write_text(to_csv(table), encoding="utf-8")
                click.echo(str(path))
        else:
            text = to_json(tables) if table_format == "json" else "\n".join(to_latex(t) for t in tables if t.shown)
            path = tables_dir / ("tables.json" if table_format == "json" else "tables.tex")
            path.write_text(text, encoding="utf-8")
            click.echo(text, nl=False)
            console.print(f"tables: {path}", highlight=False)
    if data.unconfined_runs:
        console.print(f"[red]warning: {len(data.unconfined_runs)} run(s) ran agent code unconfined (--sandbox "
                      "unconfined): their scores prove nothing[/red]")
    if data.validated_runs:
        console.print(f"note: {len(data.validated_runs)} run(s) could score predictions on a validation split "
                      "(--allow-validate): compare them with runs that could too", highlight=False)
    if hardware := data.hardware_line():
        console.print(hardware, highlight=False, markup=False, soft_wrap=True)
    figures = sorted({path.with_suffix("") for path in written.get("plots", [])})
    for figure in figures:
        formats = ",".join(sorted(p.suffix[1:] for p in written["plots"] if p.with_suffix("") == figure))
        console.print(f"plot: {figure}.{{{formats}}}", highlight=False)
    if "html" in written:
        console.print(f"report: {written['html'].resolve().as_uri()}", highlight=False)
