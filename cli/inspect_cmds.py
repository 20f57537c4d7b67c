"""Commands that show what is installed: list-plugins, tasks, agents."""
from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

import click
from rich.table import Table

from mlab.core.errors import MlabError
from mlab.core.plugins.registry import Registry, load_registry

if TYPE_CHECKING:
    from mlab.core.task import Task

from .console import fitted_table, make_console, print_fitted
from .durations import format_duration


@click.command("list-plugins")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_plugins(as_json: bool) -> None:
    """Every installed plugin: distribution, version, what it registers, load errors."""
    registry = load_registry()
    if as_json:
        import json  # here: the table, the command's usual output, does without it

        click.echo(json.dumps({"plugins": [asdict(p) for p in registry.plugins],
                               "conflicts": registry.conflicts}, indent=2))
        return
    rows = [(p.name, p.distribution, p.version,
             "; ".join(f"{kind}: {', '.join(getattr(p, kind))}"
                       for kind in ("tasks", "agents", "llms", "sandboxes") if getattr(p, kind)),
             ", ".join(p.hooks), f"[red]{p.error}[/red]" if p.error else "") for p in registry.plugins]
    # No emoji codes: none is meant in the table, and their 8 ms table is loaded at the first ':' otherwise.
    console = make_console(emoji=False)
    print_fitted(console, *fitted_table(console, "mlab plugins",
                                        ("plugin", "distribution", "version", "registers", "hooks", "error"), rows,
                                        wrapped=("registers", "hooks", "error"), left_out_first=("hooks", "version")))
    for conflict in registry.conflicts:
        console.print(f"[red]conflict: {conflict}[/red]")


@click.command()
@click.option("--json", "as_json", is_flag=True)
def tasks(as_json: bool) -> None:
    """Available tasks: metric, direction, whether they prepare offline, what they need of the machine, and the
    parameters they take (-T NAME=VALUE)."""
    import json

    from mlab.core.run import taskdata
    from mlab.core.run.baseline import known_baseline, measured_costs
    from mlab.core.run.task_params import shown

    registry = load_registry()
    home = taskdata.TaskHome.from_env()
    rows = []
    for name, task in sorted(registry.items["tasks"].items()):
        try:
            seconds, memory = measured_costs(home.baseline_record(task))
        except MlabError:  # an unreadable record: nothing measured to show
            seconds, memory = None, None
        try:
            baseline, source = known_baseline(task, home)
        except MlabError:
            baseline, source = None, "missing"
        rows.append({
            "name": name, "description": task.description, "metric": task.metric.name,
            "direction": "higher" if task.metric.higher_is_better else "lower",
            "offline_ready": task.offline_ready, "gpu": task.resources.gpu, "ram_gb": task.resources.ram_gb,
            "baseline": baseline, "baseline_source": source,
            "baseline_seconds": task.resources.baseline_seconds, "extras": list(task.resources.extras),
            "measured_seconds": seconds, "measured_peak_memory_mb": memory,
            "prepared": taskdata.is_prepared(task), "provider": registry.provider("tasks", name),
            "conflict": registry.conflict("tasks", name), "params": _params(task)})
    _report_problems(registry)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    cells = []
    for r in rows:
        base = "not measured" if r["baseline"] is None else (
            f"{r['baseline']:.6g}" + (" (fixed)" if r["baseline_source"].startswith("fixed") else ""))
        measured = "-" if r["measured_seconds"] is None else (
            format_duration(r["measured_seconds"]) + ("" if r["measured_peak_memory_mb"] is None
                                                      else f", {r['measured_peak_memory_mb']:.0f} MB peak"))
        cells.append((r["name"], r["metric"], r["direction"], "yes" if r["offline_ready"] else "no", r["gpu"],
                      f"{r['ram_gb']:g} GB", base, format_duration(r["baseline_seconds"]), measured,
                      ", ".join(r["extras"]) or "-", "yes" if r["prepared"] else "no",
                      "\n".join(f"{shown({p['name']: p['default']})} ({p['type']})" for p in r["params"]) or "-",
                      r["description"]))
    console = make_console()
    print_fitted(console, *fitted_table(
        # the baseline is its score; the starter's time, estimated and as `mlab baseline` measured it, apart
        console, "mlab tasks", ("task", "metric", "better", "offline", "gpu", "RAM", "baseline", "starter time",
                                "measured time", "extras", "prepared", "parameters (-T)", "description"), cells,
        wrapped=("baseline", "measured time", "extras", "parameters (-T)", "description"),
        left_out_first=("extras", "description", "parameters (-T)", "starter time", "measured time", "RAM", "better",
                        "metric", "offline")))


def _params(task: Task) -> list[dict[str, object]]:
    """The parameters a task declares, each with its type, default, help and whether prepare reads it; a bad
    declaration lists none here (running the task says what is wrong with it)."""
    from mlab.core.run.task_params import declared

    try:
        params = declared(task)
    except ValueError:
        return []
    return [p.model_dump() for p in params.values()]


def _report_problems(registry: Registry) -> None:
    """Conflicts and plugins that failed to load, on stderr, so no listing (nor its --json) hides them."""
    for conflict in registry.conflicts:
        click.echo(f"conflict: {conflict}", err=True)
    for error in registry.plugin_errors():
        click.echo(f"error: {error}", err=True)


@click.command()
@click.option("--json", "as_json", is_flag=True)
def agents(as_json: bool) -> None:
    """Available agents."""
    import json

    registry = load_registry()
    from mlab.core.agentkit.options import option_rows

    rows = [{"name": name, "description": cls.description, "needs_llm": cls.needs_llm,
             "provider": registry.provider("agents", name), "options": option_rows(cls),
             "conflict": registry.conflict("agents", name), "program": program_needs(cls)}
            for name, cls in sorted(registry.items["agents"].items())]
    _report_problems(registry)
    if as_json:
        click.echo(json.dumps(rows, indent=2, default=str))
        return
    table = Table(title="mlab agents")
    for column in ("agent", "needs LLM", "program", "provider", "description", "options (--agent-option KEY=VALUE)"):
        table.add_column(column)
    for r in rows:
        options = "\n".join(
            f"{o['name']}" + (" (required)" if o["required"] else f"={json.dumps(o['default'], default=str)}")
            + (f": {o['description']}" if o["description"] else "") for o in r["options"]) or "none"
        program = r["program"]
        table.add_row(r["name"], "yes" if r["needs_llm"] else "no",
                      "-" if program is None else "found" if program["found"] else "missing",
                      r["provider"], r["description"], options)
    make_console().print(table)
    for r in rows:  # one line each, unwrapped, so the install command can be copied
        if r["program"] is not None and not r["program"]["found"]:
            click.echo(f"{r['name']}: {r['program']['missing']}")


def program_needs(agent_cls: type) -> dict[str, object] | None:
    """A program agent's install line, whether its program is found here, and if not how to install it; None
    for an agent the core steps."""
    from mlab.core.agent_program import ProgramAgent

    if not (isinstance(agent_cls, type) and issubclass(agent_cls, ProgramAgent)):
        return None
    found, why = agent_cls.available()
    return {"install": agent_cls.install, "found": found, "missing": "" if found else why}
