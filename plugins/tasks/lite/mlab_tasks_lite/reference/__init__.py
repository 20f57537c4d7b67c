"""Better training scripts, one per task, used by tests to show each task leaves room to beat its baseline.

They are not part of any workspace; a test copies one over train.py in a prepared copy of the public files.
"""
from __future__ import annotations

from importlib import resources
from pathlib import Path


def script_text(task_name: str) -> str:
    """The reference train.py of a task, by full ("lite/digits") or short ("digits") name."""
    short = task_name.split("/")[-1]
    return (resources.files(__name__) / f"{short}.py").read_text(encoding="utf-8")


def write_script(task_name: str, target: Path) -> Path:
    Path(target).write_text(script_text(task_name), encoding="utf-8")
    return Path(target)
