"""`mlab new-task`: scaffold a declarative task folder, or a pip-installable pack around one."""
from __future__ import annotations

import shlex
from pathlib import Path

import click


@click.command("new-task")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--name", help="The task's name (default: DIRECTORY's name in lowercase and hyphens).")
@click.option("--metric", default="mse", show_default=True,
              help="The built-in metric the scaffold is scored by: a regression one (mse, rmse, mae) or a "
                   "two-class one (accuracy, balanced-accuracy, f1-macro).")
@click.option("--pack", metavar="PACK", help="Make DIRECTORY a pip-installable pack named PACK holding the task "
                                             "(its tasks are PACK/NAME).")
def new_task(directory: Path, name: str | None, metric: str, pack: str | None) -> None:
    """Scaffold a declarative task (a folder with task.yaml) that `mlab check-task` passes as written."""
    from mlab.core.declarative.scaffold import scaffold

    folder = scaffold(directory, name=name, metric=metric, pack=pack)
    click.echo(f"wrote {folder / 'task.yaml'} and its scripts")
    if pack is None:
        click.echo(f"check it: mlab check-task {folder}")
    else:
        click.echo(f"install it: pip install {pip_path(directory)}; then: mlab check-task {pack}/{folder.name}")


def pip_path(directory: Path) -> str:
    """DIR as pip reads a local folder: a bare name (mypack) would be looked up on the package index."""
    text = str(directory)
    if not directory.is_absolute() and not text.startswith(("./", "../")):
        text = f"./{text}"
    return shlex.quote(text)
