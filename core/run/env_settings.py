"""What an Environment is built from: the workspace, its rules, the sandbox and the run's model."""
from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlab.core.run.snapshot import SnapshotStore
from mlab.core.sandbox.contract import Sandbox
from mlab.core.sandbox.limits import Limits

if TYPE_CHECKING:
    from mlab.core.run.validation import Validator


@dataclass
class EnvSettings:
    workspace: Path
    read_only_patterns: list[str]
    sandbox: Sandbox
    store: SnapshotStore
    pristine_dir: Path | None = None  # where read-only files are restored from if a script changes them
    pristine_files: dict[str, Path] = field(default_factory=dict)  # read-only files restored from elsewhere
    hidden_paths: list[Path] = field(default_factory=list)
    sandbox_home: Path | None = None
    limits: Limits = field(default_factory=Limits)
    llm: Any = None
    interactive: bool = False
    ask_human: Callable[[str], str] | None = None
    python: str = sys.executable
    extra_env: dict[str, str] = field(default_factory=dict)
    network: bool = False  # agent code may use the host's network (a task that declares it needs one)
    validator: Validator | None = None  # the run allows Validate Submission (--allow-validate)
