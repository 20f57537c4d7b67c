"""Task parameters (`-T NAME=VALUE`): checking given values against what a task declares (Task.params), the
copy of the task that carries them, and the part of its prepared data's name they change."""
from __future__ import annotations

import copy
import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from contextlib import suppress
from typing import Any

from mlab.core.errors import MlabError
from mlab.core.models import TaskParam
from mlab.core.task import Task

_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")
Value = str | int | float | bool


def typed_value(value: Any, kind: str) -> Value:
    """value as a parameter of type kind (str, int, float, bool); text (as -T gives it) is parsed. Raises
    ValueError saying what was expected."""
    if kind == "str":
        if isinstance(value, (bool, int, float)) and not isinstance(value, str):
            return str(value).lower() if isinstance(value, bool) else str(value)
        if isinstance(value, str):
            return value
    elif kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
            return value.strip().lower() in _TRUE
        raise ValueError(f"{value!r} is not a bool (true or false)")
    elif kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            with suppress(ValueError):
                return int(value.strip())
        raise ValueError(f"{value!r} is not an int")
    elif kind == "float":
        number: float | None = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                number = None
        if number is not None and math.isfinite(number):
            return number
        raise ValueError(f"{value!r} is not a finite float")
    raise ValueError(f"{value!r} is not a {kind}")


def parse_pairs(pairs: Iterable[str], flag: str = "-T") -> dict[str, str]:
    """-T NAME=VALUE, repeated, as given (values are typed against the task later); a pair without '=' or a name
    given twice is bad input."""
    given: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise MlabError(f"{flag} takes NAME=VALUE, got {pair!r}")
        if name in given and given[name] != value:
            raise MlabError(f"{flag} {name} is given twice ({given[name]!r} and {value!r}); give it once")
        given[name] = value
    return given


def declared(task: Task) -> dict[str, TaskParam]:
    """The task's parameters by name, each checked as a TaskParam (a plain dict is read as one)."""
    out: dict[str, TaskParam] = {}
    for item in getattr(task, "params", None) or []:
        param = item if isinstance(item, TaskParam) else TaskParam.model_validate(item)
        out[param.name] = param
    return out


def param_values(task: Task, given: Mapping[str, Any]) -> dict[str, Value]:
    """Every declared parameter's value: the given one typed, else its default. A name the task does not declare
    or a value of the wrong type is an MlabError of one line."""
    params = declared(task)
    unknown = sorted(set(given) - set(params))
    if unknown:
        takes = ", ".join(f"{p.name} ({p.type}, default {p.default!r})" for p in params.values()) or "none"
        raise MlabError(f"task {task.name} takes no parameter {unknown[0]!r}; its parameters: {takes}")
    values: dict[str, Value] = {}
    for name, param in params.items():
        if name not in given:
            try:
                values[name] = typed_value(param.default, param.type)
            except ValueError as exc:
                raise MlabError(f"task {task.name} declares parameter {name} with a bad default: {exc}") from None
            continue
        try:
            values[name] = typed_value(given[name], param.type)
        except ValueError as exc:
            raise MlabError(f"-T {name}: {exc} (task {task.name}'s {name} is a {param.type}"
                            f"{': ' + param.help if param.help else ''})") from None
    return values


def data_suffix(task: Task, values: Mapping[str, Any]) -> str:
    """What the values add to the name of the task's prepared data: nothing while every parameter prepare reads
    has its default (so a task keeps its data when it starts taking parameters), else a digest of those values."""
    params = declared(task)
    changed = {name: values[name] for name, p in params.items()
               if p.changes_data and name in values and values[name] != typed_value(p.default, p.type)}
    if not changed:
        return ""
    text = json.dumps({name: values[name] for name, p in sorted(params.items()) if p.changes_data and name in values},
                      sort_keys=True)
    return "-p" + hashlib.sha256(text.encode()).hexdigest()[:12]


# The attribute of a task copy naming its prepared data's folder below the task home (TaskHome.task_dir).
DATA_KEY = "data_key"


def with_values(task: Task, values: Mapping[str, Any], base_key: str | None = None) -> Task:
    """A copy of task carrying the values (param_values) and, where they change prepared data, the name of data
    of its own; task itself is left as it was (the registry's instance serves every run)."""
    bound = copy.copy(task)
    bound.param_values = dict(values)
    key = (base_key or getattr(task, DATA_KEY, None) or task.name.replace("/", "__")) + data_suffix(task, values)
    setattr(bound, DATA_KEY, key)
    return bound


def shown(values: Mapping[str, Any]) -> str:
    """name=value, comma-separated, as tables show a run's parameters."""
    return ",".join(f"{name}={json.dumps(value) if isinstance(value, bool) else value}"
                    for name, value in sorted(values.items()))


def labelled(task: Task) -> str:
    """The task's name, with the values that differ from the defaults (`pack/name [rows=200]`): reports tell the
    runs of one task with other parameters apart, as results of another task."""
    params = declared(task)
    changed = {name: value for name, value in task.param_values.items()
               if name in params and value != typed_value(params[name].default, params[name].type)}
    return f"{task.name} [{shown(changed)}]" if changed else task.name
