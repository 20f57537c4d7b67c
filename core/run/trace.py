"""Reading and writing a run directory's trace and config."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from mlab.core.errors import MlabError
from mlab.core.fs.atomic import write_atomic
from mlab.core.fs.dirfd import NotRegular, read_regular_at
from mlab.core.models import RunConfig, Trace

TRACE_FILE = "trace.json"
CONFIG_FILE = "config.json"
LLM_LOG_FILE = "llm_calls.jsonl"
ERRORS_FILE = "errors.log"
WORKSPACE_DIR = "workspace"

MAX_STORED_CHARS = 200_000  # longer strings an agent sent are shortened in the trace (read whole by viewers)


def write_trace(run_dir: Path, trace: Trace) -> None:
    """Replace trace.json atomically with `trace`, every state inline; on failure (a full disk) the previous
    trace stays as it was. A run writes its trace through mlab.core.run.trace_log instead."""
    try:
        data = trace.model_dump_json(indent=1)
    except ValueError:  # something unserializable got in (a lone surrogate, an odd object): store it as text
        data = json.dumps(json_safe(trace.model_dump(), limit=None), indent=1)
    write_atomic(Path(run_dir) / TRACE_FILE, data.encode())


def json_safe(value: Any, limit: int | None = MAX_STORED_CHARS, depth: int = 0) -> Any:
    """value as plain JSON data: valid UTF-8 strings (shortened past limit), finite numbers, str keys;
    anything else becomes its repr."""
    if isinstance(value, str):
        text = value.encode("utf-8", "backslashreplace").decode("utf-8")
        if limit is not None and len(text) > limit:
            text = text[:limit] + f"[... {len(text) - limit} characters left out of the trace]"
        return text
    if value is None or isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth > 50:
        return "[... nested too deeply]"
    if isinstance(value, dict):
        return {json_safe(k if isinstance(k, str) else repr(k), limit): json_safe(v, limit, depth + 1)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, limit, depth + 1) for v in value]
    return json_safe(repr(value)[:1000], limit)


def read_trace(run_dir: Path) -> Trace:
    """The run's whole trace, every state inline: trace.json plus what its step log committed beyond it (see
    mlab.core.run.trace_log); MlabError when the folder holds no readable trace."""
    from mlab.core.run.trace_log import load_trace  # it builds on this module

    return load_trace(run_dir)


class RefusedFile(MlabError):
    """A run file that is a symlink or not a regular file: a run folder is untrusted, so it is never read."""


def read_run_file(run_dir: Path, name: str, limit: int | None = None) -> bytes | None:
    """A file of the run folder, never through a symlink (core.fs.dirfd.read_regular_at, as `mlab view` reads):
    None when it is missing, RefusedFile when it is a link or no regular file, MlabError when it is unreadable."""
    path = Path(run_dir) / name
    try:
        return read_regular_at(run_dir, name, limit)
    except NotRegular:
        raise RefusedFile(f"{path} is a symlink or not a regular file, so it was not read") from None
    except OSError as exc:
        raise MlabError(f"cannot read {path}: {exc.strerror or exc}") from None


def read_call_entries(run_dir: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The entries of the run's llm_calls.jsonl, read by read_run_file (none when it has none); a line cut short
    by a crash, or one that is no JSON object, is skipped."""
    data = read_run_file(run_dir, LLM_LOG_FILE, limit) or b""
    entries = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def write_config(run_dir: Path, config: RunConfig) -> None:
    write_atomic(run_dir / CONFIG_FILE, config.model_dump_json(indent=1).encode())


def append_error(run_dir: Path, text: str) -> bool:
    """Add to the run's error log; best effort (False when it cannot be written, e.g. on a full disk)."""
    try:
        with open(Path(run_dir) / ERRORS_FILE, "a", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text.rstrip("\n") + "\n")
        return True
    except OSError:
        return False
