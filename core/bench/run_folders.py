"""What a folder given to `mlab eval`, `mlab runs` or `mlab report` holds: one run (a trace.json), a bench (a
results.db) or a folder of runs found at any depth (runs/demo after `make run`)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from mlab.core.errors import MlabError
from mlab.core.run.trace import TRACE_FILE

BENCH_DB = "results.db"
MAX_FOLDERS_SEARCHED = 50_000  # a huge tree cannot stall a listing
SKIPPED_FOLDERS = frozenset({"node_modules", "__pycache__", "site-packages"})
ACCEPTS = "a run folder (with trace.json), a bench folder (with results.db) or a folder holding run folders"


def is_run(folder: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(Path(folder) / TRACE_FILE).st_mode)
    except OSError:
        return False


def is_bench(folder: Path) -> bool:
    return (Path(folder) / BENCH_DB).is_file()


def find_runs(root: Path) -> list[Path]:
    """Run folders at or under root, sorted; links are not followed and a run's own folders are not searched."""
    root = Path(root)
    if is_run(root):
        return [root]
    found: list[Path] = []
    searched = 0
    for folder, dirs, _files in os.walk(root, followlinks=False):
        searched += 1
        if searched > MAX_FOLDERS_SEARCHED:
            break
        kept = []
        for name in sorted(dirs):
            path = Path(folder) / name
            if name.startswith(".") or name in SKIPPED_FOLDERS or path.is_symlink():
                continue
            if is_run(path):
                found.append(path)
            else:
                kept.append(name)
        dirs[:] = kept
    return sorted(found)


def runs_in(path: Path) -> list[Path]:
    """The run folders a path given on the command line stands for; a clear error when it holds none."""
    path = Path(path)
    if not path.exists():
        raise MlabError(f"{str(path)!r} does not exist; give {ACCEPTS}")
    if not path.is_dir():
        raise MlabError(f"{str(path)!r} is not a folder; give {ACCEPTS}")
    runs = find_runs(path)
    if not runs:
        raise MlabError(f"{str(path)!r} holds no runs; give {ACCEPTS}")
    return runs
