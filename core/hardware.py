"""The hardware a run had: CPU model, the cores and memory it could use, its GPUs and their driver. A run records it
once, at its start, in its trace; results.db, the report and the viewer show it, so runs on different machines are
never compared unawares."""
from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

if TYPE_CHECKING:
    from mlab.core.models import RunConfig  # it imports this module

NVIDIA_SMI_TIMEOUT_S = 10.0  # a wedged driver can hang nvidia-smi: the run goes on without its GPUs recorded
_QUERY = "index,minor_number,uuid,name,driver_version,memory.total"
GIB = 2**30


class Gpu(BaseModel):
    name: str
    index: int | None = None  # nvidia-smi's
    minor: int | None = None  # N of its device node /dev/nvidiaN
    uuid: str = ""
    memory_bytes: int | None = None
    driver: str = ""


class Hardware(BaseModel):
    """What a run could use. cores and memory_bytes are the machine's; the *_usable ones what this run could use
    of them (CPU affinity, a cgroup's quota or limit, a bench's grant, whichever is least)."""

    cpu_model: str
    cores: int = Field(ge=1)
    cores_usable: float = Field(gt=0)
    memory_bytes: int = Field(ge=0)
    memory_usable_bytes: int = Field(ge=0)
    gpus: list[Gpu] = Field(default_factory=list)  # the GPUs the run could use

    def summary(self) -> str:
        """One line, e.g. "Intel Xeon Platinum 8375C, 2 of 8 cores, 24 GiB, 1x NVIDIA H200 (driver 570.86)"."""
        usable = f"{self.cores_usable:g}"
        cores = f"{self.cores} cores" if usable == str(self.cores) else f"{usable} of {self.cores} cores"
        total, usable_mem = _gib(self.memory_bytes), _gib(self.memory_usable_bytes)
        memory = f"{total} GiB" if usable_mem == total else f"{usable_mem} of {total} GiB"
        return ", ".join([short_cpu(self.cpu_model), cores, memory, gpu_text(self.gpus)])


def _gib(n: int) -> str:
    return f"{n / GIB:.0f}" if n >= 10 * GIB else f"{n / GIB:.1f}".removesuffix(".0")


def short_cpu(model: str) -> str:
    """"Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz" as "Intel Xeon Platinum 8375C"."""
    text = re.sub(r"\((R|TM|tm|r)\)", "", model)
    text = re.sub(r"\s+(CPU\s*)?@.*$|\s+\d+-Core Processor$|\s+(CPU|Processor)$", "", text.strip())
    return " ".join(text.split()) or model.strip() or "unknown CPU"


def gpu_text(gpus: Sequence[Gpu]) -> str:
    if not gpus:
        return "no GPU"
    kinds = Counter(g.name for g in gpus)
    drivers = sorted({g.driver for g in gpus if g.driver})
    names = ", ".join(f"{n}x {name}" for name, n in kinds.items())
    return names + (f" (driver {', '.join(drivers)})" if drivers else "")


def measure(cpus: float | None = None, gpus: Sequence[int | str] | int | None = None,
            memory_bytes: int | None = None) -> Hardware:
    """The hardware this process has now, narrowed to a run's grant when it has one: `cpus` cores, the GPUs
    `gpus` names (numbers N of /dev/nvidiaN; text: an index or UUID as CUDA_VISIBLE_DEVICES gives them; one number:
    that many), `memory_bytes`. Never fails: what cannot be read is left at what can (no GPUs, the machine's
    cores)."""
    cores = os.cpu_count() or 1
    quota, limit = _cgroup_limits()
    usable = [float(_affinity() or cores), *(c for c in (quota, cpus) if c)]
    total = _meminfo_total() or 0
    memory = [m for m in (total, limit, memory_bytes) if m]
    return Hardware(cpu_model=cpu_model(), cores=cores, cores_usable=min(usable), memory_bytes=total,
                    memory_usable_bytes=min(memory) if memory else 0, gpus=_granted(machine_gpus(), gpus))


def of_run(config: RunConfig) -> Hardware:
    """The hardware a run has, narrowed to the slice of the machine its config grants it, if any."""
    grant = getattr(config, "compute", None)
    if grant is None:
        return measure()
    cpus = [c for c in (grant.cpus, len(grant.cpu_set) if grant.cpu_set else None) if c]
    return measure(cpus=min(cpus) if cpus else None, gpus=grant.gpus, memory_bytes=grant.memory_bytes)


def hardware_change(first: Hardware | None, now: Hardware) -> str | None:
    """The note a resumed run records when it goes on on other hardware than it started on."""
    if first is None or first.summary() == now.summary():
        return None
    return f"resumed on other hardware: {now.summary()} (the run started on {first.summary()})"


def _granted(found: list[Gpu], gpus: Sequence[int | str] | int | None) -> list[Gpu]:
    if gpus is None:  # what CUDA sees: the sandbox passes CUDA_VISIBLE_DEVICES on to agent code
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        if visible is None:
            return found
        gpus = [v.strip() for v in visible.split(",") if v.strip()]
    if isinstance(gpus, int):
        return found[:gpus]
    nodes = [g for g in gpus if isinstance(g, int)]
    names = [g for g in gpus if isinstance(g, str)]
    return [g for g in found if (g.minor if g.minor is not None else g.index) in nodes or str(g.index) in names
            or any(n and g.uuid.startswith(n) for n in names)]


@functools.cache
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _affinity() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def _meminfo_total() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_limits(root: Path = Path("/sys/fs/cgroup")) -> tuple[float | None, int | None]:
    """This process's cgroup CPU quota (in cores) and memory limit, the least of its cgroup's and its ancestors';
    None where there is none (a container's --cpus and --memory show here). cgroup v2 and v1."""
    cpus: list[float] = []
    memory: list[int] = []
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None, None
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        names = controllers.split(",")
        if controllers == "":  # v2: one tree
            for level in _levels(root, path):
                quota = (_read(level / "cpu.max") or "max").split()  # "max 100000" or "200000 100000"
                if len(quota) == 2 and quota[0].isdigit() and quota[1].isdigit() and int(quota[1]):
                    cpus.append(int(quota[0]) / int(quota[1]))
                if (limit := _read(level / "memory.max") or "").isdigit():
                    memory.append(int(limit))
        elif "cpu" in names:
            for level in _levels(root / "cpu", path):
                quota_us, period_us = _read(level / "cpu.cfs_quota_us") or "", _read(level / "cpu.cfs_period_us") or ""
                if quota_us.isdigit() and period_us.isdigit() and int(period_us):  # -1: none
                    cpus.append(int(quota_us) / int(period_us))
        elif "memory" in names:
            for level in _levels(root / "memory", path):
                limit = _read(level / "memory.limit_in_bytes") or ""
                if limit.isdigit() and int(limit) < 2**60:  # none is a number near 2**63
                    memory.append(int(limit))
    return (min(cpus) if cpus else None), (min(memory) if memory else None)


def _levels(base: Path, path: str) -> list[Path]:
    """The cgroup's folder under base and its ancestors up to base (inside a container base is its own)."""
    folder = base / path.lstrip("/")
    return [level for level in (folder, *folder.parents) if level.is_relative_to(base)]


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, ValueError):
        return None


def machine_gpus() -> list[Gpu]:
    """The machine's NVIDIA GPUs as nvidia-smi lists them; none without it, or when it fails or hangs."""
    binary = shutil.which("nvidia-smi")
    return list(_gpus_of(binary)) if binary else []


@functools.cache  # once per process: nvidia-smi takes a while, and a bench worker records many runs
def _gpus_of(binary: str) -> tuple[Gpu, ...]:
    try:
        done = subprocess.run([binary, f"--query-gpu={_QUERY}", "--format=csv,noheader,nounits"],
                              capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError):
        return ()
    if done.returncode != 0:
        return ()
    found = []
    for line in done.stdout.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 6 or not fields[3]:
            continue
        index, minor, uuid, name, driver, memory = fields
        found.append(Gpu(name=name, index=int(index) if index.isdigit() else None,
                         minor=int(minor) if minor.isdigit() else None, uuid=uuid, driver=driver,
                         memory_bytes=int(float(memory) * 2**20) if _is_number(memory) else None))
    return tuple(found)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
