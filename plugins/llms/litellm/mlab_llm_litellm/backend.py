"""Any model litellm supports: `--llm openai/gpt-4o`, `anthropic/claude-…`, `gemini/…`, `ollama/…`, or any
OpenAI-compatible server with `--llm-api-base URL` (e.g. `--llm openai/my-model --llm-api-base http://host:8000/v1`).

litellm is imported on first use, never when plugins are listed, with its bundled price table so that nothing
reaches for the internet. The backend makes exactly one request per call (litellm's and the OpenAI SDK's own
retries are off): the core retries what this module classifies as transient, so every retry is logged.
"""
from __future__ import annotations

import email.utils
import os
import re
import time
from typing import Any

from mlab.core import LLM, Completion, LLMError, Message, ToolCall, to_openai

DEFAULT_TIMEOUT_S = 600.0
# litellm lists both names for Gemini; either one is enough.
_ALTERNATIVE_KEYS = {frozenset({"GEMINI_API_KEY", "GOOGLE_API_KEY"})}
_CONTEXT_WORDS = re.compile(r"context length|context window|maximum context|too many tokens|prompt is too long|"
                            r"context_length_exceeded|input is too long", re.IGNORECASE)
_PREFIX = re.compile(r"^(?:litellm\.\w+:\s*)?(?:\w+Error:\s*)?(?:\w+Exception\s*-\s*)?")

_litellm = None


def _import_litellm():
    """Import litellm once, offline-safe and quiet."""
    global _litellm
    if _litellm is None:
        os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # read before import: no download of the price table
        import litellm

        litellm.suppress_debug_info = True  # no "Give Feedback / Get Help" banners on stdout
        litellm.telemetry = False
        _litellm = litellm
    return _litellm


def missing_key(model: str, api_base: str | None) -> str | None:
    """One line naming the environment variable to set, or None when the provider's credentials are present."""
    if api_base:
        return None  # a self-hosted server: a key is passed if set, and many servers need none
    litellm = _import_litellm()
    try:
        found = litellm.validate_environment(model=model)
    except Exception:
        return None  # unknown to litellm's checks: let the first call say what is wrong
    # Base URLs have defaults (ollama on localhost); only credentials are required.
    keys = [k for k in found.get("missing_keys") or [] if not k.endswith("_API_BASE")]
    if found.get("keys_in_environment") or not keys:
        return None
    if len(keys) == 1:
        return f"{model} needs an API key: set {keys[0]}"
    if frozenset(keys) in _ALTERNATIVE_KEYS:
        return f"{model} needs an API key: set {' or '.join(sorted(keys))}"
    return f"{model} needs credentials: set {' and '.join(keys)}"


def _key_variable(model: str) -> str:
    provider = model.split("/", 1)[0] if "/" in model else "openai"
    return f"{provider.upper()}_API_KEY"


def _headers(exc: BaseException):
    headers = getattr(exc, "litellm_response_headers", None)
    if headers is None:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
    return headers or {}


def parse_retry_after(headers) -> float | None:
    """Seconds to wait from retry-after-ms, or Retry-After as seconds or an HTTP date."""
    try:
        value = headers.get("retry-after-ms")
        if value is not None:
            return max(0.0, float(value) / 1000)
        value = headers.get("retry-after")
    except Exception:
        return None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    while True:  # litellm stacks prefixes like "litellm.BadRequestError: BadRequestError: OpenAIException - "
        stripped = _PREFIX.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    text = text.split(", Received response - ")[0]  # litellm appends reprs of its own objects
    return text[:500] or type(exc).__name__


def classify(exc: BaseException, model: str) -> LLMError:
    """Map a litellm (or transport) exception to LLMError: transient ones are retried by the core."""
    litellm = _import_litellm()
    status = getattr(exc, "status_code", None)
    message = _short(exc)
    where = f"{model}: "
    if isinstance(exc, litellm.ContextWindowExceededError) or (
            status in (400, 413, 422) and _CONTEXT_WORDS.search(message)):
        return LLMError(where + f"the prompt is too long for the model ({message})", context_too_long=True)
    if isinstance(exc, litellm.AuthenticationError) or status == 401:
        return LLMError(where + f"authentication failed (401: {message}); check {_key_variable(model)}")
    if isinstance(exc, litellm.PermissionDeniedError) or status == 403:
        return LLMError(where + f"permission denied (403: {message})")
    if isinstance(exc, litellm.NotFoundError) or status == 404:
        return LLMError(where + f"model or endpoint not found (404: {message})")
    if isinstance(exc, litellm.RateLimitError) or status == 429:
        error = LLMError(where + f"rate limited (429: {message})", transient=True)
        error.retry_after = parse_retry_after(_headers(exc))
        return error
    if isinstance(exc, litellm.Timeout) or status == 408:
        return LLMError(where + f"timed out ({message})", transient=True)
    server_side = not isinstance(status, int) or status >= 500  # litellm reports transport failures as 500
    if server_side and ("Connection error" in message or isinstance(exc, ConnectionError)):
        return LLMError(where + f"connection failed or dropped ({message})", transient=True)
    if server_side and any(word in message for word in ("Expecting value", "JSONDecodeError", "Unterminated")):
        return LLMError(where + f"malformed response from the server ({message})", transient=True)
    transient_types = (litellm.APIConnectionError, litellm.InternalServerError, litellm.ServiceUnavailableError,
                       litellm.BadGatewayError, ConnectionError, TimeoutError)
    if isinstance(exc, transient_types) or (isinstance(status, int) and status >= 500):
        error = LLMError(where + f"server or connection failure ({status or 'no status'}: {message})",
                         transient=True)
        error.retry_after = parse_retry_after(_headers(exc))
        return error
    if isinstance(exc, litellm.APIError) and status is None:
        return LLMError(where + f"unexpected API failure ({message})", transient=True)
    if isinstance(exc, (litellm.BadRequestError, litellm.UnprocessableEntityError)) or status == 400:
        return LLMError(where + f"bad request (400: {message})")
    return LLMError(where + f"{type(exc).__name__}: {message}")


class LiteLLMBackend(LLM):
    name = "litellm"
    description = ("Any litellm model: openai/…, anthropic/…, gemini/…, ollama/…; an OpenAI-compatible server "
                   "with --llm-api-base. Keys from the provider's usual environment variables.")
    handles_unprefixed = True
    supports_tools = True  # litellm translates OpenAI's tools and tool calls for every provider

    def __init__(self, model: str = "", api_base: str | None = None, timeout: float | None = None,
                 **options: Any):
        super().__init__(model, api_base=api_base, timeout=timeout, **options)
        if not model:
            raise ValueError("the litellm backend needs a model, e.g. litellm:openai/gpt-4o")
        self.api_base = api_base
        self.timeout = float(timeout) if timeout else DEFAULT_TIMEOUT_S
        litellm = _import_litellm()  # now rather than in the first call, whose latency is logged
        try:
            litellm.get_llm_provider(model=model, api_base=api_base)
        except Exception:
            # LookupError: the core then says which other backends there are (a typo must not run at all)
            raise LookupError(f"litellm knows no provider for {model!r}; write PROVIDER/MODEL, e.g. openai/gpt-4o "
                              "or anthropic/claude-3-5-haiku-latest") from None
        problem = missing_key(model, api_base)
        if problem:
            raise ValueError(problem)

    @classmethod
    def preload(cls) -> None:
        _import_litellm()

    def complete(self, messages: list[Message], **params: Any) -> Completion:
        litellm = _import_litellm()
        request: dict[str, Any] = {
            "model": self.model, "messages": to_openai(messages),
            "timeout": self.timeout, "max_retries": 0, "num_retries": 0, **params}
        if self.api_base:
            request["api_base"] = self.api_base
            if not os.environ.get(_key_variable(self.model)):
                request["api_key"] = "no-key"  # OpenAI-compatible clients insist on some key
        try:
            response = litellm.completion(**request)
        except Exception as exc:
            raise classify(exc, self.model) from exc
        try:
            choice = response.choices[0]
            text = choice.message.content or ""
            calls = [ToolCall(id=str(c.id or f"call_{i}"), name=str(c.function.name or ""),
                              arguments=str(c.function.arguments or "{}"))
                     for i, c in enumerate(getattr(choice.message, "tool_calls", None) or [])]
        except (AttributeError, IndexError, TypeError) as exc:
            raise LLMError(f"{self.model}: malformed response without a message ({exc})", transient=True) from exc
        usage = getattr(response, "usage", None)
        return Completion(text=text, tool_calls=calls, finish_reason=getattr(choice, "finish_reason", None),
                          model=str(getattr(response, "model", "") or self.model),
                          prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                          completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
                          cost_usd=self._cost(litellm, response))

    def _cost(self, litellm, response) -> float | None:
        try:
            cost = litellm.completion_cost(completion_response=response, model=self.model)
        except Exception:
            return None  # a model missing from litellm's price table: cost unknown, not zero
        return float(cost) if cost is not None else None
