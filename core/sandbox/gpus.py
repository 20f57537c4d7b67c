"""Which GPU a device node is, and how CUDA is told which GPUs a command has."""
from __future__ import annotations

import functools
import glob
import os
import re

_NUMBERED = re.compile(r"nvidia(\d+)")
NVIDIA_PROC = "/proc/driver/nvidia/gpus"


def gpu_index(path: str) -> int | None:
    """N of an NVIDIA GPU's device node /dev/nvidiaN (or a stand-in named so); None for the shared nodes
    (nvidiactl, nvidia-uvm, nvidia-modeset, ...) that every GPU's user needs."""
    found = _NUMBERED.fullmatch(os.path.basename(path))
    return int(found.group(1)) if found else None


@functools.lru_cache(maxsize=1)
def gpu_uuids() -> dict[int, str]:
    """Device minor -> UUID of this machine's NVIDIA GPUs, as the driver tells them."""
    found: dict[int, str] = {}
    for info in glob.glob(os.path.join(NVIDIA_PROC, "*", "information")):
        fields: dict[str, str] = {}
        try:
            with open(info, encoding="utf-8", errors="replace") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    fields[key.strip()] = value.strip()
            found[int(fields["Device Minor"])] = fields["GPU UUID"]
        except (OSError, KeyError, ValueError):
            continue
    return found


def cuda_visible(gpus: list[int]) -> str:
    """CUDA_VISIBLE_DEVICES for GPUs N of /dev/nvidiaN: by UUID where the driver tells them, since CUDA's own
    numbering need not follow the device nodes' (and a sandbox showing only some nodes may renumber); else the
    numbers."""
    uuids = gpu_uuids()
    if gpus and all(n in uuids for n in gpus):
        return ",".join(uuids[n] for n in gpus)
    return ",".join(map(str, gpus))
