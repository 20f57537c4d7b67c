"""What viewers in other processes (`mlab view`, the bench view, `mlab runs`) read of a run going on: the step
in progress as the runner writes it (mlab.core.run.live), and whether the run is going now."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from mlab.core.run.live import LIVE_FILE, RUN_LOCK_FILE, TAIL_BYTES, LiveState, short_arg
from mlab.core.view.diffs import read_regular

MAX_LIVE_BYTES = 1 << 20


def read_live(run_dir: Path) -> LiveState | None:
    """The step in progress as the run last wrote it, or None (no step in progress, or a file cut short)."""
    raw = read_regular(Path(run_dir) / LIVE_FILE, MAX_LIVE_BYTES)
    try:
        data = json.loads(raw) if raw is not None and len(raw) <= MAX_LIVE_BYTES else None
    except ValueError:  # written atomically, but not necessarily by an mlab of this version
        return None
    if not isinstance(data, dict) or not isinstance(data.get("step"), int):
        return None
    raw_args = data.get("args")
    args: dict[Any, Any] = raw_args if isinstance(raw_args, dict) else {}
    started, pid = data.get("started"), data.get("pid")
    return LiveState(step=data["step"], action=data["action"] if isinstance(data.get("action"), str) else None,
                     args={str(k): short_arg(v) for k, v in list(args.items())[:10]},
                     started=float(started) if isinstance(started, (int, float)) else 0.0,
                     output_tail=str(data.get("output_tail") or "")[-TAIL_BYTES:],
                     pid=pid if isinstance(pid, int) else 0)


def run_in_progress(run_dir: Path) -> bool | None:
    """Whether a process holds the run's lock, i.e. the run is going now rather than stopped part-way. Read from
    /proc/locks, so looking never takes the lock (a runner starting at that instant would find it taken). None
    where that cannot be known (no /proc/locks)."""
    try:
        st = os.stat(Path(run_dir) / RUN_LOCK_FILE, follow_symlinks=False)
    except OSError:
        return False
    try:
        locks = Path("/proc/locks").read_text()
    except OSError:
        return None
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in locks.splitlines():
        fields = line.split()
        if "FLOCK" in fields and ident in fields and "->" not in fields:  # "->": a waiter, not the holder
            return True
    return False
