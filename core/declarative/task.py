"""DeclarativeTask: a Task whose every attribute and behaviour comes from a task folder's task.yaml."""
from __future__ import annotations

import csv
import dataclasses
import importlib.util
import io
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from mlab.core.declarative.metrics import METRICS, with_metric_words
from mlab.core.declarative.packfiles import copy_from_pack
from mlab.core.declarative.spec import Table, TaskSpec, load_spec
from mlab.core.declarative.yamlfile import LocatedYaml
from mlab.core.errors import InvalidSubmission, MlabError
from mlab.core.models import TaskParam
from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.spec import ExecSpec
from mlab.core.task import Metric, Task, ValidationSplit
from mlab.core.task_context import PrepareContext, ScoringContext, scoring_context

# What a scorer may write as its score, and how much of its output an error message quotes: its output is the
# submission's author's to influence, so it is read bounded.
MAX_SCORE_BYTES = 200
QUOTED_OUTPUT_CHARS = 300
SCORE_FILE = "score.txt"
ANSWERS_FOLDER = "answers"
# Host variables a prepare script gets: none that could carry a secret or say where the task data lives.
_PREPARE_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ")


class DeclarativeTask(Task):
    def __init__(self, folder: Path, pack: str, spec: TaskSpec, located: LocatedYaml):
        self.folder = Path(folder).resolve()
        self.spec = spec
        self.located = located
        self.name = f"{pack}/{spec.name}"
        self.metric = Metric(name=spec.metric, higher_is_better=spec.higher_is_better)
        self.description = with_metric_words(spec.description.strip(), spec.metric, spec.higher_is_better)
        self.research_problem = with_metric_words(spec.research_problem.strip(), spec.metric, spec.higher_is_better)
        self.read_only_files = list(spec.read_only)
        self.resources = spec.resources
        self.starter_script = spec.starter
        self.fixed_baseline = spec.baseline.fixed if spec.baseline else None
        self.fixed_baseline_source = spec.baseline.source if spec.baseline else ""
        self.success_margin = spec.success_margin
        self.scoring_timeout_s = spec.scoring_timeout
        self.max_submission_bytes = spec.max_submission_bytes
        self.params = [TaskParam(name=name, **param.model_dump()) for name, param in spec.params.items()]
        self.param_values = {name: param.default for name, param in spec.params.items()}
        if spec.validation is not None:
            split = spec.validation
            self.validation = ValidationSplit(inputs=split.inputs, predictions=split.predictions,
                                              submission=spec.submission_table.file,
                                              answers={split.answers: spec.answers.file},
                                              test_inputs=split.test_inputs, held_out=dict(split.held_out))

    @classmethod
    def from_folder(cls, folder: Path, pack: str) -> DeclarativeTask:
        spec, located = load_spec(Path(folder))
        return cls(Path(folder), pack, spec, located)

    def __repr__(self) -> str:
        return f"DeclarativeTask({self.name!r}, {str(self.folder)!r})"

    def check_runnable(self) -> None:
        if self.spec.scorer is None and importlib.util.find_spec("sklearn") is None:
            raise MlabError(f"{self.name}: its metric {self.spec.metric} is computed with scikit-learn, which is not "
                            "installed (pip install scikit-learn)")

    # ---- prepare ------------------------------------------------------------------------------------------
    def prepare(self, ctx: PrepareContext) -> None:
        for targets, root in ((self.spec.files.public, ctx.public_dir), (self.spec.files.hidden, ctx.hidden_dir)):
            for target, source in targets.items():
                copy_from_pack(self.folder, source, root / target)
        if self.spec.prepare is not None:
            self._run_prepare(ctx)
        if not (ctx.public_dir / self.starter_script).is_file():
            raise MlabError(f"{self.name}: prepare wrote no starter {self.starter_script} to the workspace (list it "
                            f"under files.public in {self.located.path}, or have the prepare script write it)")
        if not (ctx.hidden_dir / self.spec.answers.file).is_file():
            raise MlabError(f"{self.name}: prepare wrote no answers file {self.spec.answers.file} (list it under "
                            f"files.hidden in {self.located.path}, or have the prepare script write it)")
        split = self.spec.validation
        if split is not None and not ((ctx.public_dir / split.inputs).is_file()
                                      and (ctx.hidden_dir / split.answers).is_file()):
            raise MlabError(f"{self.name}: prepare wrote no validation split ({split.inputs} in the workspace and "
                            f"{split.answers} in the hidden folder, as validation: in {self.located.path} says)")
        ctx.log(f"{self.name}: prepared from {self.folder}")

    def _run_prepare(self, ctx: PrepareContext) -> None:
        """The pack author's prepare script, confined like agent code (ctx.run, the harness's sandbox for it): it
        runs in a fresh folder holding a read-only copy of the task folder (`task/`, MLAB_TASK_DIR) and writes the
        public and hidden folders; a --data-dir copy is shown too, and the parameters' values are JSON in
        MLAB_PARAMS. Nothing else of the machine's files is there (no MLAB_HOME, no home folder), its environment
        is scrubbed, and it has a loopback of its own unless the task declares network_for_prepare. PYTHONHASHSEED
        is fixed so set and dict orders cannot make two prepares differ."""
        with tempfile.TemporaryDirectory(prefix="mlab-prepare-") as work_name:
            work = Path(work_name)
            folder = work / "task"
            copy_from_pack(self.folder, ".", folder)
            env = {k: os.environ[k] for k in _PREPARE_ENV if k in os.environ}
            env.update({"HOME": str(work), "TMPDIR": str(work), "MLAB_PUBLIC_DIR": str(ctx.public_dir),
                        "MLAB_HIDDEN_DIR": str(ctx.hidden_dir), "MLAB_TASK_DIR": str(folder), "PYTHONHASHSEED": "0",
                        "MLAB_PARAMS": json.dumps(self.param_values, sort_keys=True),
                        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"})
            writable = [ctx.public_dir, ctx.hidden_dir]
            if ctx.source_dir is not None:
                env["MLAB_SOURCE_DIR"] = str(ctx.source_dir)
                writable.append(ctx.source_dir)
            limits = Limits(timeout_s=float(self.spec.prepare_timeout), memory_bytes=None, file_size_bytes=None)
            spec = ExecSpec(cwd=work, env=env, limits=limits, read_only_paths=[folder], writable_paths=writable,
                            network=self.resources.network_for_prepare)
            result = ctx.run([sys.executable, str(folder / str(self.spec.prepare))], spec)
        for line in result.output.splitlines():
            ctx.log(line)
        if result.limit_hit == "timeout":
            raise MlabError(f"{self.name}: prepare script {self.spec.prepare} ran longer than its "
                            f"prepare_timeout of {self.spec.prepare_timeout:g} s")
        if result.limit_hit:
            raise MlabError(f"{self.name}: prepare script {self.spec.prepare} was stopped by its {result.limit_hit} "
                            f"limit{_last_line(result.output)}")
        if result.exit_code != 0:
            last = result.output.strip().splitlines()[-1:] or ["(no output)"]
            raise MlabError(f"{self.name}: prepare script {self.spec.prepare} exited with code {result.exit_code}: "
                            f"{last[0][:QUOTED_OUTPUT_CHARS]}")

    # ---- scoring -------------------------------------------------------------------------------------------
    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        if self.spec.scorer is not None:
            return self._run_scorer(Path(workspace), Path(hidden_dir))
        metric = METRICS[self.spec.metric]
        answers_table, submission_table = self.spec.answers, self.spec.submission_table
        answers = _read_table(Path(hidden_dir) / answers_table.file, answers_table, numeric=metric.numeric,
                              limit=None, trusted=True)
        predictions = _read_table(Path(workspace) / submission_table.file, submission_table, numeric=metric.numeric,
                                  limit=self.max_submission_bytes, trusted=False)
        missing, extra = answers.keys() - predictions.keys(), predictions.keys() - answers.keys()
        if missing or extra:
            raise InvalidSubmission(f"{submission_table.file} needs one row per id of the test set: {len(missing)} "
                                    f"missing (e.g. {_some(missing)}), {len(extra)} unknown (e.g. {_some(extra)})")
        ids = sorted(answers)
        truth, predicted = _comparable([answers[i] for i in ids], [predictions[i] for i in ids])
        try:
            score = metric.compute(truth, predicted)
        except ValueError as exc:  # e.g. labels of another kind than the answers'
            raise InvalidSubmission(f"{submission_table.file} cannot be scored by {metric.name}: {exc}") from None
        if not math.isfinite(score):
            raise InvalidSubmission(f"{metric.name} of {submission_table.file} is not finite")
        return score

    def _run_scorer(self, workspace: Path, hidden_dir: Path) -> float:
        """The pack's scorer in the scoring sandbox: the submission folder is its read-only working directory, a
        copy of the answers file and of itself are in scratch, and it writes one number to $MLAB_SCORE_FILE. It
        exits non-zero (saying why) when the submission is unusable."""
        ctx = _confining(scoring_context())
        with ctx.scratch() as scratch:
            scorer = scratch / Path(str(self.spec.scorer)).name
            copy_from_pack(self.folder, str(self.spec.scorer), scorer)
            answers = scratch / ANSWERS_FOLDER / Path(self.spec.answers.file).name
            answers.parent.mkdir()
            shutil.copyfile(hidden_dir / self.spec.answers.file, answers)
            score_file = scratch / SCORE_FILE
            env = {"MLAB_ANSWERS": str(answers), "MLAB_SCORE_FILE": str(score_file),
                   "MLAB_PARAMS": json.dumps(self.param_values, sort_keys=True)}
            result = ctx.run([sys.executable, str(scorer)], workspace, scratch, env=env,
                             timeout_s=self.scoring_timeout_s)
            said = _last_line(result.output)
            if result.limit_hit:
                raise InvalidSubmission(f"the scorer was stopped by its {result.limit_hit} limit{said}")
            if result.exit_code != 0:
                raise InvalidSubmission(f"the scorer refused the submission (exit code {result.exit_code}){said}")
            if score_file.is_symlink() or not score_file.is_file():
                raise InvalidSubmission(f"the scorer wrote no score to $MLAB_SCORE_FILE{said}")
            with open(score_file, "rb") as f:
                text = f.read(MAX_SCORE_BYTES + 1)
        if len(text) > MAX_SCORE_BYTES:
            raise InvalidSubmission(f"the scorer's score file holds more than {MAX_SCORE_BYTES} bytes, not a number")
        try:
            score = float(text.decode("ascii").strip())
        except (UnicodeDecodeError, ValueError):
            raise InvalidSubmission(f"the scorer's score is not a number: {text[:40]!r}") from None
        if not math.isfinite(score):
            raise InvalidSubmission(f"the scorer's score {score} is not finite")
        return score

    def reference_solution(self, workspace: Path) -> str | None:
        if self.spec.reference is None:
            return None
        script = Path(self.spec.reference).name
        copy_from_pack(self.folder, self.spec.reference, Path(workspace) / script)
        return script


def _confining(ctx: ScoringContext) -> ScoringContext:
    """ctx, running in the sandbox the harness hands the pack's own code (confining in a `--sandbox unconfined`
    run too): a pack's scorer is its author's code, which the user chose to run no more than the agent's."""
    ctx = dataclasses.replace(ctx, new_sandbox=ctx.task_sandbox or ctx.new_sandbox)
    sandbox = ctx.new_sandbox()
    try:
        confined = sandbox.confined
    finally:
        sandbox.close()
    if not confined:
        raise MlabError("a pack's scorer runs only confined, and the sandbox given is not (--sandbox unconfined)")
    return ctx


def _last_line(output: str) -> str:
    lines = [line for line in (output or "").splitlines() if line.strip()]
    return f": {lines[-1].strip()[:QUOTED_OUTPUT_CHARS]}" if lines else ""


def _some(ids: set[str]) -> str:
    return ", ".join(sorted(ids)[:3]) or "none"


def _read_table(path: Path, table: Table, *, numeric: bool, limit: int | None, trusted: bool) -> dict[str, Any]:
    """id -> value of table.column; whatever is wrong with an untrusted file is an InvalidSubmission."""
    fail = MlabError if trusted else InvalidSubmission
    name = path.name
    if not trusted and path.is_symlink():
        raise InvalidSubmission(f"{name} is a symbolic link; write a regular file")
    if not path.is_file():
        raise fail(f"there is no {table.file} in the workspace; the script must write it" if not trusted
                   else f"the answers {path} are missing; prepare the task again")
    size = path.stat().st_size
    if limit is not None and size > limit:
        raise InvalidSubmission(f"{name} is {size} bytes, more than the {limit} allowed")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise fail(f"{name} is not UTF-8 text") from None
    try:
        rows = [row for row in csv.reader(io.StringIO(text, newline="")) if any(cell.strip() for cell in row)]
    except csv.Error as exc:
        raise fail(f"{name} is not a valid CSV file: {exc}") from None
    if not rows:
        raise fail(f"{name} is empty; it needs the header {table.id_column},{table.column} and one row per id")
    header = [cell.strip() for cell in rows[0]]
    for column in (table.id_column, str(table.column)):
        if column not in header:
            raise fail(f"{name} has no column {column!r} (its header: {','.join(header)[:200]})")
    id_at, value_at = header.index(table.id_column), header.index(str(table.column))
    values: dict[str, Any] = {}
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise fail(f"{name} row {number} has {len(row)} cells, the header {len(header)}")
        key, cell = row[id_at].strip(), row[value_at].strip()
        if key in values:
            raise fail(f"{name} row {number}: id {key[:40]!r} appears twice")
        if numeric:
            try:
                value: Any = float(cell)
            except ValueError:
                raise fail(f"{name} row {number}: {cell[:40]!r} is not a number") from None
            if not math.isfinite(value):
                raise fail(f"{name} row {number}: {cell[:40]!r} is not a finite number")
        else:
            value = cell
        values[key] = value
    return values


def _comparable(truth: list[Any], predicted: list[Any]) -> tuple[list[Any], list[Any]]:
    """Labels compared as numbers when every one is a number (so 1 and 1.0 agree), else as text."""
    try:
        return [float(v) for v in truth], [float(v) for v in predicted]
    except ValueError:
        return [str(v) for v in truth], [str(v) for v in predicted]
