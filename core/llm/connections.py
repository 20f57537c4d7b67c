"""A limit on model requests in flight at once, shared by every process of a bench (`--max-connections N`).

A bench's runs are separate processes (forked hosts, Ray tasks), each with its own LLMClient, so an in-memory
semaphore cannot bound them together. The limit is N slot files in a folder the bench owns: a request holds an
exclusive flock on one of them while it is on the wire. A flock belongs to its open file, so threads of one
process compete as processes do, and the kernel drops it when its process dies: a run killed mid-request never
keeps a slot. The folder must be on a local file system of the machine the runs share (the bench folder is).

The bench hands the limit to its workers in their environment (the channel that already carries MLAB_HOME to
forked workers and Ray tasks); LLMClient and LLMProxy read it when built. A single run's own limit (`mlab run
--max-connections`, RunConfig.max_connections) is handed to its LLMClient instead (run_slots).
"""
from __future__ import annotations

import fcntl
import os
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MAX_CONNECTIONS_ENV = "MLAB_MAX_CONNECTIONS"
SLOTS_DIR_ENV = "MLAB_CONNECTION_SLOTS"
RUN_SLOTS_DIR = ".connections"  # in a run's folder: the slot files of its own limit
POLL_S = 0.02  # between looks for a free slot: a request takes far longer than this


class ConnectionSlots:
    """At most `limit` holders of `held()` at once among all processes sharing `folder`."""

    def __init__(self, folder: Path | str, limit: int):
        if limit < 1:
            raise ValueError(f"a connection limit must be at least 1, got {limit}")
        self.folder = Path(folder)
        self.limit = limit
        self.folder.mkdir(parents=True, exist_ok=True)

    def _try_slot(self, index: int) -> int | None:
        fd = os.open(self.folder / f"slot-{index}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    @contextmanager
    def held(self) -> Iterator[None]:
        """Wait for a free slot and hold it while the block runs."""
        order = list(range(self.limit))
        while True:
            random.shuffle(order)  # waiters do not all pile onto slot 0
            fd = next((fd for fd in map(self._try_slot, order) if fd is not None), None)
            if fd is not None:
                break
            time.sleep(POLL_S)
        try:
            yield
        finally:
            os.close(fd)  # closing the only descriptor of the open file releases its lock


def slots_from_env() -> ConnectionSlots | None:
    """The limit the bench set for this process, or None (no limit)."""
    folder, limit = os.environ.get(SLOTS_DIR_ENV), os.environ.get(MAX_CONNECTIONS_ENV)
    if not folder or not limit:
        return None
    return ConnectionSlots(folder, int(limit))


def run_slots(run_dir: Path, limit: int | None) -> ConnectionSlots | None:
    """One run's own limit (`mlab run --max-connections`), its slot files in the run folder (out of the
    workspace); None leaves the bench's, if any, to the environment."""
    return ConnectionSlots(run_dir / RUN_SLOTS_DIR, limit) if limit else None


def slots_env(folder: Path, limit: int) -> dict[str, str]:
    """The environment that gives processes the limit: `limit` requests at once, among all of them."""
    return {SLOTS_DIR_ENV: str(folder), MAX_CONNECTIONS_ENV: str(limit)}
