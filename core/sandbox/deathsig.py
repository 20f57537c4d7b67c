"""A command gets SIGKILL when the harness dies, so a killed run leaves no script running (it would write into
a workspace that resuming has just restored). This is the preexec_fn way, for where mlab.core.sandbox.spawn's
wrapper (setpriv --pdeathsig, then a check of the parent, before exec) cannot be had."""
from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
_prctl: Callable[..., int] | None
try:  # looked up here: loading a library between fork and exec can deadlock
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):
    _prctl = None


def die_with(parent: int) -> None:
    """In the child before exec: ask for SIGKILL when parent (the harness) dies."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the harness died before prctl took effect
            os._exit(1)
