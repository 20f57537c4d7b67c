"""Reading and writing a run directory's trace and config."""
from __future__ import annotations

from pathlib import Path

from .atomic import write_atomic
from .errors import MlabError
from .models import RunConfig, Trace

TRACE_FILE = "trace.json"
CONFIG_FILE = "config.json"
LLM_LOG_FILE = "llm_calls.jsonl"
ERRORS_FILE = "errors.log"
WORKSPACE_DIR = "workspace"


def write_trace(run_dir: Path, trace: Trace) -> None:
    write_atomic(run_dir / TRACE_FILE, trace.model_dump_json(indent=1).encode())


def read_trace(run_dir: Path) -> Trace:
    path = Path(run_dir) / TRACE_FILE
    if not path.is_file():
        raise MlabError(f"{str(run_dir)!r} is not a run directory (no {TRACE_FILE})")
    try:
        return Trace.model_validate_json(path.read_text())
    except ValueError as exc:
        raise MlabError(f"{path} is not a valid trace: {str(exc).splitlines()[0]}")


def write_config(run_dir: Path, config: RunConfig) -> None:
    write_atomic(run_dir / CONFIG_FILE, config.model_dump_json(indent=1).encode())


def append_error(run_dir: Path, text: str) -> None:
    with open(run_dir / ERRORS_FILE, "a", encoding="utf-8") as f:
        f.write(text.rstrip("\n") + "\n")
