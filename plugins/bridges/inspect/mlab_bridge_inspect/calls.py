"""An Inspect sample's model calls as mlab's call log: each ModelEvent becomes one llm_calls.jsonl entry (the
shape core/llm/client.py writes), so `mlab view`, `runs` and `report` count its calls, tokens and cost. Tool calls
and tool results are text, as mlab's program-agent endpoint keeps them."""
from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from inspect_ai.event import ModelEvent
from inspect_ai.model import ChatMessage

MODEL_PREFIX = "inspect"  # the backend name in the log's `model` (NAME:MODEL): the model was Inspect's


def _tool_calls_text(message: Any) -> str:
    calls = getattr(message, "tool_calls", None) or []
    return json.dumps([{"id": c.id, "function": c.function, "arguments": c.arguments} for c in calls],
                      default=str) if calls else ""


def _message(message: ChatMessage) -> dict[str, str]:
    """A chat message as mlab's {role, content}: an assistant's tool calls follow its text; a tool's result is a
    user message naming the tool (mlab's roles are system, user and assistant)."""
    text = message.text
    if message.role == "assistant":
        calls = _tool_calls_text(message)
        return {"role": "assistant", "content": f"{text}\n{calls}".strip() if calls else text}
    if message.role == "tool":
        function = getattr(message, "function", None) or "tool"
        error = getattr(message, "error", None)
        note = f" (error: {error.message})" if error is not None else ""
        return {"role": "user", "content": f"[{function} result{note}]\n{text}"}
    return {"role": message.role, "content": text}


def _price(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """The call's cost from litellm's price table when Inspect gave none (its names are litellm's for the
    common providers); None when the model has no known price."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no download of the price table
    try:
        import litellm

        prompt_cost, completion_cost = litellm.cost_per_token(model=model, prompt_tokens=prompt_tokens,
                                                              completion_tokens=completion_tokens)
    except Exception:  # not installed, or the model is not in the table: unknown, not zero
        return None
    return float(prompt_cost) + float(completion_cost)


def call_entries(events: Iterable[Any], step_starts: Sequence[float]) -> list[dict[str, Any]]:
    """Log entries of the finished ModelEvents among `events`, in order. A call's step is the step it led to: one
    more than the steps (their start times, `step_starts`) begun before the call started."""
    session = uuid.uuid4().hex[:12]
    entries = []
    for event in events:
        if not isinstance(event, ModelEvent) or event.pending:
            continue
        output = event.output
        usage = output.usage
        prompt = (usage.input_tokens + (usage.input_tokens_cache_read or 0)
                  + (usage.input_tokens_cache_write or 0)) if usage else 0
        completion_tokens = usage.output_tokens if usage else 0
        cost = usage.total_cost if usage and usage.total_cost is not None else None
        if cost is None and usage is not None and event.error is None:
            cost = _price(event.model, prompt, completion_tokens)
        started = event.timestamp.timestamp()
        ended = event.completed.timestamp() if event.completed else None
        latency = event.working_time if event.working_time is not None else (
            ended - started if ended is not None else 0.0)
        answer = output.choices[0].message if output.choices else None
        text = None
        if event.error is None and answer is not None:
            calls = _tool_calls_text(answer)
            text = f"{answer.text}\n{calls}".strip() if calls else answer.text
        entries.append({
            "time": started,
            "step": sum(1 for s in step_starts if s < started) + 1,
            "session": session,
            "role": "main",
            "model": f"{MODEL_PREFIX}:{event.model}",
            "api_base": None,
            "response_model": output.model or None,
            "messages": [_message(m) for m in event.input],
            "params": event.config.model_dump(exclude_none=True),
            "completion": text,
            "prompt_tokens": prompt if text is not None else 0,
            "completion_tokens": completion_tokens if text is not None else 0,
            "cost_usd": cost if text is not None else None,
            "latency_s": round(float(latency), 4),
            "cached": event.cache == "read",
            "attempts": (event.retries or 0) + 1,
            "retries": [],
            "error": event.error,
            "context_too_long": False,
        })
    return entries
