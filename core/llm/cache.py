"""An on-disk cache of completions, so a rerun can replay a run's model answers without calling any API.

The key is a hash of the backend and model, the messages, the parameters and the occurrence number: the n-th
identical request of a run maps to its own entry, so a prompt asked twice (sampling twice) is cached twice and a
rerun sees the same sequence of answers.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from mlab.core.fs.atomic import write_atomic
from mlab.core.models import Completion, Message


def request_key(identity: dict[str, Any], messages: list[Message], params: dict[str, Any]) -> str:
    # a text message keys as [role, content], as before tools: caches made then still answer
    payload = {"backend": identity, "params": params,
               "messages": [[m.role, m.content] if m.is_text and not m.parts else m.record() for m in messages]}
    data = json.dumps(payload, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


class ResponseCache:
    def __init__(self, root: Path):
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str, occurrence: int) -> Path:
        name = hashlib.sha256(f"{key}:{occurrence}".encode()).hexdigest()
        return self.root / name[:2] / f"{name}.json"

    def get(self, key: str, occurrence: int) -> Completion | None:
        path = self._path(key, occurrence)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            return Completion(**record["completion"])
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError):
            return None  # a damaged entry is a miss; the new answer overwrites it

    def put(self, key: str, occurrence: int, completion: Completion, request: dict[str, Any]) -> None:
        path = self._path(key, occurrence)
        path.parent.mkdir(parents=True, exist_ok=True)
        record = {"completion": completion.model_dump(), "request": request, "occurrence": occurrence}
        write_atomic(path, json.dumps(record, ensure_ascii=False).encode("utf-8"))
