"""Where episodes' run folders go: one new folder each under a runs folder, named as `mlab run` names its runs,
reserved by creating it (episodes in other threads or processes may be choosing a name at the same moment)."""
from __future__ import annotations

import itertools
import time
from pathlib import Path

from mlab.core.env.driven import AGENT_NAME
from mlab.core.errors import MlabError


def new_episode_dir(runs_dir: str | Path, task: str, seed: int, name: str | None = None) -> Path:
    """A new, empty folder for an episode's run: `name` if given, else <time>-<task>-trainer-s<seed>[-n]."""
    runs = Path(runs_dir)
    runs.mkdir(parents=True, exist_ok=True)
    if name is not None:
        path = runs / name
        if path.name != name or name in ("", ".", ".."):
            raise MlabError(f"episode id {name!r} is not a folder name")
        try:
            path.mkdir()
        except FileExistsError:
            raise MlabError(f"episode {name!r} already has a run folder in {str(runs)!r}") from None
        return path
    base = f"{time.strftime('%Y%m%d-%H%M%S')}-{Path(task).name}-{AGENT_NAME}-s{seed}"
    for n in itertools.count(1):
        path = runs / (base if n == 1 else f"{base}-{n}")
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise AssertionError("not reached")
