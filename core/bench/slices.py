"""A local bench's slices of this machine: each run, while it runs, its own CPUs (--cpus-per-run) and GPUs
(--gpus-per-run), and its memory bound (--memory-per-run); what it was granted goes into its config
(RunConfig.compute) and bounds every command it runs (mlab.core.sandbox.limits).

CPUs: each run gets ceil(N) CPUs of those this process may use, the least held first, so runs that fit
(ceil(N) x workers <= cores) get disjoint sets, and more runs share them evenly; a fraction of a CPU is a quota
on top (a cgroup's, where one can be made). GPUs are leased whole: a run holds its K alone until it ends, and a run
that finds fewer than K free waits for them.
"""
from __future__ import annotations

import math
import os

from mlab.core.errors import MlabError
from mlab.core.models import ComputeSlice
from mlab.core.sandbox.rootfs import machine_gpus


def machine_cpus() -> list[int]:
    """The CPUs this process may run on (its affinity: a container's or a cgroup's share, not the host's)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


class Slices:
    """Leases of this machine's CPUs and GPUs to a bench's runs, by run key."""

    def __init__(self, workers: int, cpus_per_run: float | None = None, gpus_per_run: int | None = None,
                 memory_per_run: int | None = None):
        self.cores = machine_cpus()
        # by default the cores shared out among the workers, whole CPUs, at least one
        self.cpus = cpus_per_run if cpus_per_run is not None else float(max(1, len(self.cores) // max(1, workers)))
        self.width = min(len(self.cores), math.ceil(self.cpus))
        self.load = dict.fromkeys(self.cores, 0)  # CPU -> runs holding it
        self.gpus_per_run = gpus_per_run
        self.memory_bytes = memory_per_run
        gpus = machine_gpus()
        if gpus_per_run and gpus_per_run > len(gpus):
            names = ", ".join(os.path.basename(gpus[n]) for n in sorted(gpus))
            raise MlabError(f"--gpus-per-run {gpus_per_run}: this machine has {len(gpus)} GPU"
                            f"{'' if len(gpus) == 1 else 's'}" + (f" ({names})" if names else ""))
        self.free_gpus = sorted(gpus) if gpus_per_run else []
        self.held: dict[str, ComputeSlice] = {}

    def room(self) -> int | None:
        """How many more runs the free GPUs allow (None: no bound)."""
        return len(self.free_gpus) // self.gpus_per_run if self.gpus_per_run else None

    def lease(self, key: str) -> ComputeSlice:
        cpu_set = sorted(sorted(self.cores, key=lambda cpu: (self.load[cpu], cpu))[:self.width])
        for cpu in cpu_set:
            self.load[cpu] += 1
        gpus: list[int] | None = None
        if self.gpus_per_run is not None:
            if self.gpus_per_run > len(self.free_gpus):
                raise RuntimeError(f"no {self.gpus_per_run} GPUs free for {key}: the engine's room() was not kept")
            gpus, self.free_gpus = self.free_gpus[:self.gpus_per_run], self.free_gpus[self.gpus_per_run:]
        granted = ComputeSlice(cpus=self.cpus, cpu_set=cpu_set, gpus=gpus, memory_bytes=self.memory_bytes)
        self.held[key] = granted
        return granted

    def release(self, key: str) -> None:
        granted = self.held.pop(key, None)
        if granted is None:
            return
        for cpu in granted.cpu_set or []:
            self.load[cpu] -= 1
        self.free_gpus = sorted(self.free_gpus + (granted.gpus or []))
