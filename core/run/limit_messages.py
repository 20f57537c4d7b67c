"""How a broken resource limit is told to the agent, with the limit's value in words."""
from __future__ import annotations

from mlab.core.sandbox.limits import Limits

# Each follows "the script " or "the REPL command ".
LIMIT_MESSAGES = {
    "memory": "hit the memory limit ({memory}) and was stopped",
    "cpu": "used up its CPU time ({cpu}) and was stopped",
    "file_size": "tried to write a file larger than the limit of {file_size} and was stopped",
    "processes": "started more processes or threads than the limit of {processes} allows, so it was killed with "
                 "everything it started",
    "disk": "used too much disk space ({disk}) and was killed with everything it started; delete files you do "
            "not need",
}


def limit_messages(limits: Limits) -> dict[str, str]:
    """LIMIT_MESSAGES with the values of these limits filled in."""
    values = _limit_values(limits)
    return {name: text.format(**values) for name, text in LIMIT_MESSAGES.items()}


def _limit_values(limits: Limits) -> dict[str, str]:
    return {"processes": str(limits.max_processes), "memory": _size(limits.memory_bytes),
            "disk": ", ".join(filter(None, [
                f"at most {_size(limits.disk_bytes)} more per command" if limits.disk_bytes else "",
                f"at least {_size(limits.min_free_disk_bytes)} must stay free"
                if limits.min_free_disk_bytes else ""])),
            "file_size": _size(limits.file_size_bytes), "cpu": f"{limits.cpu_seconds} s"}


def _size(value: int | None) -> str:
    if value is None:
        return "no limit"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= size:
            return f"{value / size:g} {unit}"
    return f"{value} bytes"
