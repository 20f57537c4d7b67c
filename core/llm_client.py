"""The run's view of its models: roles (main, fast, edit), a call log and usage accounting."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable

from .llm import LLM
from .models import Completion, LLMCallFinished, Message, Usage

ROLES = ("main", "fast", "edit")


class LLMClient:
    """Routes each call to the backend of its role, logs it as a JSON line and adds up usage."""

    def __init__(self, backends: dict[str, LLM], log_path: Path | None = None,
                 on_call: Callable[[LLMCallFinished], None] | None = None, run_dir: str | None = None):
        missing = [role for role in ROLES if role not in backends]
        if missing:
            raise ValueError(f"no backend for roles {missing}")
        self.backends = backends
        self.log_path = log_path
        self.on_call = on_call
        self.run_dir = run_dir
        self.usage = Usage()
        self._lock = threading.Lock()

    def model_name(self, role: str = "main") -> str:
        backend = self.backends[role]
        return f"{backend.name}:{backend.model}" if backend.model else backend.name

    def complete(self, messages: list[Message] | str, role: str = "main", **params: Any) -> Completion:
        if isinstance(messages, str):
            messages = [Message(role="user", content=messages)]
        backend = self.backends[role]
        started = time.monotonic()
        error = None
        completion = None
        try:
            completion = backend.complete(messages, **params)
            return completion
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            self._record(role, messages, params, completion, error, time.monotonic() - started)

    def _record(self, role, messages, params, completion, error, latency) -> None:
        with self._lock:
            if completion is not None:
                self.usage.add(completion)
            if self.log_path is not None:
                entry = {
                    "time": time.time(),
                    "role": role,
                    "model": self.model_name(role),
                    "messages": [m.model_dump() for m in messages],
                    "params": params,
                    "completion": completion.text if completion else None,
                    "prompt_tokens": completion.prompt_tokens if completion else 0,
                    "completion_tokens": completion.completion_tokens if completion else 0,
                    "cost_usd": completion.cost_usd if completion else None,
                    "latency_s": round(latency, 4),
                    "error": error,
                }
                with open(self.log_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")
        if completion is not None and self.on_call is not None:
            self.on_call(LLMCallFinished(
                run_dir=self.run_dir, role=role, model=self.model_name(role),
                prompt_tokens=completion.prompt_tokens, completion_tokens=completion.completion_tokens,
                cost_usd=completion.cost_usd, latency_s=latency))

    def state_dict(self) -> dict[str, Any]:
        seen: dict[int, str] = {}
        state = {}
        for role, backend in self.backends.items():
            if id(backend) in seen:  # roles sharing one backend share its state
                state[role] = {"same_as": seen[id(backend)]}
            else:
                seen[id(backend)] = role
                state[role] = backend.state_dict()
        return {"backends": state, "usage": self.usage.model_dump()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for role, backend_state in state.get("backends", {}).items():
            if role in self.backends and "same_as" not in backend_state:
                self.backends[role].load_state_dict(backend_state)
        if "usage" in state:
            self.usage = Usage(**state["usage"])
