"""Measuring a task's baseline: its starter script run in a fresh workspace, scored like any run."""
from __future__ import annotations

import json
import shutil
import statistics
import tempfile
from pathlib import Path

from mlab.core.run import taskdata
from mlab.core.run.atomic import write_atomic
from mlab.core.run.environment import EnvSettings, Environment
from mlab.core.errors import EnvError, InvalidSubmission, MlabError
from mlab.core.sandbox.local import LocalSandbox
from mlab.core.sandbox.limits import Limits
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.task import BaselineContext, Task


def measure_baseline(task: Task, runs: int = 1, timeout_s: float = 7200.0, record: bool = True) -> list[float]:
    if not taskdata.is_prepared(task):
        if not task.offline_ready:
            raise MlabError(f"task {task.name!r} is not prepared; run: mlab prepare {task.name}")
        taskdata.prepare(task, log=lambda _msg: None)
    scores = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="mlab-baseline-") as scratch:
            workspace = Path(scratch) / "workspace"
            shutil.copytree(taskdata.public_dir(task), workspace)
            env = Environment(EnvSettings(
                workspace=workspace, read_only_patterns=list(task.read_only_files), sandbox=LocalSandbox(),
                store=SnapshotStore(Path(scratch) / "store"), pristine_dir=taskdata.public_dir(task),
                hidden_paths=[taskdata.data_root()], sandbox_home=Path(scratch) / "home",
                limits=Limits(timeout_s=timeout_s)))

            def run_script(name: str):
                try:
                    result, _changed = env.run_script(name)
                except EnvError as exc:
                    raise MlabError(f"{task.name}: baseline script failed: {exc}")
                return result

            ctx = BaselineContext(workspace=workspace, hidden_dir=taskdata.hidden_dir(task), run_script=run_script)
            try:
                scores.append(float(task.baseline(ctx)))
            except InvalidSubmission as exc:
                raise MlabError(f"{task.name}: the starter produced no valid submission: {exc}")
            finally:
                env.close()
    if record:
        write_atomic(taskdata.baseline_path(task), json.dumps(
            {"task": task.name, "score": statistics.fmean(scores), "runs": scores}).encode())
    return scores
