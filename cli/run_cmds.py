"""Commands that do work: prepare, baseline, run, eval."""
from __future__ import annotations

import functools
import json
import shlex
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from mlab.core.errors import MlabError
from mlab.core.llm import generation
from mlab.core.models import ComputeSlice, RunConfig
from mlab.core.plugins.registry import load_registry
from mlab.core.run import taskdata
from mlab.core.run.task_lookup import find_task, run_fields

from . import task_options
from .console import fitted_table, make_console, print_fitted
from .durations import Duration
from .sizes import Size


def _deprecated_alias(new: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def note(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value is not None:
            click.echo(f"mlab: note: {param.opts[0]} is deprecated and will go; use {new}", err=True)
        return value
    return note


_MODEL_FLAGS = (
    click.option("--temperature", multiple=True, metavar="[ROLE:]T",
                 help="Sampling temperature of the models; ROLE: main, fast or edit (repeatable)."),
    click.option("--top-p", multiple=True, metavar="[ROLE:]P", help="Nucleus sampling of the models."),
    click.option("--llm-seed", multiple=True, metavar="[ROLE:]N",
                 help="Sampling seed sent to the models (--seed is the run's own)."),
    click.option("--max-completion-tokens", multiple=True, metavar="[ROLE:]N",
                 help="Longest completion of one model call, in tokens."),
    click.option("-M", "--model-param", "model_params", multiple=True, metavar="[ROLE:]KEY=VALUE",
                 help="Any other parameter the model's backend takes (VALUE parsed as JSON when it can be)."),
    click.option("--model-config", type=click.Path(dir_okay=False), metavar="FILE",
                 help="Parameters from a YAML or JSON file; keys main, fast, edit hold a role's own."),
    click.option("--price", "prices", multiple=True, metavar="[ROLE:]IN,OUT",
                 help="USD per million prompt and completion tokens, for models without a known price."),
    click.option("--token-limit", type=click.IntRange(1), help="Token budget of a run (prompt + completion)."),
    click.option("--cost-limit", type=click.FloatRange(0, min_open=True), help="Cost budget of a run in USD."),
    click.option("--time-limit", type=Duration(), help="Wall-clock limit of a run  [default: 5h]"),
    click.option("--max-calls", type=click.IntRange(1), help="Model calls a run may make (every role's)."),
    click.option("--max-tokens", type=click.IntRange(1), hidden=True, callback=_deprecated_alias("--token-limit")),
    click.option("--max-cost", type=click.FloatRange(0, min_open=True), hidden=True,
                 callback=_deprecated_alias("--cost-limit")),
    click.option("--max-time", type=Duration(), hidden=True, callback=_deprecated_alias("--time-limit")),
)
_MODEL_KEYS = ("temperature", "top_p", "llm_seed", "max_completion_tokens", "model_params", "model_config",
               "prices", "token_limit", "cost_limit", "time_limit", "max_calls", "max_tokens", "max_cost", "max_time")
DEFAULT_TIME_LIMIT_S = 5 * 3600.0


def model_settings_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The flags `mlab run` and `mlab bench` share: generation parameters by role, prices and a run's budgets.

    The command receives them gathered as `model_settings`, RunConfig fields: llm_params, llm_price,
    max_tokens, max_cost, max_calls and max_time_s.
    """
    @functools.wraps(command)
    def gathered(*args: Any, **kwargs: Any) -> Any:
        given = {key: kwargs.pop(key) for key in _MODEL_KEYS}
        return command(*args, model_settings=model_settings(**given), **kwargs)

    for flag in reversed(_MODEL_FLAGS):
        gathered = flag(gathered)
    return gathered


def model_settings(temperature: tuple[str, ...] = (), top_p: tuple[str, ...] = (), llm_seed: tuple[str, ...] = (),
                   max_completion_tokens: tuple[str, ...] = (), model_params: tuple[str, ...] = (),
                   model_config: str | None = None, prices: tuple[str, ...] = (), token_limit: int | None = None,
                   cost_limit: float | None = None, time_limit: float | None = None, max_calls: int | None = None,
                   max_tokens: int | None = None, max_cost: float | None = None,
                   max_time: float | None = None) -> dict[str, Any]:
    """RunConfig fields from the shared flags; a budget given under both its names is refused."""
    def one(new_name: str, new: Any, old_name: str, old: Any) -> Any:
        if new is not None and old is not None:
            raise click.UsageError(f"{old_name} is the old name of {new_name}; give only {new_name}")
        return new if new is not None else old

    named = {"temperature": temperature, "top_p": top_p, "seed": llm_seed,
             "max_completion_tokens": max_completion_tokens}
    time_s = one("--time-limit", time_limit, "--max-time", max_time)
    return {"llm_params": generation.gather(named, model_params, model_config),
            "llm_price": generation.parse_prices(prices),
            "max_tokens": one("--token-limit", token_limit, "--max-tokens", max_tokens),
            "max_cost": one("--cost-limit", cost_limit, "--max-cost", max_cost),
            "max_calls": max_calls,
            "max_time_s": DEFAULT_TIME_LIMIT_S if time_s is None else time_s}


def any_model_setting(settings: dict[str, Any]) -> bool:
    """True when the shared flags were used: their settings differ from those of no flags at all."""
    return settings != model_settings()


@click.command()
@click.argument("task_name", metavar="TASK")
@click.option("--runs", default=1, show_default=True, type=click.IntRange(1, 100))
@click.option("--timeout", "timeout_s", type=Duration(), default="2h", show_default=True,
              help="Time limit of the starter script.")
@click.option("--sandbox", default="auto", show_default=True,
              help="Sandbox the starter runs in (see: mlab list-plugins).")
@task_options.task_params
def baseline(task_name: str, runs: int, timeout_s: float, sandbox: str, task_params: tuple[str, ...]) -> None:
    """Run a task's baseline and record the mean score that improvement is measured against.

    TASK is an installed task's name or a task folder (holding task.yaml)."""
    from mlab.core.run.baseline import measure_baseline
    from mlab.core.run.harness import Harness

    harness = Harness(load_registry(), sandbox=sandbox)
    _ = harness.sandbox_cls  # resolved now: an unknown sandbox is one line before any run starts
    task = harness.task(task_name, task_options.given_params(task_params))
    if task.fixed_baseline is not None:
        click.echo(f"{task.name}: note: the task fixes its baseline at {task.fixed_baseline:.6g}; runs are judged "
                   "against that, not against what is measured here", err=True)
    task.check_runnable()
    harness.ensure_prepared(task)
    scores = measure_baseline(harness, task, runs=runs, timeout_s=timeout_s,
                              on_progress=lambda line: click.echo(line, err=True))
    valid = [s for s in scores if s is not None]
    spread = f" (sd {statistics.stdev(valid):.4g})" if len(valid) > 1 else ""
    click.echo(f"{task.name}: baseline {task.metric.name} = {statistics.fmean(valid):.6g}{spread}, the mean of "
               f"{len(valid)} valid of {len(scores)} run(s) in sandbox {harness.sandbox_name}, recorded in "
               f"{harness.home.baseline_path(task)}")


@click.command()
@click.option("--task", "task_name", help="Task name (see: mlab tasks), or a task folder holding task.yaml.")
@click.option("--agent", "agent_name", default="baseline", show_default=True, help="Agent (see: mlab agents).")
@click.option("--llm", help="Main model, e.g. scripted:replies.jsonl or openai/gpt-4o.")
@click.option("--fast-llm", help="Model for summaries and reading files (default: --llm).")
@click.option("--edit-llm", help="Model for Edit Script actions (default: --llm).")
@click.option("--max-steps", default=50, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--action-timeout", "action_timeout_s", default="2h", show_default=True, type=Duration(),
              help="Time limit of one script or REPL command.")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Where to write the run (default: runs/<id>).")
@click.option("--seed", default=0, show_default=True, type=int, help="The run's seed (given to the agent).")
@click.option("--label", metavar="NAME", multiple=True, callback=lambda _ctx, _param, given: _given_once(given),
              help="The method's name in reports (default: agent (model)).")
@click.option("--sandbox", default="auto", show_default=True,
              help="Sandbox of agent code: auto (bwrap, else local), local, bwrap, docker, or unconfined.")
@click.option("--agent-option", "agent_options", multiple=True, metavar="KEY=VALUE",
              help="An agent setting; repeatable. VALUE is parsed as JSON when it can be.")
@click.option("--interactive", is_flag=True, help="Allow the agent to ask you for help.")
@click.option("--allow-validate", is_flag=True,
              help="Offer the Validate Submission action: score predictions on the task's validation split.")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), help="Continue a killed run.")
@click.option("--llm-api-base", metavar="URL", help="Server of the models, e.g. an OpenAI-compatible http://host:8000/v1.")
@click.option("--llm-timeout", "llm_timeout_s", type=Duration(), help="Time limit of one model request (default 10m).")
@click.option("--llm-retries", type=click.IntRange(0, 100), help="Retries of a transient model failure (default 7).")
@click.option("--max-connections", type=click.IntRange(1, 10_000),
              help="Model requests the run has in flight at once (e.g. an agent's parallel calls).")
@click.option("--llm-cache", is_flag=False, flag_value="", default=None, metavar="[DIR]",
              help="Cache model answers on disk (default DIR: $MLAB_HOME/llm_cache); a rerun calls no API.")
@click.option("--cpus", type=click.FloatRange(0, min_open=True),
              help="CPUs the run's commands may use (a cgroup quota where one can be made), and their OpenMP, MKL, "
                   "OpenBLAS and numexpr threads (default: not bounded).")
@click.option("--memory", "memory_bytes", type=Size(), help="Memory each command of the run may use (default 16G).")
@task_options.task_params
@task_options.run_tags
@model_settings_options
def run(task_name: str | None, agent_name: str, llm: str | None, fast_llm: str | None, edit_llm: str | None,
        max_steps: int, action_timeout_s: float, run_dir: str | None, seed: int, label: str | None, sandbox: str,
        agent_options: tuple[str, ...], interactive: bool, allow_validate: bool, resume_dir: str | None,
        llm_api_base: str | None,
        llm_timeout_s: float | None, llm_retries: int | None, llm_cache: str | None, max_connections: int | None,
        cpus: float | None, memory_bytes: int | None, task_params: tuple[str, ...], tags: tuple[str, ...],
        meta: tuple[str, ...], model_settings: dict[str, Any]) -> None:
    """Run an agent on a task, tracing every step; or resume a killed run."""
    from mlab.core.run.runner import Runner, new_run_dir
    from mlab.core.run.trace import read_trace

    from .view import StepView

    registry = load_registry()
    if resume_dir and any_model_setting(model_settings):
        raise click.UsageError("--resume continues a run with the settings in its config.json; drop the generation, "
                               "price and budget flags")
    if resume_dir and max_connections:
        raise click.UsageError("--resume continues a run with the settings in its config.json; drop --max-connections")
    if resume_dir and (cpus or memory_bytes):
        raise click.UsageError("--resume continues a run with the settings in its config.json; drop --cpus and "
                               "--memory")
    if resume_dir and label:
        raise click.UsageError("--resume continues a run with the settings in its config.json; drop --label")
    if resume_dir and allow_validate:
        raise click.UsageError("--resume continues a run with the settings in its config.json; drop --allow-validate")
    if resume_dir and (task_params or tags or meta):
        raise click.UsageError("--resume continues a run with the settings in its config.json; drop -T, --tag and "
                               "--meta")
    if resume_dir:
        from mlab.core.view.live import run_in_progress

        trace = read_trace(Path(resume_dir))
        if trace.status == "running" and run_in_progress(Path(resume_dir)):  # before anything is printed
            where = shlex.quote(resume_dir)
            raise MlabError(f"run {where} is running in another mlab process; watch it with: mlab view {where}")
        if trace.status != "running":
            raise MlabError(f"run {resume_dir!r} has already ended ({trace.status}: {trace.end_reason}), so there is "
                            f"nothing to resume; see it with: mlab view {shlex.quote(resume_dir)}")
        config = trace.config
        runner = Runner(Path(resume_dir), config, registry, ask_human=_ask_human if config.interactive else None)
    else:
        if not task_name:
            valid = ", ".join(sorted(registry.items["tasks"])) or "(none installed)"
            raise MlabError(f"--task is required; valid tasks: {valid}")
        task = find_task(registry, task_name, task_options.given_params(task_params))
        config = RunConfig(**run_fields(task), agent=registry.get("agents", agent_name).name,
                           tags=task_options.parse_tags(tags), meta=task_options.parse_meta(meta),
                           llm=llm, fast_llm=fast_llm, edit_llm=edit_llm, max_steps=max_steps,
                           action_timeout_s=action_timeout_s, seed=seed, label=method_label(label),
                           sandbox=sandbox, agent_options=parse_agent_options(agent_options), interactive=interactive,
                           allow_validate=allow_validate, llm_api_base=llm_api_base, llm_timeout_s=llm_timeout_s,
                           llm_cache=_cache_dir(llm_cache), max_connections=max_connections,
                           llm_retry={} if llm_retries is None else {"max_attempts": llm_retries + 1},
                           compute=ComputeSlice(cpus=cpus, memory_bytes=memory_bytes)
                           if cpus or memory_bytes else None, **model_settings)
        if allow_validate and task.validation is None:
            raise click.UsageError(f"task {config.task!r} declares no validation split, so --allow-validate cannot "
                                   "be used with it")
        target = Path(run_dir) if run_dir else new_run_dir(config)
        _check_new_run_dir(target)
        runner = Runner(target, config, registry, ask_human=_ask_human if interactive else None)
    view = StepView(f"{config.agent} on {config.task}", config.max_steps)
    if any(b.uses_terminal for b in (runner._backends or {}).values()):
        view.live = None  # a person answers model calls in this terminal: no live redraw over their typing
    view.follow(lambda: runner.live.state)
    if resume_dir:
        view.resume(trace.steps)
    try:
        with view:
            runner.on_step = view.add
            trace = runner.resume() if resume_dir else runner.start()
    except KeyboardInterrupt:
        click.echo(f"mlab: {_interrupted_hint(runner.run_dir)}", err=True)
        raise
    console = make_console()
    score = "none" if trace.final_score is None else f"{trace.final_score:.6g}"
    console.print(f"run {trace.status}: {trace.end_reason}; {len(trace.steps)} steps, "
                  f"{trace.total_time_s:.1f} s", highlight=False)
    console.print(f"final {runner.task.metric.name}: {score}"
                  + (f" ({trace.final_score_error})" if trace.final_score_error else ""), highlight=False)
    if trace.final_score is not None:  # judged as eval judges it: the improvement is what people read
        from mlab.core.bench.verdict import RunJudge, success_text

        judged = RunJudge(runner.harness.home).judge(runner.run_dir, runner.task, trace.final_score)
        console.print(success_text(judged, runner.task), highlight=False, markup=False, soft_wrap=True)
    if trace.usage.calls:
        console.print(f"LLM: {trace.usage.calls} calls, {trace.usage.total_tokens} tokens, cost "
                      f"{trace.usage.cost_text()}", highlight=False)
    console.print(f"trace: {runner.run_dir / 'trace.json'}", highlight=False, soft_wrap=True)
    console.print(f"see it: mlab view {shlex.quote(str(runner.run_dir))}", highlight=False, soft_wrap=True)
    if trace.status == "failed":
        sys.exit(1)


def _check_new_run_dir(target: Path) -> None:
    """A --run-dir that already holds something: say what it is and what can be done with it."""
    from mlab.core.run.trace import read_trace
    from mlab.core.view.live import run_in_progress

    if not target.is_dir() or not any(target.iterdir()):
        return
    where = shlex.quote(str(target))
    try:
        trace = read_trace(target)
    except MlabError:
        raise MlabError(f"--run-dir {where} is not empty and holds no run; give a new or empty folder") from None
    if trace.status == "running" and run_in_progress(target):
        raise MlabError(f"--run-dir {where} holds a run going on in another mlab process; watch it with: "
                        f"mlab view {where}")
    if trace.status == "running":
        raise MlabError(f"--run-dir {where} holds a run stopped after step {len(trace.steps)}; continue it with: "
                        f"mlab run --resume {where}")
    raise MlabError(f"--run-dir {where} holds a run that has ended ({trace.status}: {trace.end_reason}); see it "
                    f"with: mlab view {where}; give another --run-dir for a new run")


def _interrupted_hint(run_dir: Path) -> str:
    """After Ctrl-C: --resume only where there is a trace to resume from."""
    from mlab.core.run.trace import read_trace

    where = shlex.quote(str(run_dir))
    try:
        trace = read_trace(run_dir)
    except MlabError:
        return "interrupted before the run started, so nothing was kept: start it again with the same command"
    if trace.status == "running":
        return (f"interrupted after step {len(trace.steps)} of at most {trace.config.max_steps}; continue with: "
                f"mlab run --resume {where}")
    return f"interrupted after the run ended ({trace.status}); see it with: mlab view {where}"


def _cache_dir(value: str | None) -> str | None:
    if value is None:
        return None
    path = Path(value).expanduser() if value else taskdata.mlab_home() / "llm_cache"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MlabError(f"--llm-cache: cannot use {str(path)!r}: {exc.strerror}") from exc
    return str(path.resolve())


def _given_once(values: tuple[str, ...]) -> str | None:
    """--label's one value: given twice, the later one would win unsaid."""
    if len(values) > 1:
        raise click.UsageError(f"--label is given twice ({', '.join(map(repr, values))}); give the run one name")
    return values[0] if values else None


def method_label(name: str | None) -> str | None:
    """A --label as given, stripped; an empty or multi-line one is bad input."""
    if name is None:
        return None
    if not name.strip() or "\n" in name or "\r" in name:
        raise click.UsageError(f"--label takes a non-empty one-line name, got {name!r}")
    return name.strip()


def parse_agent_options(pairs: tuple[str, ...]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise MlabError(f"--agent-option takes KEY=VALUE, got {pair!r}")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    return options


def _ask_human(request: str) -> str:
    click.echo(f"\nThe agent asks for help:\n{request}")
    return click.prompt("Your answer", default="", show_default=False)


@click.command("eval")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path())
@click.option("--json", "as_json", is_flag=True)
@click.option("--intermediate", is_flag=True, help="Also score step snapshots (at most 50 per run, evenly spaced).")
@click.option("--workers", type=click.IntRange(1, 1024), help="Processes scoring at once (default: CPU count).")
@click.option("--tag", "tags", multiple=True, metavar="NAME", help="Only the runs tagged NAME (mlab run --tag).")
def eval_runs(run_dirs: tuple[str, ...], as_json: bool, intermediate: bool, workers: int | None,
              tags: tuple[str, ...]) -> None:
    """Score each run (or every run of a bench folder, updating its results.db) from its final snapshot."""
    from mlab.core.bench.evaluate import eval_rows

    warn = make_console(stderr=True)
    rows = eval_rows([Path(p) for p in run_dirs], intermediate=intermediate, workers=workers,
                     registry=load_registry(), tags=tags,
                     on_skip=lambda line: warn.print(f"warning: {line}", highlight=False, markup=False,
                                                     soft_wrap=True))
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    from rich.markup import escape

    from mlab.core.view.live import run_in_progress

    columns = ["run", "task", "agent", "status", "steps", "metric", "score", "baseline", "improvement",
               "success\n(original)", "of\nreference", "model\ncalls", "tokens", "time s"]
    cells = []
    for r in rows:
        score = f"{r['score']:.6g}" if r["score"] is not None else f"[red]{escape(str(r['error']))}[/red]"
        base = f"{r['baseline']:.6g}" if r["baseline"] is not None else "not measured"
        imp = f"{r['improvement']:+.1%}" if r["improvement"] is not None else (
            f"[red]refused: {escape(r['baseline_refused'])}[/red]" if r["baseline_refused"] else "-")
        success = ("yes" if r["success"] else "no") + (" *" if r["baseline_note"] else "")
        ratio = "-" if r["of_reference"] is None else f"{r['of_reference']:.3g}"
        best = [] if not intermediate else [
            "-" if r["best_step"] is None else f"{r['best_score']:.6g} at step {r['best_step']}"]
        status = r["status"]
        if status == "running" and run_in_progress(Path(r["run_dir"])) is False:
            status = "interrupted"  # its process is gone: `mlab run --resume` continues it
        cells.append([Path(r["run_dir"]).resolve().name, escape(r["task"]), escape(r["agent"]), status,
                      str(r["steps"]), escape(r["metric"]) + (" ↑" if r["higher_is_better"] else " ↓"), score, base,
                      imp, success, ratio, str(r["llm_calls"]), f"{r['tokens']:,}", f"{r['time_s']:.1f}", *best])
    console = make_console()
    # At a narrow terminal the run's name keeps its end (model and seed) and the least needed columns go first.
    table, left_out = fitted_table(
        console, "mlab results", columns + (["best step"] if intermediate else []), cells,
        wrapped=["score", "improvement", "baseline"], tail_kept="run",
        left_out_first=["of\nreference", "tokens", "model\ncalls", "time s", "baseline", "agent", "task", "metric"])
    notes = sorted({f"{r['task']}: {r['baseline_note']}" for r in rows if r["baseline_note"]})
    if notes:
        table.caption = "* " + "; ".join(notes)
    print_fitted(console, table, left_out)
    for task, hint in sorted({(r["task"], r["baseline_hint"]) for r in rows if r.get("baseline_hint")}):
        console.print(f"baseline of {task} not measured: run {hint}", highlight=False, markup=False, soft_wrap=True)
    for task, hint in sorted({(r["task"], r["reference_hint"]) for r in rows
                              if r.get("reference_hint") and r["score"] is not None}):
        console.print(f"of reference of {task}: not recorded; run {hint}", highlight=False, markup=False,
                      soft_wrap=False)  # wrapped at the width, as the table is
    validated = [Path(r["run_dir"]).name for r in rows if r.get("allow_validate")]
    if validated:
        console.print(f"note: {', '.join(validated)} could score predictions on a validation split "
                      "(--allow-validate)", highlight=False, soft_wrap=True)
