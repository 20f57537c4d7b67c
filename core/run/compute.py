"""A run's slice of the machine (RunConfig.compute) as the limits of its sandboxed commands."""
from __future__ import annotations

from mlab.core.models import ComputeSlice
from mlab.core.sandbox.limits import Limits


def sliced(limits: Limits | None, compute: ComputeSlice | None) -> Limits | None:
    """The limits of the run's commands (agent code, program agents, scoring) held to the slice it was granted."""
    if compute is None:
        return limits
    granted = {key: value for key, value in compute.model_dump().items() if value is not None}
    return (limits or Limits()).model_copy(update=granted)
