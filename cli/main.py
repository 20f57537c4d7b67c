"""The `mlab` command: every error from bad input is one line on stderr and exit code 2."""
from __future__ import annotations

import importlib
import re
import sys

import click

# Each command's module is imported only when that command runs (or its own --help is asked for): `mlab --help`
# imports click alone. name -> (module in mlab.cli, function, the one line `mlab --help` shows; a test checks it
# against the command's own).
COMMANDS: dict[str, tuple[str, str, str]] = {
    "list-plugins": ("inspect_cmds", "list_plugins", "Every installed plugin: distribution, version, what it "
                                                     "registers, load errors."),
    "tasks": ("inspect_cmds", "tasks", "Available tasks: metric, direction, whether they prepare offline, what "
                                       "they need of the machine, and the parameters they take (-T NAME=VALUE)."),
    "agents": ("inspect_cmds", "agents", "Available agents."),
    "data": ("data_cmds", "data", "The files each task's prepare needs and where each goes; --download fetches them."),
    "prepare": ("data_cmds", "prepare", "Prepare a task's data (once; a second call does nothing unless --force)."),
    "baseline": ("run_cmds", "baseline", "Run a task's baseline and record the mean score that improvement is "
                                         "measured against."),
    "check-task": ("check_cmds", "check_task", "Self-check tasks: two prepares in fresh homes must write the same "
                                               "files, and the reference solution must beat the baseline by the "
                                               "success margin."),
    "check-sandbox": ("sandbox_cmds", "check_sandbox_cmd", "Run the sandbox contract's cases (and, if it confines, "
                                                           "the hostile ones) against sandbox NAME."),
    "new-task": ("newtask_cmds", "new_task", "Scaffold a declarative task (a folder with task.yaml) that `mlab "
                                             "check-task` passes as written."),
    "run": ("run_cmds", "run", "Run an agent on a task, tracing every step; or resume a killed run."),
    "eval": ("run_cmds", "eval_runs", "Score each run (or every run of a bench folder, updating its results.db) "
                                      "from its final snapshot."),
    "grade": ("grade_cmds", "grade", "Score a submission (a file or a folder) with TASK's scorer and judge it "
                                     "against the baseline."),
    "runs": ("runs_cmds", "runs", "List the runs in FOLDER (default: runs), searched at any depth: a run, a folder "
                                  "of runs or a bench."),
    "bench": ("bench_cmds", "bench", "Run every task × agent × model × seed, many at once; results go to "
                                     "BENCH_DIR/results.db."),
    "report": ("bench_cmds", "report", "Tables of the metrics of a bench, a folder of runs or one run; plots for a "
                                       "paper (PDF, SVG, PNG) and a static HTML report with a trace viewer."),
    "view": ("view_cmds", "view", "Watch runs in a browser: one run, a folder of runs (searched recursively) or a "
                                  "bench (default: runs/)."),
    "export": ("export_cmds", "export", "Write a run, a folder of runs or a bench as Inspect AI eval logs, one per "
                                        "task, agent and model."),
}


def load_command(name: str) -> click.Command:
    module, attribute, _short_help = COMMANDS[name]
    command = getattr(importlib.import_module(f"{__package__}.{module}"), attribute)
    assert isinstance(command, click.Command)
    return command


class LazyGroup(click.Group):
    """A group whose commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return load_command(cmd_name) if cmd_name in COMMANDS else None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, short_help) for name, (_module, _attribute, short_help) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mlab")
def cli() -> None:
    """Benchmark AI research agents on machine-learning tasks."""


def main(argv: list[str] | None = None) -> None:
    try:
        code = cli.main(args=argv, prog_name="mlab", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("mlab: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        hint = (f" (see: mlab {exc.ctx.command_path.split(' ', 1)[-1]} --help)"
                if exc.ctx and " " in exc.ctx.command_path else "")
        # one line: click lists a choice's values on lines of their own, tab-indented
        message = re.sub(r"\s*\n\s*", " ", exc.format_message())
        click.echo(f"mlab: error: {message}{hint}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"mlab: error: {exc.format_message()}", err=True)
        sys.exit(2)
    except Exception as exc:
        errors = sys.modules.get("mlab.core.errors")  # loaded whenever one of its errors was raised
        if errors is None or not isinstance(exc, errors.MlabError):
            raise
        click.echo(f"mlab: error: {exc}", err=True)
        sys.exit(2)
    sys.exit(code or 0)


if __name__ == "__main__":
    main()
