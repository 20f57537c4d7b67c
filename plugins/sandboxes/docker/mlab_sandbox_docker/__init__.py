"""`--sandbox docker`: agent code in a Docker container, for users with a Docker engine.

This module only registers it, by name: `mlab list-plugins` imports it, and sandbox.py (with the base classes
and models it needs) is imported when the sandbox is used.
"""
from __future__ import annotations

from mlab.core import Lazy, hookimpl

SANDBOX = Lazy("docker", "mlab_sandbox_docker.sandbox:DockerSandbox")


@hookimpl
def register_sandboxes(register):
    register(SANDBOX)
