"""Reading and writing a run directory's trace (through its step log, trace_log), config, model-call log and
error log."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlab.core.fs.atomic import write_atomic
from mlab.core.models import RunConfig, Trace
from mlab.core.run.trace_log import TRACE_FILE, json_safe, load_trace, read_run_file

CONFIG_FILE = "config.json"
LLM_LOG_FILE = "llm_calls.jsonl"
ERRORS_FILE = "errors.log"
WORKSPACE_DIR = "workspace"


def write_trace(run_dir: Path, trace: Trace) -> None:
    """Replace trace.json atomically with `trace`, every state inline; on failure (a full disk) the previous
    trace stays as it was. A run writes its trace through mlab.core.run.trace_log instead."""
    try:
        data = trace.model_dump_json(indent=1)
    except ValueError:  # something unserializable got in (a lone surrogate, an odd object): store it as text
        data = json.dumps(json_safe(trace.model_dump(), limit=None), indent=1)
    write_atomic(Path(run_dir) / TRACE_FILE, data.encode())


def read_trace(run_dir: Path) -> Trace:
    """The run's whole trace, every state inline: trace.json plus what its step log committed beyond it (see
    mlab.core.run.trace_log); MlabError when the folder holds no readable trace."""
    return load_trace(run_dir)


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


def write_config(run_dir: Path, config: RunConfig, sync: bool = True) -> None:
    write_atomic(run_dir / CONFIG_FILE, config.model_dump_json(indent=1).encode(), sync=sync)


def append_error(run_dir: Path, text: str) -> bool:
    """Add to the run's error log; best effort (False when it cannot be written, e.g. on a full disk)."""
    try:
        with open(Path(run_dir) / ERRORS_FILE, "a", encoding="utf-8", errors="backslashreplace") as f:
            f.write(text.rstrip("\n") + "\n")
        return True
    except OSError:
        return False
