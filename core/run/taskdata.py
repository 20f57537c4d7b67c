"""Where prepared task data lives (a task home, MLAB_HOME by default), and preparing it once, atomically."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from mlab.core.errors import MlabError
from mlab.core.fs.atomic import replace_folder, write_atomic
from mlab.core.fs.link_tree import link_tree
from mlab.core.fs.tree_sums import tree_sums
from mlab.core.run.held_out import write_held_out
from mlab.core.task import Task
from mlab.core.task_context import PrepareContext, default_home

if TYPE_CHECKING:
    from mlab.core.sandbox.contract import Sandbox
    from mlab.core.sandbox.spec import ExecResult, ExecSpec


class Named(Protocol):
    name: str


@dataclass(frozen=True)
class DataFile:
    """One file (or folder) a task's prepare needs from outside, as `mlab data` lists it. A task declares them
    with a `data_files()` method; `path` is where the file goes below a --data-dir folder."""

    path: str
    url: str
    size: int | None = None  # bytes, when known
    md5: str | None = None
    sha256: str | None = None
    terms: str = ""  # the page whose terms govern the file
    how: str = "download"  # "download", "kaggle" (the competition's API), "huggingface" (a Hub repository)
    check: str = ""  # how a local copy is checked when there is no checksum


def data_files(task: object) -> list[DataFile]:
    """What a task declares it needs from outside (none for a task that generates its data)."""
    declared = getattr(task, "data_files", None)
    return list(declared()) if callable(declared) else []


class TaskHome:
    """A folder of prepared tasks: each task's public files, hidden answers and recorded baseline.

    Commands pass one around instead of reading MLAB_HOME at every use, so a check can work in a home of its
    own without touching the process environment."""

    def __init__(self, root: Path | str):
        self.root = Path(root).expanduser().resolve()

    @classmethod
    def from_env(cls) -> TaskHome:
        """MLAB_HOME, else $XDG_CACHE_HOME/mlab (~/.cache/mlab)."""
        return cls(default_home())

    def __repr__(self) -> str:
        return f"TaskHome({str(self.root)!r})"

    @property
    def data_root(self) -> Path:
        """Every task's data: agent code never sees below it except its own run's copy of the public files."""
        return self.root / "tasks"

    def task_dir(self, task: Named) -> Path:
        # data_key: a copy of a task with parameters or from a folder has data of its own (run.task_params)
        return self.data_root / (getattr(task, "data_key", None) or task.name.replace("/", "__"))

    def public_dir(self, task: Named) -> Path:
        return self.task_dir(task) / "public"

    def hidden_dir(self, task: Named) -> Path:
        return self.task_dir(task) / "hidden"

    def is_prepared(self, task: Named) -> bool:
        return (self.task_dir(task) / "prepared.json").exists()

    def prepare(self, task: Task, data_dir: str | Path | None = None,
                log: Callable[[str], None] = print, force: bool = False,
                sandbox: Callable[[], Sandbox] | None = None) -> bool:
        """Prepare the task unless already done (force: again, replacing it), then hold its validation rows out
        (held_out); True when work was done. A failure leaves nothing behind, and with force the earlier
        preparation stays until the new one is complete. Code of the task's pack that prepare runs (ctx.run: a
        declarative prepare script) runs in `sandbox`, the harness's choice for it, with this home hidden."""
        if self.is_prepared(task) and not force:
            return False
        final = self.task_dir(task)
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = final.parent / f".staging-{final.name}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        ctx = PrepareContext(public_dir=staging / "public", hidden_dir=staging / "hidden",
                             source_dir=source_for(task, data_dir), log=log)
        if sandbox is not None:
            ctx.run = _task_code_runner(sandbox, [self.root, default_home()])
        ctx.public_dir.mkdir(parents=True)
        ctx.hidden_dir.mkdir(parents=True)
        os.chmod(ctx.hidden_dir, 0o700)
        started = time.time()
        try:
            task.prepare(ctx)
            write_held_out(task, ctx.public_dir, ctx.hidden_dir)  # the training files without validation rows
            write_atomic(staging / "prepared.json", json.dumps(
                {"task": task.name, "prepared_at": started, "seconds": time.time() - started,
                 "source": str(ctx.source_dir) if ctx.source_dir else None}).encode())
            if final.exists():  # replaced: a stale, unfinished folder, or (force) the earlier preparation
                carry_baselines(task, final, staging, log)  # a baseline is kept, never lost with the old data
                carry_references(task, final, staging, log)  # and check-task's reference, where it still applies
            replace_folder(staging, final)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return True

    def baseline_path(self, task: Named) -> Path:
        return self.task_dir(task) / "baseline.json"

    def recorded_baseline(self, task: Named) -> float | None:
        """The mean valid score `mlab baseline` recorded, or None."""
        record = self.baseline_record(task)
        score = record.get("score") if record else None
        return float(score) if score is not None else None

    def baseline_record(self, task: Named) -> dict[str, Any] | None:
        """Everything `mlab baseline` recorded: the mean, each run's score (None when invalid), n, spread,
        sandbox and machine."""
        path = self.baseline_path(task)
        if not path.is_file():
            return None
        try:
            record = json.loads(path.read_text())
        except ValueError as exc:
            raise MlabError(f"{path}: not a baseline record ({exc}); run `mlab baseline` again") from None
        return record if isinstance(record, dict) else None

    def record_baseline(self, task: Named, record: dict[str, Any]) -> None:
        write_atomic(self.baseline_path(task), json.dumps({"task": task.name, **record}, indent=1).encode())

    def inputs_fingerprint(self, task: Named) -> str:
        """What a baseline depends on: the prepared public files (the starter among them) and hidden answers."""
        return inputs_fingerprint(self.task_dir(task))

    def prepared_source(self, task: Named) -> Path | None:
        """The local copy the task was prepared from, while it is there; None when prepare downloaded the data."""
        try:
            source = json.loads((self.task_dir(task) / "prepared.json").read_text())["source"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return Path(source) if isinstance(source, str) and Path(source).is_dir() else None

    def superseded_baselines(self, task: Named) -> list[dict[str, Any]]:
        """Baselines measured on data an earlier `prepare --force` replaced, oldest first; each says until when
        (superseded_at) it was the one runs were judged against."""
        folder = self.task_dir(task) / SUPERSEDED_DIR
        records = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and isinstance(record.get("superseded_at"), (int, float)):
                records.append({**record, "path": str(path)})
        return sorted(records, key=lambda r: r["superseded_at"])


SUPERSEDED_DIR = "superseded-baselines"


def _task_code_runner(sandbox: Callable[[], Sandbox],
                      hidden: list[Path]) -> Callable[[list[str], ExecSpec], ExecResult]:
    """PrepareContext.run: a command in a fresh sandbox of the harness's choice, `hidden` hidden besides."""
    def run(argv: list[str], spec: ExecSpec) -> ExecResult:
        box = sandbox()
        try:
            return box.run(argv, spec.model_copy(update={"hidden_paths": [*spec.hidden_paths, *hidden]}))
        finally:
            box.close()
    return run


def inputs_fingerprint(task_dir: Path) -> str:
    """One sha256 over a prepared folder's public and hidden trees (names, kinds and contents)."""
    digest = hashlib.sha256()
    for part in ("public", "hidden"):
        tree = tree_sums(task_dir / part) if (task_dir / part).is_dir() else {}
        for path, (kind, content) in sorted(tree.items()):
            digest.update(f"{part}/{path}\0{kind}\0{content}\n".encode())
    return digest.hexdigest()


def carry_baselines(task: Named, old: Path, new: Path, log: Callable[[str], None]) -> None:
    """Before a prepared folder is replaced: its recorded baseline moves to the new one when the inputs it was
    measured on did not change; otherwise it is kept among the superseded ones, with the time from which runs
    are judged against a new measurement, and the log says so. Earlier superseded baselines come along."""
    if (old / SUPERSEDED_DIR).is_dir():
        shutil.copytree(old / SUPERSEDED_DIR, new / SUPERSEDED_DIR, dirs_exist_ok=True)
    path = old / "baseline.json"
    if not path.is_file():
        return
    try:
        record = json.loads(path.read_text())
    except ValueError:
        return  # not a record anything can judge against: nothing to keep
    if not isinstance(record, dict):
        return
    measured_on = record.get("inputs") or inputs_fingerprint(old)  # an older record: the data it lay beside
    score = record.get("score")
    value = f"{score:.6g}" if isinstance(score, (int, float)) else "?"
    if inputs_fingerprint(new) == measured_on:
        shutil.copy2(path, new / "baseline.json")
        log(f"{task.name}: kept the recorded baseline ({value}): the prepared data and starter did not change")
        return
    now = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    (new / SUPERSEDED_DIR).mkdir(exist_ok=True)
    kept = new / SUPERSEDED_DIR / f"baseline-{stamp}.json"
    write_atomic(kept, json.dumps({**record, "inputs": measured_on, "superseded_at": now}, indent=1).encode())
    log(f"{task.name}: the prepared data or starter changed, so the recorded baseline ({value}) no longer applies "
        f"to new runs: kept in {kept}; runs started before {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(now))}"
        f" are still judged against it, later ones against a new measurement: mlab baseline {task.name}")


def carry_references(task: Named, old: Path, new: Path, log: Callable[[str], None]) -> None:
    """Before a task's folder is replaced: the reference scores check-task recorded there (scoring.reference_path)
    move to the new one when measured on the same data (their record's inputs; an older record: the folder's
    prepared data, or none, as when check-task ran before the first prepare). Another -T value's reference was
    measured on data of its own folder, which this prepare does not replace: it moves as it is."""
    fingerprint: str | None = None
    for path in sorted(old.glob("reference*.json")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if path.name == "reference.json" and isinstance(record, dict):
            if fingerprint is None:
                fingerprint = inputs_fingerprint(new)
            measured_on = record.get("inputs") or (inputs_fingerprint(old) if (old / "prepared.json").exists()
                                                    else fingerprint)
            if measured_on != fingerprint:
                log(f"{task.name}: the prepared data changed, so the recorded reference score no longer applies: "
                    f"mlab check-task {task.name} measures it again")
                continue
        shutil.copy2(path, new / path.name)


def stage_workspace(public: Path, workspace: Path, share: Callable[[str], bool]) -> list[str]:
    """Copy a task's prepared public files into a new workspace, hard-linking every file `share` accepts
    (read-only files the sandbox mounts read-only, so no write reaches the prepared copy through the link; the
    read-only guard turns a link that agent code moved out of its mount into a copy), so a workspace costs a
    link per read-only file, whatever its size, and its removal frees none of their data. Falls back to a copy
    where a link cannot be made (another file system). Returns the linked paths, relative to the workspace."""
    return link_tree(public, workspace, share)


def _data_folder(task: Named) -> str | None:
    folder = getattr(task, "data_folder", None)
    return folder if isinstance(folder, str) and folder else None


def source_for(task: Named, data_dir: str | Path | None) -> Path | None:
    """The local copy to prepare from: --data-dir, else MLAB_DATA_DIR/<task> or MLAB_DATA_DIR itself."""
    if data_dir is not None:
        path = Path(data_dir).expanduser()
        if not path.is_dir():
            raise MlabError(f"data directory {str(path)!r} does not exist")
        folder = _data_folder(task)  # a folder laid out as `mlab data` says: the task's own part
        if folder and (path / folder).is_dir():
            return (path / folder).resolve()
        return path.resolve()
    env = os.environ.get("MLAB_DATA_DIR")
    if env:
        root = Path(env).expanduser()
        folder = _data_folder(task)
        for candidate in (*([root / folder] if folder else []), root / task.name.split("/")[-1],
                          root / task.name.replace("/", "__"), root):
            if candidate.is_dir():
                return candidate.resolve()
    return None


# The default home, for callers (task packs' tests, one-off scripts) that do not carry a TaskHome around.
def mlab_home() -> Path:
    return TaskHome.from_env().root


def data_root() -> Path:
    return TaskHome.from_env().data_root


def task_dir(task: Named) -> Path:
    return TaskHome.from_env().task_dir(task)


def public_dir(task: Named) -> Path:
    return TaskHome.from_env().public_dir(task)


def hidden_dir(task: Named) -> Path:
    return TaskHome.from_env().hidden_dir(task)


def is_prepared(task: Named) -> bool:
    return TaskHome.from_env().is_prepared(task)


def prepare(task: Task, data_dir: str | Path | None = None, log: Callable[[str], None] = print,
            force: bool = False) -> bool:
    return TaskHome.from_env().prepare(task, data_dir, log, force=force)
