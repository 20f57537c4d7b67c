"""A budgeted LLM proxy on a unix socket: how code run in a sandbox without network (a scorer running an agent's
tool) reaches a model without ever holding its key.

The proxy is an HTTP server in the harness, listening on a unix socket in a folder the sandbox shows; a unix
socket is reached through the file system, so it works from a sandbox with a network namespace of its own. It
speaks the OpenAI chat-completions shape (POST /v1/chat/completions with messages, max_tokens, temperature;
the model is the proxy's, whatever the request names), forwards each call to an upstream holding the key, and
counts calls and tokens against a budget: a call beyond it gets HTTP 429 and never reaches the upstream.

The budget holds under concurrency: before a call goes upstream it reserves its prompt (at most one token per
UTF-8 byte, an upper bound for byte-level BPE tokenizers, plus a few per message) and its completion allowance;
after, the reservation is settled to what the upstream reported. A call that does not fit beside the calls in
flight waits for them to settle, then goes or is refused.
"""
from __future__ import annotations

import json
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mlab.core.llm.client import prompt_token_bound
from mlab.core.llm.connections import ConnectionSlots, slots_from_env
from mlab.core.llm.unix_http import BodyError, JsonHandler, UnixSocketServer

# The variable that tells a tool (llm_tool.py) where the proxy listens; set only for commands that may use it.
LLM_PROXY_SOCKET_ENV = "MLAB_LLM_PROXY_SOCKET"
SOCKET_NAME = "llm.sock"
MAX_BODY_BYTES = 4 * 2**20  # a request larger than this is refused unread
CHARS_PER_TOKEN = 4  # the estimate for an upstream that reports no usage


@dataclass(frozen=True)
class ProxyBudget:
    """What the proxy lets through: calls, and tokens (prompt plus completion) over all of them."""

    max_calls: int
    max_tokens: int
    max_tokens_per_call: int = 2048  # a call may ask for at most this many completion tokens


@dataclass(frozen=True)
class Reply:
    text: str
    prompt_tokens: int
    completion_tokens: int


# An upstream completes (messages, max_tokens, temperature); the proxy knows nothing of keys or endpoints.
Upstream = Callable[[list[dict[str, str]], int, float], Reply]


@dataclass
class ProxyUsage:
    """What went through the proxy: the calls answered, their tokens, and the calls refused or failed."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    refused: int = 0  # beyond the budget
    failed: int = 0  # the upstream failed or the request was malformed
    log: list[dict[str, Any]] = field(default_factory=list)  # one entry per request
    upstream_errors: list[str] = field(default_factory=list)  # what the upstream said when it failed

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def summary(self) -> dict[str, int]:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "refused": self.refused, "failed": self.failed}


def estimate_tokens(text: str) -> int:
    return max(1, len(text) // CHARS_PER_TOKEN)


class _Handler(JsonHandler):
    proxy: LLMProxy  # set on the per-proxy subclass

    def do_POST(self) -> None:
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send(404, {"error": {"message": f"no such endpoint {self.path}; POST /v1/chat/completions"}})
            return
        try:
            raw = self.body(MAX_BODY_BYTES)
        except BodyError as exc:
            self.close_connection = True
            self.proxy.record(failed=True, note=str(exc))
            self._send(exc.status, {"error": {"message": str(exc)}})
            return
        try:
            body = json.loads(raw)
            messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in body["messages"]]
            if not messages:
                raise ValueError("no messages")
            max_tokens = int(body.get("max_tokens") or 1024)
            temperature = float(body.get("temperature") or 0.0)
        except (ValueError, KeyError, TypeError, OverflowError) as exc:
            self.proxy.record(failed=True, note=f"malformed request: {exc}")
            self._send(400, {"error": {"message": f"malformed request: {exc}; send {{'messages': [...]}}"}})
            return
        status, payload = self.proxy.complete(messages, max_tokens, temperature)
        self._send(status, payload)


class LLMProxy:
    """The proxy's server, run in a thread while the block runs:

        with LLMProxy(upstream, ProxyBudget(20, 40_000), folder) as proxy:
            ... run a command with {LLM_PROXY_SOCKET_ENV: str(proxy.socket_path)} in its environment ...
        proxy.usage.summary()
    """

    def __init__(self, upstream: Upstream, budget: ProxyBudget, folder: Path | str | None = None,
                 connections: ConnectionSlots | None = None):
        self.upstream = upstream
        # the bench's limit on requests in flight (--max-connections) counts the proxy's calls too
        self.connections = connections if connections is not None else slots_from_env()
        self.budget = budget
        self.usage = ProxyUsage()
        self._lock = threading.RLock()
        self._settled = threading.Condition(self._lock)  # notified when a call in flight settles
        self._reserved = 0  # tokens held by the calls in flight
        self._in_flight = 0
        self._own_folder = folder is None
        # a unix socket's path is limited to about 100 bytes: a short folder of its own by default
        self.folder = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="mlab-llm-"))
        self.socket_path = self.folder / SOCKET_NAME
        handler = type("ProxyHandler", (_Handler,), {"proxy": self})
        self._server = UnixSocketServer(self.socket_path, handler, "mlab-llm-proxy")

    # ---- accounting ----------------------------------------------------------------------------------
    def record(self, *, failed: bool = False, refused: bool = False, note: str = "", reply: Reply | None = None,
               seconds: float = 0.0) -> None:
        with self._lock:
            self.usage.failed += failed
            self.usage.refused += refused
            entry: dict[str, Any] = {"seconds": round(seconds, 3)}
            if reply is not None:
                entry.update(prompt_tokens=reply.prompt_tokens, completion_tokens=reply.completion_tokens)
            if note:
                entry["error"] = note
            self.usage.log.append(entry)

    def _reserve(self, prompt_bound: int, max_tokens: int) -> int | None:
        """The completion tokens this call may use, its prompt and that allowance reserved; None when the budget
        cannot hold the prompt (it is never sent: the upstream would charge for it). Waits while calls in flight
        hold what it needs: they may settle for less than they reserved."""
        with self._settled:
            while True:
                spent = self.usage.tokens
                left = self.budget.max_tokens - spent - self._reserved
                if self._in_flight and (self.usage.calls >= self.budget.max_calls or prompt_bound >= left):
                    self._settled.wait()  # what the calls in flight do not use (or fail to) comes back
                    continue
                if self.usage.calls >= self.budget.max_calls or prompt_bound >= left:
                    return None
                completion = max(1, min(max_tokens, self.budget.max_tokens_per_call, left - prompt_bound))
                self.usage.calls += 1
                self._in_flight += 1
                self._reserved += prompt_bound + completion
                return completion

    def _settle(self, reserved: int, reply: Reply | None) -> None:
        """Replace a call's reservation by what it cost (nothing when the upstream failed)."""
        with self._settled:
            self._reserved -= reserved
            self._in_flight -= 1
            if reply is None:
                self.usage.calls -= 1  # a failed call spends no budget
            else:
                self.usage.prompt_tokens += reply.prompt_tokens
                self.usage.completion_tokens += reply.completion_tokens
            self._settled.notify_all()

    def complete(self, messages: list[dict[str, str]], max_tokens: int, temperature: float) -> tuple[int, dict]:
        """(HTTP status, JSON payload) of one call: the upstream's answer, or why there is none."""
        prompt_bound = prompt_token_bound(m["content"] for m in messages)
        allowed = self._reserve(prompt_bound, max_tokens)
        if allowed is None:
            spent = self.usage.summary()
            message = (f"LLM budget spent: {spent['calls']} of {self.budget.max_calls} calls, "
                       f"{self.usage.tokens} of {self.budget.max_tokens} tokens (this prompt: at most "
                       f"{prompt_bound})")
            self.record(refused=True, note=message)
            return 429, {"error": {"type": "budget_exceeded", "message": message}}
        started = time.monotonic()
        try:
            if self.connections is None:
                reply = self.upstream(messages, allowed, temperature)
            else:
                with self.connections.held():
                    reply = self.upstream(messages, allowed, temperature)
        except Exception as exc:  # the upstream's failure is the tool's problem to handle, not the harness's
            note = f"upstream failed: {type(exc).__name__}: {exc}"[:500]
            self._settle(prompt_bound + allowed, None)
            with self._lock:
                self.usage.upstream_errors.append(note)
            self.record(failed=True, note=note, seconds=time.monotonic() - started)
            return 502, {"error": {"type": "upstream_error", "message": note}}
        except BaseException:
            self._settle(prompt_bound + allowed, None)
            raise
        self._settle(prompt_bound + allowed, reply)
        self.record(reply=reply, seconds=time.monotonic() - started)
        return 200, {"object": "chat.completion",
                     "choices": [{"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": reply.text}}],
                     "usage": {"prompt_tokens": reply.prompt_tokens, "completion_tokens": reply.completion_tokens,
                               "total_tokens": reply.prompt_tokens + reply.completion_tokens}}

    # ---- the server ----------------------------------------------------------------------------------
    def __enter__(self) -> LLMProxy:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()
        if self._own_folder:
            with suppress(OSError):
                self.folder.rmdir()


# ---- an upstream over HTTP: the endpoint and key stay in the harness ----------------------------------
@dataclass(frozen=True)
class HttpUpstream:
    """An OpenAI-compatible or Anthropic endpoint; the key is read from a file here, never sent to the tool."""

    provider: str  # "openai" or "anthropic"
    model: str
    base_url: str = ""
    api_key_file: str = ""
    timeout_s: float = 120.0

    def _key(self) -> str:
        return Path(self.api_key_file).expanduser().read_text().strip() if self.api_key_file else ""

    def _post(self, url: str, payload: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                         headers={"Content-Type": "application/json", **headers})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as exc:  # the endpoint's own message, not only its status
            raise RuntimeError(f"{url}: HTTP {exc.code}: {exc.read()[:300].decode(errors='replace')}") from None

    def __call__(self, messages: list[dict[str, str]], max_tokens: int, temperature: float) -> Reply:
        key = self._key()
        prompt_chars = sum(len(m["content"]) for m in messages)
        if self.provider == "anthropic":
            system = "\n".join(m["content"] for m in messages if m["role"] == "system")
            payload: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "temperature": temperature,
                                       "messages": [m for m in messages if m["role"] != "system"]}
            if system:
                payload["system"] = system
            base = (self.base_url or "https://api.anthropic.com/v1").rstrip("/")
            answer = self._post(f"{base}/messages", payload, {"x-api-key": key, "anthropic-version": "2023-06-01"})
            text = "".join(block.get("text", "") for block in answer.get("content", []))
            used = answer.get("usage") or {}
            prompt, completion = used.get("input_tokens"), used.get("output_tokens")
        else:
            base = (self.base_url or "https://api.openai.com/v1").rstrip("/")
            answer = self._post(f"{base}/chat/completions", {"model": self.model, "messages": messages,
                                                             "max_tokens": max_tokens, "temperature": temperature},
                                {"Authorization": f"Bearer {key}"} if key else {})
            text = answer["choices"][0]["message"]["content"] or ""
            used = answer.get("usage") or {}
            prompt, completion = used.get("prompt_tokens"), used.get("completion_tokens")
        # an endpoint that reports no usage is charged an estimate: the budget holds all the same
        return Reply(text=text, prompt_tokens=int(prompt) if prompt else max(1, prompt_chars // CHARS_PER_TOKEN),
                     completion_tokens=int(completion) if completion else estimate_tokens(text))

    def describe(self) -> dict[str, str]:
        return {k: v for k, v in asdict(self).items() if k in ("provider", "model", "base_url") and v}
