"""`--sandbox bwrap`: agent code in a bubblewrap container.

This module only registers it, by name: `mlab list-plugins` imports it, and sandbox.py (with the base classes
and models it needs) is imported when the sandbox is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl

SANDBOX = Lazy("bwrap", "mlab_sandbox_bwrap.sandbox:BwrapSandbox")


@hookimpl
def register_sandboxes(register):
    register(SANDBOX)
