"""The limits a command runs under, and the per-process rlimits that carry them out: set by the command's child
on itself (apply_rlimits), or by the harness on a child that has not yet started the command (set_rlimits_of)."""
from __future__ import annotations

import os
import resource
from contextlib import suppress

from pydantic import BaseModel, Field

from mlab.core.sandbox.gpus import cuda_visible


class Limits(BaseModel):
    timeout_s: float = 3600.0
    # Per process, the memory it may write (RLIMIT_DATA: heap and private writable mappings, not reserved address
    # space, which CUDA and JAX take tens of GiB of at start); also the whole tree's memory in a cgroup.
    memory_bytes: int | None = 16 * 2**30
    cpu_seconds: int | None = None
    file_size_bytes: int | None = 4 * 2**30
    # Processes and threads of the whole tree; a cgroup's pids.max where one can be made (RLIMIT_NPROC binds no
    # root and counts every process of the user, so it is only a fallback).
    max_processes: int | None = 4096
    output_bytes: int = 1_000_000
    disk_bytes: int | None = None  # how much the command may add to the used space of the workspace's disk
    min_free_disk_bytes: int | None = 100 * 2**20  # the command is stopped when it leaves less free than this
    # The run's slice of the machine (a bench's --cpus-per-run, --gpus-per-run): at most `cpus` CPUs' time (a
    # cgroup's quota where a set cannot say it), only on the CPUs of `cpu_set` (affinity, and a cgroup's cpuset),
    # with the thread variables at int(cpus); only the GPUs (N of /dev/nvidiaN) of `gpus`. None: not bounded.
    cpus: float | None = Field(default=None, gt=0)
    cpu_set: list[int] | None = None
    gpus: list[int] | None = None


# What OpenMP (and torch, which reads it), MKL, OpenBLAS, numexpr and Accelerate start as many threads as: each
# would take every core of the machine, whatever the command's share of it.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS")


def thread_count(limits: Limits) -> int | None:
    """The threads a command of limits should start: its whole CPUs, at least one, and no more than its set has."""
    if limits.cpus is None:
        return len(limits.cpu_set) if limits.cpu_set else None
    return max(1, min(int(limits.cpus), len(limits.cpu_set) if limits.cpu_set else int(limits.cpus)))


def slice_env(limits: Limits) -> dict[str, str]:
    """The variables every command of a slice gets: the thread counts, and CUDA_VISIBLE_DEVICES naming its GPUs."""
    env: dict[str, str] = {}
    threads = thread_count(limits)
    if threads is not None:
        env.update(dict.fromkeys(THREAD_VARS, str(threads)))
    if limits.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda_visible(limits.gpus)
    return env


def set_affinity(pid: int, limits: Limits) -> None:
    """Pin process pid (0: this one) to limits' CPU set; what it starts afterwards inherits it."""
    if limits.cpu_set:
        with suppress(OSError):  # a CPU this process may not use (a cgroup's cpuset): left as it is
            os.sched_setaffinity(pid, limits.cpu_set)


def rlimit_values(limits: Limits, nproc: int | None) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) for each rlimit limits sets (RLIMIT_NPROC to nproc when given)."""
    pairs = [
        (resource.RLIMIT_DATA, limits.memory_bytes),
        (resource.RLIMIT_CPU, limits.cpu_seconds),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes),
        (resource.RLIMIT_NPROC, nproc),
        (resource.RLIMIT_CORE, 0),
    ]
    # CPU: SIGXCPU at the soft limit tells what happened; at the hard one the kernel sends SIGKILL.
    return [(which, value, value + 1 if which == resource.RLIMIT_CPU else value)
            for which, value in pairs if value is not None]


def apply_rlimits(limits: Limits, nproc: int | None) -> None:
    """In the child before exec: set the rlimits of limits (RLIMIT_NPROC to nproc when given)."""
    for which, soft, hard in rlimit_values(limits, nproc):
        with suppress(ValueError, OSError):
            resource.setrlimit(which, (soft, hard))


def set_rlimits_of(pid: int, limits: Limits, nproc: int | None) -> None:
    """From the harness: set the rlimits of limits on process pid (prlimit), which must not have started the
    command yet: what it forks before this does not inherit them."""
    for which, soft, hard in rlimit_values(limits, nproc):
        with suppress(ValueError, OSError):  # as apply_rlimits: a hard limit above the harness's own is left as is
            resource.prlimit(pid, which, (soft, hard))


def nproc_fallback(max_processes: int | None) -> int | None:
    """RLIMIT_NPROC when no cgroup can count the tree: it counts every task of the user, so the user's
    current tasks are added. Root is not bound by it at all."""
    if max_processes is None or os.geteuid() == 0:
        return None
    uid = str(os.geteuid())
    tasks = 0
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            if fields.get("Uid", "").split()[:1] == [uid]:
                tasks += int(fields.get("Threads", "1"))
        except (OSError, ValueError):
            continue
    return tasks + max_processes
