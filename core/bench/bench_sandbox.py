"""The one sandbox a bench runs in: `--sandbox auto` is settled once per bench, not once per run, so a sandbox
installed (or gone) while a bench is under way does not split its runs between two sandboxes."""
from __future__ import annotations

import json
from collections import Counter
from contextlib import suppress
from typing import Any

from mlab.core.bench.results import ResultsDB
from mlab.core.errors import MlabError
from mlab.core.sandbox.resolve import AUTO, resolve_sandbox


def recorded_sandboxes(db: ResultsDB) -> Counter[str]:
    """How many of the bench's earlier runs each sandbox ran (as their configs record it)."""
    seen: Counter[str] = Counter()
    for row in db.runs():
        try:
            config = json.loads(row.get("config") or "{}")
        except ValueError:
            continue
        if isinstance(config, dict) and isinstance(config.get("sandbox"), str) and config["sandbox"] != AUTO:
            seen[config["sandbox"]] += 1
    return seen


def bench_sandbox(registry: Any, choice: str, db: ResultsDB) -> tuple[str, str | None]:
    """The sandbox every run of this bench is given, and a line to warn with when its earlier runs ran in
    another. `auto` keeps the sandbox the earlier runs used while it is still available here; else (or for a new
    bench) it is the available sandbox `auto` picks now."""
    earlier = recorded_sandboxes(db)
    if choice == AUTO:
        name = None
        if len(earlier) == 1:
            (used,) = earlier
            with suppress(MlabError):  # gone since: auto picks again, and the line below says so
                name = resolve_sandbox(registry, used).name
        if name is None:
            name = resolve_sandbox(registry, AUTO).name
    else:
        name = choice
    others = {sandbox: n for sandbox, n in earlier.items() if sandbox != name}
    if not others:
        return name, None
    ran = ", ".join(f"{n} in {sandbox}" for sandbox, n in sorted(others.items()))
    return name, (f"sandbox {choice}: this bench's new runs run in {name}, but {sum(others.values())} earlier "
                  f"run(s) ran elsewhere ({ran}); compare them with care")
