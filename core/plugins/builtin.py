"""The plugin mlab ships inside itself, named `local`: it registers the local sandbox.

It is loaded like an installed plugin, so `MLAB_LOAD_PLUGINS` governs it and `mlab list-plugins` lists it.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from mlab.core.hookspecs import hookimpl
from mlab.core.sandbox.local import LocalSandbox


@hookimpl
def register_sandboxes(register: Callable[[Any], None]) -> None:
    register(LocalSandbox)
