"""What every MLAgentBench task shares: starter files, extras and GPU checks, the reference-solution hook.

Nothing heavy is imported here (the plugin list must stay fast); tasks import pandas/numpy/torch in methods.
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlab.core import BaselineContext, DataFile, ExecResult, MlabError, PrepareContext, ScoringContext, Task

from . import acquire

PACKAGE_DIR = Path(__file__).resolve().parent
FILES_DIR = PACKAGE_DIR / "files"
REFERENCE_DIR = PACKAGE_DIR / "reference"
DISTRIBUTION = "mlab-tasks-mlagentbench"
PACK = "mlagentbench"
# The original's aggregation replaces six measured baselines by fixed numbers (MLAgentBench/plot.py).
ORIGINAL_FIXED_BASELINE = "the original's fixed baseline (MLAgentBench plot.py, get_all_runs_eval)"
ALLOW_NO_GPU_ENV = "MLAB_ALLOW_NO_GPU"


def run_evaluator(ctx: ScoringContext, scratch: Path, script: str, args: list[str], workspace: Path,
                  env: dict[str, str] | None = None) -> tuple[ExecResult, dict[str, Any]]:
    """Run one of the pack's evaluator scripts on a submission in the scoring sandbox; returns the result and the
    last JSON object the script printed ({} when none). The script runs by path from scratch: the pack's own
    source may not be visible in the sandbox."""
    evaluator = scratch / script
    shutil.copyfile(PACKAGE_DIR / script, evaluator)
    result = ctx.run([sys.executable, str(evaluator), *args], workspace, scratch, env=env)
    lines = [line for line in result.output.splitlines() if line.startswith("{")]
    try:
        message = json.loads(lines[-1]) if lines else {}
    except ValueError:
        message = {}
    return result, message if isinstance(message, dict) else {}


def gpu_available() -> bool:
    """A CUDA device is usable: torch says so, or (without torch) nvidia-smi lists one."""
    if importlib.util.find_spec("torch") is not None:
        try:
            import torch

            return bool(torch.cuda.is_available())
        except Exception:
            return False
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and "GPU" in out.stdout


def missing_extras(needs: dict[str, str]) -> list[tuple[str, str]]:
    """(module, extra) pairs whose module cannot be imported here."""
    return [(module, extra) for module, extra in needs.items() if importlib.util.find_spec(module) is None]


def _ignore_caches(_dir: str, names: list[str]) -> set[str]:
    return {n for n in names if n == "__pycache__" or n.endswith(".pyc")}


def copy_files(source: Path, dest: Path) -> None:
    """Copy a folder of the pack's files into dest, merging with what is there."""
    shutil.copytree(source, dest, dirs_exist_ok=True, ignore=_ignore_caches)


class MLAgentBenchTask(Task):
    """Base of the pack's tasks. Subclasses set the class attributes and implement prepare_data/evaluate."""

    short: str = ""  # the task's name inside the pack, e.g. "house-price"
    files: str | None = None  # folder under files/ copied into the public dir after prepare_data
    # module -> extra of this pack that provides it; needed by the starter (baseline) and evaluation.
    needs: dict[str, str] = {}
    cpu_variant: str | None = None  # the CPU-scaled variant to suggest when no GPU is found
    reference: str | None = None  # folder under reference/ holding a solution that should beat the baseline
    reference_script: str | None = None  # script to run for the reference (default: the starter script)
    # file -> (old, new) replacements applied to the copied files: how a CPU-scaled variant shrinks its starter
    starter_edits: dict[str, list[tuple[str, str]]] = {}
    # The data manifest (`mlab data`): files fetched by URL, as (path below the task's data folder, source) ...
    downloads: list[tuple[str, acquire.Source]] = []
    # ... and a Kaggle competition's files (fetched with the Kaggle API, after accepting its rules)
    competition: str = ""
    competition_files: list[str] = []
    local_check: str = ""  # how a local copy without a published checksum is checked, for `mlab data`

    # ---- the data manifest -------------------------------------------------------------------------
    @property
    def data_folder(self) -> str:
        """The folder below a --data-dir holding this task's files: variants share their task's."""
        return self.short

    def data_files(self) -> list[DataFile]:
        files = [DataFile(path=f"{self.data_folder}/{path}", url=acquire.source_url(source), size=source.size,
                          md5=source.md5, sha256=source.sha256, terms=source.terms,
                          check="" if (source.md5 or source.sha256) else self.local_check)
                 for path, source in self.downloads]
        if self.competition:
            page = f"https://www.kaggle.com/competitions/{self.competition}"
            files += [DataFile(path=f"{self.data_folder}/{name}", url=f"{page}/data", terms=f"{page}/rules",
                               how="kaggle", check=self.local_check) for name in self.competition_files]
        return files

    def fetch_data(self, root: Path, log: Callable[[str], None]) -> None:
        """Fetch every manifest file into root (a --data-dir), verified; what is already there is kept."""
        folder = root / self.data_folder
        for path, source in self.downloads:
            acquire.fetch(source, folder / path, log, task=self.name)
        if self.competition and not all((folder / name).exists() for name in self.competition_files):
            acquire.kaggle_download(self.competition, folder, log, task=self.name)

    # ---- checks ------------------------------------------------------------------------------------
    def check_extras(self) -> None:
        missing = missing_extras(self.needs)
        if missing:
            extras = sorted({extra for _m, extra in missing})
            modules = ", ".join(m for m, _e in missing)
            raise MlabError(
                f"{self.name} needs {modules}: pip install '{DISTRIBUTION}[{','.join(extras)}]'")

    def check_gpu(self) -> None:
        """Refuse a GPU-only task on a machine without one, unless the user insists."""
        if self.resources.gpu != "required" or os.environ.get(ALLOW_NO_GPU_ENV) == "1":
            return
        if gpu_available():
            return
        hint = f"; its CPU-scaled variant is {self.cpu_variant}" if self.cpu_variant else ""
        raise MlabError(f"{self.name} needs a GPU and none was found{hint} "
                        f"(set {ALLOW_NO_GPU_ENV}=1 to go ahead anyway)")

    def check_runnable(self) -> None:
        self.check_gpu()
        self.check_extras()

    # ---- the Task contract -------------------------------------------------------------------------
    def prepare(self, ctx: PrepareContext) -> None:
        self.check_gpu()
        self.prepare_data(ctx)
        if self.files:
            copy_files(FILES_DIR / self.files, ctx.public_dir)
        for name, edits in self.starter_edits.items():
            path = ctx.public_dir / name
            text = path.read_text()
            for old, new in edits:
                if old not in text:  # the starter changed under the variant: fail loudly, never ship it unscaled
                    raise RuntimeError(f"{self.name}: {name} has no {old!r} to scale")
                text = text.replace(old, new)
            path.write_text(text)

    def prepare_data(self, ctx: PrepareContext) -> None:
        """Write the task's data to ctx.public_dir and its answers to ctx.hidden_dir."""

    def baseline(self, ctx: BaselineContext) -> float:
        self.check_runnable()
        return super().baseline(ctx)

    # ---- self-check --------------------------------------------------------------------------------
    def reference_solution(self, workspace: Path) -> str | None:
        """Put the reference solution into a fresh workspace; returns the script to run (None: no reference)."""
        if not self.reference:
            return None
        copy_files(REFERENCE_DIR / self.reference, workspace)
        return self.reference_script or self.starter_script
