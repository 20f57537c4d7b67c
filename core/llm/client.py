"""The run's view of its models: roles (main, fast, edit), retries, budgets, a response cache, a call log and
usage accounting. Every backend gets all of it: backends only complete messages and classify their errors."""
from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from mlab.core.errors import BudgetExceeded, LLMError
from mlab.core.fs.dirfd import write_all
from mlab.core.llm.backend import LLM
from mlab.core.llm.cache import ResponseCache, request_key
from mlab.core.llm.connections import ConnectionSlots, slots_from_env
from mlab.core.llm.generation import (
    FORBIDDEN_PARAMS,
    ROLES,
    TOKENS_PER_PRICE_UNIT,
    call_cost,
    cut_at_stop,
    merge_params,
)
from mlab.core.llm.retry import RetryPolicy, call_with_retries
from mlab.core.models import Completion, LLMCallFinished, Message, Usage

log = logging.getLogger("mlab.llm")

TOKENS_PER_MESSAGE = 8  # a chat template's wrapping of each message, reserved with its text
# A completion cap every chat model takes: a held call that asks for none is capped at what is left only below it
# (a larger cap could exceed the model's own output limit and fail the call).
ANY_MODEL_OUTPUT = 4096


def prompt_token_bound(texts: Iterable[str]) -> int:
    """At most how many tokens a prompt can cost: a byte-level BPE token holds at least one byte."""
    return sum(len(text.encode("utf-8", "surrogatepass")) + TOKENS_PER_MESSAGE for text in texts)


def prompt_texts(messages: list[Message], params: dict[str, Any]) -> list[str]:
    """Everything of a call that the model reads as its prompt: texts, tool calls and results, tool definitions
    (an image's URL stands for it: an image's own token cost is the provider's)."""
    texts = [m.content + "".join(c.name + c.arguments for c in m.tool_calls) + "".join(p.image_url for p in m.parts)
             for m in messages]
    if params.get("tools"):
        texts.append(json.dumps(params["tools"], ensure_ascii=False))
    return texts


def as_text(messages: list[Message]) -> list[Message]:
    """Messages for a text-only backend: tool calls written out as JSON after the text, tool results as user
    messages naming their call, images named."""
    out = []
    for m in messages:
        if m.is_text:
            out.append(m if not m.parts else Message(role=m.role, content=m.content))
            continue
        text = m.content
        if m.parts:
            text = "\n".join(p.text if p.type == "text" else "[an image]" for p in m.parts)
        if m.tool_calls:
            text += ("\n" if text else "") + json.dumps([c.model_dump() for c in m.tool_calls])
        if m.role == "tool":
            out.append(Message(role="user", content=f"[result of tool call {m.tool_call_id}]\n{text}"))
        else:
            out.append(Message(role=m.role, content=text))
    return out

__all__ = ["FORBIDDEN_PARAMS", "ROLES", "LLMClient", "read_call_log", "usage_of_log"]


def read_call_log(path: Path) -> list[dict[str, Any]]:
    """Entries of an llm_calls.jsonl; a line cut short by a crash is skipped."""
    entries = []
    if Path(path).is_file():
        for line in Path(path).read_text(encoding="utf-8").splitlines():
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return entries


def usage_of_log(entries: list[dict[str, Any]]) -> Usage:
    usage = Usage()
    for entry in entries:
        if entry.get("error") is None and entry.get("completion") is not None:
            usage.add(Completion(text="", prompt_tokens=entry.get("prompt_tokens") or 0,
                                 completion_tokens=entry.get("completion_tokens") or 0,
                                 cost_usd=entry.get("cost_usd")))
    return usage


class LLMClient:
    """Routes each call to the backend of its role, retries transient failures, enforces the run's budgets,
    serves and fills the cache, logs each call as a JSON line and adds up usage."""

    def __init__(self, backends: dict[str, LLM], log_path: Path | None = None,
                 on_call: Callable[[LLMCallFinished], None] | None = None, run_dir: str | None = None, *,
                 retry: RetryPolicy | None = None, max_tokens: int | None = None, max_cost: float | None = None,
                 max_calls: int | None = None, cache_dir: Path | str | None = None,
                 sleep: Callable[[float], None] = time.sleep,
                 params: dict[str, dict[str, Any]] | None = None, prices: dict[str, list[float]] | None = None,
                 connections: ConnectionSlots | None = None):
        missing = [role for role in ROLES if role not in backends]
        if missing:
            raise ValueError(f"no backend for roles {missing}")
        self.backends = backends
        self.log_path = Path(log_path) if log_path is not None else None
        self.on_call = on_call
        self.run_dir = run_dir
        self.retry = retry or RetryPolicy()
        self.max_tokens = max_tokens
        self.max_cost = max_cost
        self.max_calls = max_calls  # model calls answered (cached ones included), counted like usage.calls
        self.cache = ResponseCache(Path(cache_dir)) if cache_dir else None
        self.params = {role: dict(p) for role, p in (params or {}).items()}  # the run's, by role
        self.prices = dict(prices or {})  # USD per million tokens by role, for models without a known price
        self.step_index: int | None = None  # set by the runner before each step, for the log
        # requests in flight at once, shared with the other runs of a bench (--max-connections): a bench's
        # workers find it in their environment
        self.connections = connections if connections is not None else slots_from_env()
        self._sleep = sleep
        self._lock = threading.Lock()
        self._settled = threading.Condition()  # notified when a call ends: it gave back what it reserved
        self._in_flight = 0
        self._reserved_tokens = 0  # the token allowance of the calls in flight
        self._occurrences: dict[str, int] = {}
        self._unpriced: str | None = None
        self._log_fd: int | None = None  # the call log, opened at the first call
        # Tells apart the calls of a step cut short by a crash from those of its rerun after --resume.
        self.session = uuid.uuid4().hex[:12]
        # A resumed run continues the log; its usage is every call made, those of an interrupted step included.
        earlier = read_call_log(self.log_path) if self.log_path else []
        self.usage = usage_of_log(earlier)
        if max_cost is not None:
            self._unpriced = next((e["model"] for e in earlier if e.get("completion") is not None
                                   and e.get("error") is None and e.get("cost_usd") is None), None)

    def model_name(self, role: str = "main") -> str:
        """The `NAME:MODEL` string of the role's backend (just NAME when it has no model)."""
        backend = self.backends[role]
        return f"{backend.name}:{backend.model}" if backend.model else backend.name

    # ---- budgets --------------------------------------------------------------------------------
    def check_budget(self) -> None:
        """Raise BudgetExceeded when a limit is reached; called before every call, so a run overshoots a
        limit by at most the call that crossed it."""
        usage = self.usage
        if self.max_calls is not None and usage.calls >= self.max_calls:
            raise BudgetExceeded(f"{usage.calls} model calls made, limit {self.max_calls} (--max-calls)")
        if self.max_tokens is not None and usage.total_tokens >= self.max_tokens:
            raise BudgetExceeded(f"{usage.total_tokens} tokens used, limit {self.max_tokens} (--token-limit)")
        if self.max_cost is not None:
            if self._unpriced:
                raise BudgetExceeded(f"the price of {self._unpriced} is unknown, so --cost-limit "
                                     f"{self.max_cost:g} cannot be enforced (${usage.cost_usd:.4f} known so far; "
                                     "--price IN,OUT gives it one)")
            if usage.cost_usd >= self.max_cost:
                raise BudgetExceeded(f"${usage.cost_usd:.4f} spent, limit ${self.max_cost:g} (--cost-limit)")

    def _admit(self, messages: list[Message], params: dict[str, Any], hold: bool = False, role: str = "main") -> int:
        """Wait until the call fits beside the calls in flight, check the budgets and reserve its tokens (its
        prompt's bytes, an upper bound, and its completion cap, or what is left when it has none); with a cost
        limit a call waits for all others, as a call's price is known only after it. Sequential calls never wait,
        so concurrent ones overshoot a limit, as sequential ones do, by at most the call that crossed it. A call
        limit counts the calls in flight as made: a call past it waits for them (one that fails frees its place),
        so concurrent calls never exceed it.

        `hold` (a caller that may be hostile) makes the token limit hard: a prompt that could cost more than is
        left is refused before it is sent, and the completion is capped at what is left after the prompt; so does
        the cost limit where the role's price is given (--price; a price known only after the call cannot)."""
        limited = self.max_tokens is not None or self.max_cost is not None
        with self._settled:
            while True:
                while self._in_flight and (
                        (limited and (self.max_cost is not None
                                      or self.usage.total_tokens + self._reserved_tokens >= (self.max_tokens or 0)))
                        or (self.max_calls is not None and self.usage.calls + self._in_flight >= self.max_calls)):
                    self._settled.wait()
                self.check_budget()
                if not (hold and self.max_tokens is not None):
                    break
                bound = prompt_token_bound(prompt_texts(messages, params))
                left = self.max_tokens - self.usage.total_tokens - self._reserved_tokens
                if bound < left:
                    allowed = left - bound
                    cap = params.get("max_completion_tokens")
                    if cap or allowed <= ANY_MODEL_OUTPUT:
                        params["max_completion_tokens"] = min(int(cap or allowed), allowed)
                    break
                if not self._in_flight:
                    raise BudgetExceeded(f"this request's prompt may cost up to {bound} tokens (a token a byte) and "
                                         f"{left} of {self.max_tokens} are left (--token-limit)")
                self._settled.wait()  # the calls in flight may settle for less than they hold
            price = self.prices.get(role)
            if hold and self.max_cost is not None and price:  # no call is in flight: a cost limit waited for them
                self._hold_cost(messages, params, price)
            reserved = 0
            if self.max_tokens is not None:
                cap = params.get("max_completion_tokens")
                reserved = (prompt_token_bound(prompt_texts(messages, params))
                            + (int(cap) if cap else max(0, self.max_tokens - self.usage.total_tokens)))
            self._in_flight += 1
            self._reserved_tokens += reserved
            return reserved

    def _hold_cost(self, messages: list[Message], params: dict[str, Any], price: list[float]) -> None:
        assert self.max_cost is not None
        bound = prompt_token_bound(prompt_texts(messages, params))
        left = self.max_cost - self.usage.cost_usd
        prompt_cost = call_cost(price, bound, 0)
        if prompt_cost >= left:
            raise BudgetExceeded(f"this request's prompt may cost up to ${prompt_cost:.4f} (a token a byte) and "
                                 f"${left:.4f} of ${self.max_cost:g} is left (--cost-limit)")
        if price[1] > 0:
            allowed = max(1, int((left - prompt_cost) * TOKENS_PER_PRICE_UNIT / price[1]))
            cap = params.get("max_completion_tokens")
            if cap or allowed <= ANY_MODEL_OUTPUT:
                params["max_completion_tokens"] = min(int(cap or allowed), allowed)

    def _release(self, reserved: int) -> None:
        with self._settled:
            self._in_flight -= 1
            self._reserved_tokens -= reserved
            self._settled.notify_all()

    # ---- calls ----------------------------------------------------------------------------------
    def complete(self, messages: list[Message] | str, role: str = "main", *, hold_budget: bool = False,
                 step: int | None = None, **params: Any) -> Completion:
        """Complete messages (a string is one user message) with the role's model, cache, retries and budgets;
        `hold_budget` for a caller that may be hostile (see _admit); `step`, the step the call belongs to when
        calls of several steps run at once (else step_index)."""
        if isinstance(messages, str):
            messages = [Message(role="user", content=messages)]
        if role not in self.backends:
            raise ValueError(f"unknown LLM role {role!r}; roles: {', '.join(self.backends)}")
        overriding = sorted(FORBIDDEN_PARAMS & set(params))
        if overriding:
            raise ValueError(f"parameters {overriding} cannot be passed per call: the model of role {role!r} "
                             f"is {self.model_name(role)}")
        params = merge_params(self.params.get(role, {}), params)
        if not self.backends[role].supports_tools:
            if params.get("tools"):
                raise ValueError(f"the model of role {role!r} ({self.model_name(role)}) takes no tools: its backend "
                                 "is text-only (litellm models take them)")
            params.pop("tool_choice", None)
            messages = as_text(messages)
        reserved = self._admit(messages, params, hold_budget, role)
        try:
            return self._complete(messages, role, params, self.step_index if step is None else step)
        finally:
            self._release(reserved)

    def _complete(self, messages: list[Message], role: str, params: dict[str, Any], step: int | None) -> Completion:
        backend = self.backends[role]
        model = self.model_name(role)
        started = time.monotonic()
        completion: Completion | None = None
        retries: list[dict[str, Any]] = []
        cached = False
        error: BaseException | None = None
        cache = self.cache if backend.cacheable else None
        key: str | None = None
        occurrence = 0
        try:
            if cache is not None:
                key = request_key({"name": backend.name, "model": backend.model,
                                   "api_base": backend.options.get("api_base")}, messages, params)
                with self._lock:
                    occurrence = self._occurrences.get(key, 0)
                completion = cache.get(key, occurrence)
                cached = completion is not None
            if completion is None:
                fresh, retries = call_with_retries(lambda: self._send(backend, messages, params), self.retry,
                                                   describe=f"LLM {role} call ({model})", sleep=self._sleep)
                if params.get("stop"):
                    fresh = fresh.model_copy(update={"text": cut_at_stop(fresh.text, params["stop"])})
                completion = fresh
                if cache is not None and key is not None:
                    try:
                        cache.put(key, occurrence, fresh, {"model": model, "params": params})
                    except OSError as exc:  # a full disk must not throw away an answer already paid for
                        log.warning("LLM cache: could not store an answer in %s: %s", cache.root, exc)
            if key is not None:
                with self._lock:
                    self._occurrences[key] = occurrence + 1
            if completion.cost_usd is None and role in self.prices:
                completion = completion.model_copy(update={"cost_usd": call_cost(
                    self.prices[role], completion.prompt_tokens, completion.completion_tokens)})
            return completion
        except BaseException as exc:  # Ctrl-C included: the log says how each call ended
            error = exc
            retries = getattr(exc, "retries", retries)
            raise
        finally:
            self._record(step, role, model, messages, params, completion, error, retries, cached,
                         time.monotonic() - started, backend.options.get("api_base"))

    def _send(self, backend: LLM, messages: list[Message], params: dict[str, Any]) -> Completion:
        """One try of a call, holding a connection slot while it is on the wire (not while it waits to retry)."""
        if self.connections is None:
            return backend.complete(messages, **params)
        with self.connections.held():
            return backend.complete(messages, **params)

    def _record(self, step: int | None, role: str, model: str, messages: list[Message], params: dict[str, Any],
                completion: Completion | None, error: BaseException | None, retries: list[dict[str, Any]],
                cached: bool, latency: float, api_base: str | None = None) -> None:
        error_text = None if error is None else (str(error) if isinstance(error, LLMError)
                                                 else f"{type(error).__name__}: {error}")
        with self._lock:
            if completion is not None:
                self.usage.add(completion)
                if completion.cost_usd is None and self.max_cost is not None:
                    self._unpriced = self._unpriced or model
            if self.log_path is not None:
                entry = {
                    "time": time.time(),
                    "step": step,
                    "session": self.session,
                    "role": role,
                    "model": model,
                    "api_base": api_base,
                    "response_model": completion.model if completion else None,
                    "messages": [m.record() for m in messages],
                    "params": params,
                    "completion": completion.text if completion else None,
                    "prompt_tokens": completion.prompt_tokens if completion else 0,
                    "completion_tokens": completion.completion_tokens if completion else 0,
                    "cost_usd": completion.cost_usd if completion else None,
                    "latency_s": round(latency, 4),
                    "cached": cached,
                    "attempts": 0 if cached else len(retries) + 1,
                    "retries": retries,
                    "error": error_text,
                    "context_too_long": bool(getattr(error, "context_too_long", False)),
                }
                if completion is not None and completion.tool_calls:
                    entry["tool_calls"] = [c.model_dump() for c in completion.tool_calls]
                if completion is not None and completion.finish_reason:
                    entry["finish_reason"] = completion.finish_reason
                # backslashreplace: a lone surrogate must not cost the call its line
                self._log_line((json.dumps(entry, ensure_ascii=False, default=str) + "\n").encode(
                    "utf-8", "backslashreplace"))
        if self.on_call is not None:
            self.on_call(LLMCallFinished(
                run_dir=self.run_dir, role=role, model=model,
                prompt_tokens=completion.prompt_tokens if completion else 0,
                completion_tokens=completion.completion_tokens if completion else 0,
                cost_usd=completion.cost_usd if completion else None, latency_s=latency,
                retries=len(retries), cached=cached, step=step, error=error_text))

    def _log_line(self, line: bytes) -> None:
        """Append a line to the call log through a descriptor kept open (a call costs one write, not an open and
        a close); O_APPEND, so each line lands whole at the end."""
        if self._log_fd is None:
            assert self.log_path is not None
            self._log_fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        write_all(self._log_fd, line)

    def close(self) -> None:
        """Close the call log (a later call opens it again)."""
        with self._lock:
            if self._log_fd is not None:
                os.close(self._log_fd)
                self._log_fd = None

    def __del__(self) -> None:
        fd = getattr(self, "_log_fd", None)
        if fd is not None:
            os.close(fd)

    # ---- state ----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Backend states by role, usage and cache positions: saved with each step for --resume."""
        seen: dict[int, str] = {}
        state = {}
        for role, backend in self.backends.items():
            if id(backend) in seen:  # roles sharing one backend share its state
                state[role] = {"same_as": seen[id(backend)]}
            else:
                seen[id(backend)] = role
                state[role] = backend.state_dict()
        result: dict[str, Any] = {"backends": state, "usage": self.usage.model_dump()}
        if self.cache is not None:
            with self._lock:
                result["cache_occurrences"] = dict(self._occurrences)
        return result

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take back what state_dict saved, when a killed run resumes."""
        for role, backend_state in state.get("backends", {}).items():
            if role in self.backends and "same_as" not in backend_state:
                self.backends[role].load_state_dict(backend_state)
        if "usage" in state and not (self.log_path and self.log_path.is_file()):
            self.usage = Usage(**state["usage"])
        self._occurrences = dict(state.get("cache_occurrences", {}))
