"""Where task code from a pack runs: a declarative pack's prepare and scorer scripts come from whoever wrote the
pack, so they run confined, in the sandbox the command chose when that one confines, else in the one
`--sandbox auto` picks (never unconfined)."""
from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mlab.core.sandbox.contract import Sandbox

_PACK_SANDBOX: contextvars.ContextVar[Callable[[], Sandbox] | None] = contextvars.ContextVar(
    "mlab_pack_sandbox", default=None)


@contextmanager
def pack_sandbox_with(factory: Callable[[], Sandbox] | None) -> Iterator[None]:
    """Make factory the one pack_sandbox() uses while the block runs (None: leave the current one)."""
    if factory is None:
        yield
        return
    token = _PACK_SANDBOX.set(factory)
    try:
        yield
    finally:
        _PACK_SANDBOX.reset(token)


def pack_sandbox() -> Sandbox:
    """A confining sandbox for task code from a pack: the current command's (pack_sandbox_with), else the
    strongest that works here; MlabError when none does."""
    factory = _PACK_SANDBOX.get()
    if factory is not None:
        return factory()
    from mlab.core.plugins.registry import load_registry
    from mlab.core.sandbox.resolve import AUTO, resolve_sandbox

    return resolve_sandbox(load_registry(), AUTO)()
