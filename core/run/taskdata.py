"""Where prepared task data lives, and preparing it once, atomically."""
from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

from mlab.core.run.atomic import write_atomic
from mlab.core.errors import MlabError
from mlab.core.task import PrepareContext, Task


def mlab_home() -> Path:
    if os.environ.get("MLAB_HOME"):
        return Path(os.environ["MLAB_HOME"]).expanduser().resolve()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return (Path(cache) / "mlab").resolve()


def data_root() -> Path:
    return mlab_home() / "tasks"


def task_dir(task: Task) -> Path:
    return data_root() / task.name.replace("/", "__")


def public_dir(task: Task) -> Path:
    return task_dir(task) / "public"


def hidden_dir(task: Task) -> Path:
    return task_dir(task) / "hidden"


def is_prepared(task: Task) -> bool:
    return (task_dir(task) / "prepared.json").exists()


def source_for(task: Task, data_dir: str | Path | None) -> Path | None:
    """The local copy to prepare from: --data-dir, else MLAB_DATA_DIR/<task> or MLAB_DATA_DIR itself."""
    if data_dir is not None:
        path = Path(data_dir).expanduser()
        if not path.is_dir():
            raise MlabError(f"data directory {str(path)!r} does not exist")
        return path.resolve()
    env = os.environ.get("MLAB_DATA_DIR")
    if env:
        root = Path(env).expanduser()
        for candidate in (root / task.name.split("/")[-1], root / task.name.replace("/", "__"), root):
            if candidate.is_dir():
                return candidate.resolve()
    return None


def prepare(task: Task, data_dir: str | Path | None = None, log=print) -> bool:
    """Prepare the task unless already done; returns True when work was done. A failure leaves nothing behind."""
    if is_prepared(task):
        return False
    final = task_dir(task)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = final.parent / f".staging-{final.name}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    ctx = PrepareContext(public_dir=staging / "public", hidden_dir=staging / "hidden",
                         source_dir=source_for(task, data_dir), log=log)
    ctx.public_dir.mkdir(parents=True)
    ctx.hidden_dir.mkdir(parents=True)
    os.chmod(ctx.hidden_dir, 0o700)
    started = time.time()
    try:
        task.prepare(ctx)
        write_atomic(staging / "prepared.json", json.dumps(
            {"task": task.name, "prepared_at": started, "seconds": time.time() - started,
             "source": str(ctx.source_dir) if ctx.source_dir else None}).encode())
        if final.exists():  # a stale, unfinished folder from an older version: replace it
            shutil.rmtree(final)
        os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return True


def baseline_path(task: Task) -> Path:
    return task_dir(task) / "baseline.json"


def recorded_baseline(task: Task) -> float | None:
    path = baseline_path(task)
    if path.exists():
        return json.loads(path.read_text())["score"]
    return None
