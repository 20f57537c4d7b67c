"""What the core hands a task's methods: the folders prepare writes, and what the baseline runs with."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlab.core.sandbox.spec import ExecResult


@dataclass
class PrepareContext:
    """Where Task.prepare writes: `public_dir` becomes every run's starting workspace, `hidden_dir` never leaves
    the harness."""

    public_dir: Path
    hidden_dir: Path
    source_dir: Path | None = None  # a local copy of the raw data, if the user gave one
    log: Callable[[str], None] = print


@dataclass
class BaselineContext:
    """What Task.baseline gets: a fresh workspace, the answers, and a way to run a workspace script in the sandbox."""

    workspace: Path
    hidden_dir: Path
    run_script: Callable[[str], ExecResult]
