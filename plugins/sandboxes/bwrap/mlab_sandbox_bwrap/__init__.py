"""`--sandbox bwrap`: agent code in a bubblewrap container.

This module only registers it, by name: `mlab list-plugins` imports it, and sandbox.py (with the base classes
and models it needs) is imported when the sandbox is used.
"""
from __future__ import annotations

import importlib
from typing import Any

from mlab.core import Lazy, hookimpl

SANDBOX = Lazy("bwrap", "mlab_sandbox_bwrap.sandbox:BwrapSandbox",
               "bubblewrap: only the workspace (read-write), the Python environment and system libraries (read-only); "
               "no network; own PID namespace")
# Names of sandbox.py that users import from the package; sandbox.py is imported when one is first read.
FORWARDED = ("BwrapSandbox",)


@hookimpl
def register_sandboxes(register):
    register(SANDBOX)


def __getattr__(name: str) -> Any:
    if name not in FORWARDED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.sandbox"), name)
