"""The `mlab` command: every error from bad input is one line on stderr and exit code 2."""
from __future__ import annotations

import sys

import click

from mlab.core.errors import MlabError

from .bench_cmds import bench, report
from .check_cmds import check_task
from .data_cmds import data, prepare
from .grade_cmds import grade
from .inspect_cmds import agents, list_plugins, tasks
from .run_cmds import baseline, eval_runs, run
from .runs_cmds import runs
from .view_cmds import view


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="mlab")
def cli() -> None:
    """Benchmark AI research agents on machine-learning tasks."""


for command in (list_plugins, tasks, agents, data, prepare, baseline, check_task, run, eval_runs, grade, runs, bench,
                report, view):
    cli.add_command(command)


def main(argv: list[str] | None = None) -> None:
    try:
        code = cli.main(args=argv, prog_name="mlab", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("mlab: aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        hint = (f" (see: mlab {exc.ctx.command_path.split(' ', 1)[-1]} --help)"
                if exc.ctx and " " in exc.ctx.command_path else "")
        click.echo(f"mlab: error: {exc.format_message()}{hint}", err=True)
        sys.exit(2)
    except click.ClickException as exc:
        click.echo(f"mlab: error: {exc.format_message()}", err=True)
        sys.exit(2)
    except MlabError as exc:
        click.echo(f"mlab: error: {exc}", err=True)
        sys.exit(2)
    sys.exit(code or 0)


if __name__ == "__main__":
    main()
