"""Reading CSV tables strictly: every way a submission can be unusable becomes an InvalidSubmission saying why.

Plain csv and math only, so evaluating needs neither numpy nor pandas and loading the plugin stays cheap.
"""
from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from mlab.core import InvalidSubmission

# Far above any honest submission for these tasks; stops a runaway script's file from filling memory.
MAX_BYTES = 20_000_000
_SHOWN = 3  # how many offending ids an error message lists


def write_csv(path: Path, header: list[str], rows) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)


def number_text(value) -> str:
    """Shortest exact text of a number; whole numbers without a trailing '.0'."""
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)


def read_answers(path: Path, column: str) -> dict[int, float]:
    """The hidden answers (written by prepare, so trusted): id -> value."""
    if not path.is_file():
        raise FileNotFoundError(f"hidden answers {path} are missing; prepare the task again")
    with open(path, newline="", encoding="utf-8") as f:
        return {int(row["id"]): float(row[column]) for row in csv.DictReader(f)}


def _parse_id(text: str, line: int, name: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise InvalidSubmission(f"{name} line {line}: id {text.strip()!r} is not a whole number") from None
    if not math.isfinite(value) or not value.is_integer():
        raise InvalidSubmission(f"{name} line {line}: id {text.strip()!r} is not a whole number")
    return int(value)


def _parse_value(text: str, line: int, column: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        shown = text.strip()[:40]
        raise InvalidSubmission(f"{name} line {line}, column {column!r}: {shown!r} is not a number") from None
    if not math.isfinite(value):
        raise InvalidSubmission(f"{name} line {line}, column {column!r}: {text.strip()!r} is not a finite number")
    return value


def _some(ids) -> str:
    ids = sorted(ids)
    more = f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else ""
    return ", ".join(str(i) for i in ids[:_SHOWN]) + more


def read_submission(path: Path, columns: list[str], expected_ids: set[int]) -> dict[int, list[float]]:
    """Rows of the CSV at path keyed by id, each the values of `columns` in that order.

    The header must be exactly 'id' plus `columns` (in any order), with one row per expected id.
    """
    name = path.name
    wanted = ["id", *columns]
    if path.is_symlink():
        raise InvalidSubmission(f"{name} is a symbolic link; write a regular file")
    if not path.exists():
        raise InvalidSubmission(f"there is no {name} in the workspace; the script must write it")
    if not path.is_file():
        raise InvalidSubmission(f"{name} is not a regular file")
    if path.stat().st_size > MAX_BYTES:
        raise InvalidSubmission(f"{name} is {path.stat().st_size} bytes, more than the {MAX_BYTES} allowed")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidSubmission(f"{name} is not a UTF-8 text file") from None
    except OSError as exc:
        raise InvalidSubmission(f"{name} cannot be read: {exc}") from None
    if "\x00" in text:
        raise InvalidSubmission(f"{name} contains NUL bytes; it is not a CSV text file")
    try:
        reader = csv.reader(io.StringIO(text, newline=""))
        # (line number, cells); blank lines (a trailing newline, say) are not rows
        rows = [(reader.line_num, row) for row in reader if any(cell.strip() for cell in row)]
    except csv.Error as exc:
        raise InvalidSubmission(f"{name} is not a valid CSV file: {exc}") from None
    if not rows:
        raise InvalidSubmission(f"{name} is empty; it needs the header {','.join(wanted)} and one row per test id")

    header = [cell.strip() for cell in rows[0][1]]
    duplicated = sorted({c for c in header if header.count(c) > 1})
    missing = [c for c in wanted if c not in header]
    unexpected = [c for c in header if c not in wanted]
    if duplicated or missing or unexpected:
        problems = []
        if missing:
            problems.append(f"missing {missing}")
        if unexpected:
            problems.append(f"unexpected {unexpected}")
        if duplicated:
            problems.append(f"repeated {duplicated}")
        raise InvalidSubmission(f"{name} has the wrong columns ({'; '.join(problems)}); "
                                f"the header must be: {','.join(wanted)}")

    body = rows[1:]
    if len(body) != len(expected_ids):
        raise InvalidSubmission(f"{name} has {len(body)} data rows, but the test set has {len(expected_ids)}; "
                                "write one row per row of data/test.csv")
    position = {column: header.index(column) for column in wanted}
    result: dict[int, list[float]] = {}
    for line, row in body:
        if len(row) != len(header):
            raise InvalidSubmission(f"{name} line {line} has {len(row)} fields, but the header has {len(header)}")
        key = _parse_id(row[position["id"]], line, name)
        if key in result:
            raise InvalidSubmission(f"{name} line {line}: id {key} appears more than once")
        result[key] = [_parse_value(row[position[c]], line, c, name) for c in columns]
    unknown = set(result) - expected_ids
    absent = expected_ids - set(result)
    if unknown or absent:
        raise InvalidSubmission(f"{name} ids do not match data/test.csv: {len(absent)} test ids missing "
                                f"({_some(absent)}), {len(unknown)} ids not in the test set ({_some(unknown)})")
    return result
