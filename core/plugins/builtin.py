"""The plugin mlab ships inside itself, named `local`: it registers the local sandbox (and `unconfined`, the
same without namespaces, which a user must ask for by name).

It is loaded like an installed plugin, so `MLAB_LOAD_PLUGINS` governs it and `mlab list-plugins` lists it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlab.core.hookspecs import hookimpl
from mlab.core.plugins.lazy import Lazy


@hookimpl
def register_sandboxes(register: Callable[[Any], None]) -> None:
    register(Lazy("local", "mlab.core.sandbox.local:LocalSandbox",
                  "namespaces and a file system built from nothing (workspace read-write, system and Python "
                  "read-only, no network), with direct system calls; refuses where the kernel allows none"))
    register(Lazy("unconfined", "mlab.core.sandbox.local:UnconfinedSandbox",
                  "no confinement (a process group with rlimits): agent code can read the hidden answers"))
