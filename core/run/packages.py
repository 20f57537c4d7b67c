"""What the Python that runs agent code has installed: the versions the research problem tells the agent about
(pandas 3 is not the pandas most models learned)."""
from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import sys
from importlib import metadata

# The distributions named to the agent, when installed; the order is the one shown.
KEY_PACKAGES = ("numpy", "pandas", "scikit-learn", "torch")
_PROBE_TIMEOUT_S = 60

_PROBE = f"""
import json, platform
from importlib import metadata
found = {{"python": platform.python_version()}}
for name in {list(KEY_PACKAGES)!r}:
    try:
        found[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        pass
print(json.dumps(found))
"""


def package_versions(python: str = sys.executable) -> dict[str, str]:
    """{"python": "3.12.3", "numpy": "2.2.1", ...} of the interpreter `python`; those not installed are left out.
    Empty when another interpreter cannot be asked (the agent is then told nothing rather than something wrong).
    Asked once per process (a bench's zygote asks before forking its runs)."""
    return dict(_asked(os.path.abspath(python)))


@functools.lru_cache(maxsize=8)
def _asked(python: str) -> dict[str, str]:
    if os.path.abspath(python) == os.path.abspath(sys.executable):  # a venv's python differs by path, not file
        found = {"python": platform.python_version()}
        for name in KEY_PACKAGES:
            try:
                found[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return found
    try:
        done = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S)
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
