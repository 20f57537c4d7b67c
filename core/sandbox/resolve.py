"""Finding the sandbox class for a `--sandbox` name, `auto` included: the available sandbox of lowest
`auto_rank`, whoever registered it."""
from __future__ import annotations

from typing import Any

from mlab.core.errors import MlabError
from mlab.core.sandbox.contract import Sandbox

AUTO = "auto"


def resolve_sandbox(registry: Any, name: str) -> type[Sandbox]:
    """The sandbox class for a `--sandbox` name; `auto` is the available one of lowest `auto_rank`."""
    if name != AUTO:
        cls: type[Sandbox] = registry.get("sandboxes", name)
        ok, why = cls.available()
        if not ok:
            raise MlabError(f"sandbox {name!r} is not available here: {why}")
        return cls
    reasons = []
    for _rank, candidate, found in auto_candidates(registry):
        ok, why = found.available()
        if ok:
            return found
        reasons.append(f"{candidate}: {why}")
    tried = "; ".join(reasons) or "none installed declares an auto_rank"
    raise MlabError(f"no confining sandbox is available here ({tried}); --sandbox unconfined runs agent code "
                    "without confinement")


def auto_candidates(registry: Any) -> list[tuple[int, str, type[Sandbox]]]:
    """(rank, name, class) of every installed sandbox that takes part in `auto`, in the order tried. A sandbox
    whose plugin fails to load takes no part (`mlab list-plugins` shows why)."""
    items = registry.items["sandboxes"]
    found = []
    for candidate in list(items):
        try:
            cls = items[candidate]
        except MlabError:
            continue
        rank = getattr(cls, "auto_rank", None)
        if isinstance(rank, int):
            found.append((rank, candidate, cls))
    return sorted(found, key=lambda entry: (entry[0], entry[1]))
