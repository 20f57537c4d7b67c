"""The schema of task.yaml, and reading one into a TaskSpec with line-precise errors."""
from __future__ import annotations

import difflib
import re
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mlab.core.declarative.metrics import METRICS
from mlab.core.declarative.packfiles import pack_problem
from mlab.core.declarative.yamlfile import LocatedYaml, Location, load_located
from mlab.core.hookspecs import NAME_PART
from mlab.core.task import DEFAULT_SUCCESS_MARGIN, Resources, Task

TASK_FILE = "task.yaml"
PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _relative(value: str) -> str:
    """A path inside its folder: relative, no '..', forward slashes."""
    path = PurePosixPath(value)
    if not value.strip() or path.is_absolute() or ".." in path.parts or "\\" in value:
        raise ValueError(f"{value!r} must be a relative path inside the folder (no '..', no leading '/')")
    return str(path)


class Table(_Strict):
    """A CSV file keyed by an id column, with the column a metric compares."""

    file: str
    id_column: str = "id"
    column: str | None = None  # the compared column; in a submission it defaults to the answers' column

    @field_validator("file")
    @classmethod
    def _inside(cls, value: str) -> str:
        return _relative(value)


class Files(_Strict):
    """Files of the task folder copied at prepare: workspace (or hidden) path -> path in the task folder."""

    public: dict[str, str] = Field(default_factory=dict)
    hidden: dict[str, str] = Field(default_factory=dict)

    @field_validator("public", "hidden")
    @classmethod
    def _paths(cls, value: dict[str, str]) -> dict[str, str]:
        return {_relative(target): _relative(source) for target, source in value.items()}


class Baseline(_Strict):
    """A fixed baseline (with where it comes from); without one the starter's score is measured."""

    fixed: float
    source: str = Field(min_length=1)


class Validation(_Strict):
    """The validation split prepare writes from the training data (never the test set): its inputs in the
    workspace and its answers in the hidden folder, in the format of the test inputs and answers."""

    inputs: str
    answers: str
    predictions: str = "valid_submission.csv"  # the agent's default predictions file for the inputs
    test_inputs: str = ""  # the test inputs' file, so scoring messages can name the validation file instead
    # Training file (CSV) holding the validation rows -> the id column it shares with the inputs: runs with
    # --allow-validate get it without those rows.
    held_out: dict[str, str] = Field(default_factory=dict)

    @field_validator("inputs", "answers", "predictions")
    @classmethod
    def _inside(cls, value: str) -> str:
        return _relative(value)

    @field_validator("held_out")
    @classmethod
    def _training_files(cls, value: dict[str, str]) -> dict[str, str]:
        for file, id_column in value.items():
            if not id_column.strip():
                raise ValueError(f"{file!r} needs an id column: the column it shares with the validation inputs")
        return {_relative(file): id_column for file, id_column in value.items()}


class Param(_Strict):
    """A parameter users may set with -T NAME=VALUE; the prepare and scorer scripts read every value, as JSON, from
    $MLAB_PARAMS."""

    type: Literal["str", "int", "float", "bool"] = "str"
    default: str | int | float | bool
    help: str = ""
    changes_data: bool = True  # prepare reads it: a value other than the default is prepared on its own

    @field_validator("default")
    @classmethod
    def _typed(cls, value: str | int | float | bool, info: Any) -> str | int | float | bool:
        from mlab.core.run.task_params import typed_value

        return typed_value(value, info.data.get("type", "str"))


class ResourcesSpec(Resources):
    model_config = ConfigDict(extra="forbid")


class TaskSpec(_Strict):
    name: str = Field(pattern=rf"^{NAME_PART}$")
    description: str = Field(min_length=1)
    research_problem: str = Field(min_length=1)
    metric: str = Field(min_length=1)  # one of METRICS, or the name of what `scorer` computes
    direction: Literal["higher", "lower"] | None = None  # required with a scorer; else the metric's
    scorer: str | None = None  # a script in the folder, run in the scoring sandbox
    answers: Table
    submission: Table | None = None  # default: submission.csv keyed like the answers
    files: Files = Field(default_factory=Files)
    prepare: str | None = None  # a script in the folder, run with the harness's Python
    prepare_timeout: float = Field(default=600.0, gt=0)
    starter: str = "train.py"
    read_only: list[str] = Field(default_factory=list)
    reference: str | None = None  # a solution script in the folder, for `mlab check-task`
    baseline: Baseline | None = None
    success_margin: float = Field(default=DEFAULT_SUCCESS_MARGIN, ge=0)
    scoring_timeout: float = Field(default=Task.scoring_timeout_s, gt=0)
    max_submission_bytes: int = Field(default=Task.max_submission_bytes, gt=0)  # read by the built-in metrics
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    validation: Validation | None = None
    params: dict[str, Param] = Field(default_factory=dict)

    @field_validator("params")
    @classmethod
    def _param_names(cls, value: dict[str, Param]) -> dict[str, Param]:
        for name in value:
            if not PARAM_NAME.fullmatch(name):
                raise ValueError(f"parameter name {name!r} must be letters, digits and _, not starting with a digit")
        return value

    @field_validator("scorer", "prepare", "reference", "starter")
    @classmethod
    def _inside(cls, value: str | None) -> str | None:
        return None if value is None else _relative(value)

    @property
    def higher_is_better(self) -> bool:
        if self.direction is not None:
            return self.direction == "higher"
        return METRICS[self.metric].higher_is_better

    @property
    def submission_table(self) -> Table:
        submission = self.submission or Table(file="submission.csv", id_column=self.answers.id_column)
        if submission.column is None:
            submission = submission.model_copy(update={"column": self.answers.column})
        return submission


def load_spec(folder: Path) -> tuple[TaskSpec, LocatedYaml]:
    """Read folder/task.yaml; any problem is a TaskFileError naming the file, the line and the field."""
    located = load_located(folder / TASK_FILE)
    if not isinstance(located.data, dict):
        raise located.error((), f"must be a mapping of fields (name: ..., metric: ...), not a "
                                f"{type(located.data).__name__}")
    try:
        spec = TaskSpec.model_validate(located.data)
    except ValidationError as exc:
        first = exc.errors()[0]
        location = _data_location(located.data, tuple(first["loc"]))
        raise located.error(location, _problem(first, location)) from None
    _check_meaning(spec, located, folder)
    return spec, located


def _data_location(data: Any, loc: tuple[Any, ...]) -> Location:
    """pydantic's location minus the parts that are not in the file (union members, validator names)."""
    location: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        elif isinstance(node, dict) and isinstance(part, str) and not location[-1:] == [part]:
            location.append(part)  # a missing key: still name it
            break
        else:
            continue
        location.append(part)
    return tuple(location)


def _problem(error: Any, location: Location) -> str:
    kind, message = error["type"], error["msg"]
    if kind == "missing":
        return "is required but missing"
    if kind == "extra_forbidden":
        known = _known_fields(location[:-1])
        close = difflib.get_close_matches(str(location[-1]), known, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"is not a known field{hint}; known here: {', '.join(known)}"
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
    shown = repr(error.get("input"))
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return f"{message[:1].lower()}{message[1:]} (got {shown})"


def _known_fields(parent: Location) -> list[str]:
    model: type[BaseModel] = TaskSpec
    for part in parent:
        field = model.model_fields.get(str(part))
        annotation = getattr(field, "annotation", None)
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            return []
        model = nested[0]
    return sorted(model.model_fields)


def _check_meaning(spec: TaskSpec, located: LocatedYaml, folder: Path) -> None:
    """What the schema alone cannot say: a known metric, a direction, files that exist."""
    if spec.scorer is None:
        if spec.metric not in METRICS:
            close = difflib.get_close_matches(spec.metric, list(METRICS), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise located.error(("metric",), f"unknown metric {spec.metric!r}{hint}; mlab's metrics: "
                                             f"{', '.join(METRICS)} (or give a scorer script)")
        if spec.direction is not None and (spec.direction == "higher") != METRICS[spec.metric].higher_is_better:
            raise located.error(("direction",), f"{spec.metric} is "
                                                f"{'higher' if METRICS[spec.metric].higher_is_better else 'lower'}"
                                                f" is better; leave direction out")
        if spec.answers.column is None:
            raise located.error(("answers",), f"needs `column`: the answers' column that {spec.metric} compares")
    elif spec.direction is None:
        raise located.error(("direction",), "is required with a scorer: higher or lower (which is better)")
    scripts: list[tuple[Location, str | None]] = [(("scorer",), spec.scorer), (("prepare",), spec.prepare),
                                                  (("reference",), spec.reference)]
    scripts += [(("files", "public", target), source) for target, source in spec.files.public.items()]
    scripts += [(("files", "hidden", target), source) for target, source in spec.files.hidden.items()]
    for location, relative in scripts:
        if relative is not None and not (folder / relative).exists():
            raise located.error(location, f"{relative!r} is not in the task folder {folder}")
        problem = pack_problem(folder, relative) if relative is not None else None
        if problem:
            raise located.error(location, problem)
    if spec.prepare is None and not spec.files.public:
        raise located.error(("files",), "the task has no data: give files.public (and files.hidden) or a prepare "
                                        "script")
    if spec.validation is not None and spec.validation.answers == spec.answers.file:
        raise located.error(("validation", "answers"), "must be another file than the test answers")
    if spec.validation is not None and spec.validation.inputs in spec.validation.held_out:
        raise located.error(("validation", "held_out"), f"{spec.validation.inputs!r} is the validation inputs "
                                                        "themselves; name the training file that holds their rows")
    if spec.baseline is not None and not spec.baseline.fixed > 0:
        raise located.error(("baseline", "fixed"), "must be above 0 (improvement over it is a ratio)")
