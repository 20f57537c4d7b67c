"""Reading what an agent submitted, turning every malformation into InvalidSubmission with a clear reason."""
from __future__ import annotations

import re
from pathlib import Path

from mlab.core import InvalidSubmission

MAX_BYTES = 1 << 30  # a submission larger than this is not read at all
_INTEGRAL_FLOAT = re.compile(r"^(-?\d+)\.0*$")


def submission_path(workspace: Path, name: str = "submission.csv") -> Path:
    path = Path(workspace) / name
    if not path.is_file():
        raise InvalidSubmission(f"no {name} in the workspace")
    size = path.stat().st_size
    if size == 0:
        raise InvalidSubmission(f"{name} is empty")
    if size > MAX_BYTES:
        raise InvalidSubmission(f"{name} is {size} bytes, more than the {MAX_BYTES} allowed")
    return path


def read_csv(workspace: Path, name: str = "submission.csv", **kwargs):
    import pandas as pd

    path = submission_path(workspace, name)
    try:
        frame = pd.read_csv(path, **kwargs)
    except Exception as exc:
        raise InvalidSubmission(f"{name} is not a readable CSV file: {type(exc).__name__}: {exc}") from None
    if frame.shape[0] == 0:
        raise InvalidSubmission(f"{name} has no rows")
    return frame


def require_columns(frame, columns: list[str], name: str = "submission.csv") -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        have = ", ".join(map(str, frame.columns[:12]))
        raise InvalidSubmission(f"{name} lacks column(s) {', '.join(missing)} (it has: {have})")


def normalize_id(value) -> str:
    text = str(value).strip()
    match = _INTEGRAL_FLOAT.match(text)
    return match.group(1) if match else text


def numbers(frame, column: str, name: str = "submission.csv"):
    """A column as finite floats, or InvalidSubmission naming the first bad value."""
    import numpy as np
    import pandas as pd

    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise InvalidSubmission(f"{name}: column {column} has {int(bad.sum())} missing or non-numeric value(s), "
                                f"first in row {first + 1}: {frame[column].iloc[first]!r}")
    return values


def align(frame, id_column: str, expected_ids: list[str], name: str = "submission.csv"):
    """The submission's rows reordered to expected_ids; every id exactly once, nothing else."""
    ids = [normalize_id(v) for v in frame[id_column].tolist()]
    seen: dict[str, int] = {}
    for index, value in enumerate(ids):
        if value in seen:
            raise InvalidSubmission(f"{name}: {id_column} {value!r} appears more than once")
        seen[value] = index
    expected = [normalize_id(v) for v in expected_ids]
    missing = [v for v in expected if v not in seen]
    if missing:
        raise InvalidSubmission(f"{name}: {len(missing)} of the {len(expected)} expected {id_column} values are "
                                f"missing, e.g. {missing[0]!r} (it has {len(ids)} rows)")
    if len(ids) != len(expected):
        extra = sorted(set(ids) - set(expected))
        raise InvalidSubmission(f"{name}: has {len(ids)} rows, expected {len(expected)}; unknown {id_column} "
                                f"e.g. {extra[0]!r}")
    order = [seen[v] for v in expected]
    return frame.iloc[order].reset_index(drop=True)


def booleans(frame, column: str, name: str = "submission.csv"):
    """True/False, 1/0 (any case, also 1.0/0.0) as a bool array."""
    import numpy as np

    mapping = {"true": True, "false": False, "1": True, "0": False, "1.0": True, "0.0": False}
    out = np.zeros(len(frame), dtype=bool)
    for index, value in enumerate(frame[column].tolist()):
        key = str(value).strip().lower()
        if key not in mapping:
            raise InvalidSubmission(f"{name}: column {column} row {index + 1} is {value!r}, not True or False")
        out[index] = mapping[key]
    return out


def class_probabilities(workspace: Path, n_rows: int, n_classes: int, index_label: str | None = None):
    """submission.csv as [index, p_0 .. p_k-1] rows, ordered by the index 0..n-1; returns the argmax per row."""
    import numpy as np

    frame = read_csv(workspace, index_col=index_label if index_label else 0)
    if index_label and frame.index.name != index_label:
        raise InvalidSubmission(f"submission.csv: the first column must be {index_label}")
    if frame.shape[1] != n_classes:
        raise InvalidSubmission(f"submission.csv has {frame.shape[1]} probability columns after the index, "
                                f"expected {n_classes} (one per class)")
    if len(frame) != n_rows:
        raise InvalidSubmission(f"submission.csv has {len(frame)} rows, expected {n_rows} (one per test example)")
    index = [normalize_id(v) for v in frame.index.tolist()]
    position = {value: i for i, value in enumerate(index)}
    expected = [str(i) for i in range(n_rows)]
    if len(position) != n_rows or any(e not in position for e in expected):
        raise InvalidSubmission(f"submission.csv: the index column must hold each row number 0..{n_rows - 1} once")
    frame = frame.iloc[[position[e] for e in expected]]
    values = np.column_stack([numbers(frame, column) for column in frame.columns])
    return values.argmax(axis=1)
