"""The flags that say which task with which parameters (-T NAME=VALUE), and how a run is tagged (--tag, --meta):
shared by run, bench, baseline and check-task."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from mlab.core.errors import MlabError
from mlab.core.run.task_params import parse_pairs

TASK_PARAM = click.option("-T", "--task-param", "task_params", multiple=True, metavar="NAME=VALUE",
                          help="A parameter the task declares; repeatable (an undeclared one is refused, naming "
                               "those it takes).")
TAG = click.option("--tag", "tags", multiple=True, metavar="NAME",
                   help="A tag to find the run by (mlab runs --tag NAME); repeatable.")
META = click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE",
                    help="A note kept in the run's config and shown by mlab runs; repeatable.")


def task_params(command: Callable[..., Any]) -> Callable[..., Any]:
    return TASK_PARAM(command)


def run_tags(command: Callable[..., Any]) -> Callable[..., Any]:
    """--tag and --meta."""
    return TAG(META(command))


def given_params(pairs: tuple[str, ...]) -> dict[str, str]:
    """-T pairs as given; typed against the task's declaration when it is found."""
    return parse_pairs(pairs, "-T")


def parse_tags(tags: tuple[str, ...]) -> list[str]:
    """--tag values, stripped, each once, in the order given; an empty or multi-line one is bad input."""
    out: list[str] = []
    for tag in tags:
        name = tag.strip()
        if not name or "\n" in name or "\r" in name or "," in name:
            raise MlabError(f"--tag takes a non-empty one-line name without commas, got {tag!r}")
        if name not in out:
            out.append(name)
    return out


def parse_meta(pairs: tuple[str, ...]) -> dict[str, str]:
    """--meta KEY=VALUE, repeated; a key given twice with two values is bad input."""
    meta = parse_pairs(pairs, "--meta")
    for key, value in meta.items():
        if "\n" in key or "\n" in value or "\r" in value:
            raise MlabError(f"--meta takes one-line KEY=VALUE, got {key}={value!r}")
    return meta
