"""What a folder given to `mlab eval`, `mlab runs` or `mlab report` holds: one run (a trace.json), a bench (a
results.db) or a folder of runs found at any depth (runs/demo after `make run`)."""
from __future__ import annotations

from pathlib import Path

from mlab.core.bench.results import DB_FILE
from mlab.core.errors import MlabError
from mlab.core.view.runs import find_runs as find_run_folders

ACCEPTS = "a run folder (with trace.json), a bench folder (with results.db) or a folder holding run folders"


def is_bench(folder: Path) -> bool:
    return (Path(folder) / DB_FILE).is_file()


def find_runs(root: Path) -> list[Path]:
    """Run folders at or under root, sorted, as paths under root as given (the search is mlab view's)."""
    root = Path(root)
    return [root if rel == "." else root / rel for rel in find_run_folders(root)]


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


def check_bench_dir(folder: Path) -> None:
    """Refuse a bench folder that is a run folder or lies inside one: a bench writes results.db, runs/ and logs/
    into its folder, which would mix with the run's files (and a run's workspace is what gets scored)."""
    from mlab.core.run.trace import TRACE_FILE

    given = Path(folder).absolute()
    for place in (given, *given.parents):
        if (place / TRACE_FILE).is_file():
            where = "is" if place == given else "lies inside"
            raise MlabError(f"--bench-dir {str(folder)!r} {where} the run folder {str(place)!r}; a bench writes "
                            "results.db and runs/ into its folder: give a new folder or a bench folder")
