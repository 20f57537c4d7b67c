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
    register(Lazy("local", "mlab.core.sandbox.local:LocalSandbox"))
    register(Lazy("unconfined", "mlab.core.sandbox.local:UnconfinedSandbox"))
