"""`mlab export --format chat-jsonl`: each model call of each run as one chat record (the request's messages and
the completion as the assistant's turn), with the run's score, improvement and success, the shape fine-tuning and
RL tooling reads. One line per entry of the run's llm_calls.jsonl, in its order, for every agent kind; a failed
call keeps its error and has no assistant turn. Tool calls and results are in OpenAI's chat fine-tuning shape
(assistant tool_calls, tool messages with their tool_call_id, the tools offered beside the messages); a text-only
call's record is {role, content} messages, as it always was."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mlab.core.bench.run_folders import runs_in
from mlab.core.bench.verdict import trace_judge
from mlab.core.errors import MlabError
from mlab.core.run.trace import read_call_entries, read_trace

FILE_NAME = "chat.jsonl"
Warn = Callable[[str], None]


def quiet(_line: str) -> None:
    pass


def exported_calls(run_dir: Path, warn: Warn = quiet) -> list[dict[str, Any]]:
    """The run's model calls as both exports take them: none, and one line to warn with, when its llm_calls.jsonl
    is a symlink (it may be another run's, or any file of the host) or cannot be read; as `mlab view` shows it."""
    try:
        return read_call_entries(run_dir)
    except MlabError as exc:
        warn(f"{exc}; the run is exported without its model calls")
        return []


def chat_records(path: Path, warn: Warn = quiet) -> Iterator[dict[str, Any]]:
    """The records of every run PATH stands for (a run, a folder of runs, a bench)."""
    verdict_of = trace_judge()
    for run_dir in runs_in(path):
        trace = read_trace(run_dir)
        verdict = verdict_of(run_dir, trace)
        run = {"run": str(run_dir), "run_id": trace.run_id, "task": trace.config.task, "agent": trace.config.agent,
               "seed": trace.config.seed, "status": trace.status, "score": trace.final_score,
               "improvement": verdict.get("improvement"), "success": verdict.get("success")}
        for n, entry in enumerate(exported_calls(run_dir, warn), 1):
            messages = [openai_message(m) for m in entry.get("messages") or [] if isinstance(m, dict)]
            if entry.get("completion") is not None and entry.get("error") is None:
                messages.append(openai_message({"role": "assistant", "content": entry["completion"],
                                                "tool_calls": entry.get("tool_calls") or []}))
            params = entry.get("params") or {}
            offered = {key: params[key] for key in ("tools", "parallel_tool_calls") if params.get(key) is not None}
            yield {"messages": messages, **offered, **run, "call": n, "step": entry.get("step"),
                   "role": entry.get("role"), "model": entry.get("model"), "params": params,
                   "prompt_tokens": entry.get("prompt_tokens"), "completion_tokens": entry.get("completion_tokens"),
                   "cost_usd": entry.get("cost_usd"), "cached": entry.get("cached"), "error": entry.get("error")}


def openai_message(message: dict[str, Any]) -> dict[str, Any]:
    """A logged message (Message.record()) as an OpenAI chat message; a text one unchanged."""
    out = dict(message)
    parts = out.pop("parts", None)
    if isinstance(parts, list) and parts:
        out["content"] = [{"type": "image_url", "image_url": {"url": p.get("image_url", "")}}
                          if p.get("type") == "image" else {"type": "text", "text": p.get("text", "")}
                          for p in parts if isinstance(p, dict)]
    calls = out.pop("tool_calls", None)
    if isinstance(calls, list) and calls:
        out["tool_calls"] = [{"id": c.get("id"), "type": "function",
                              "function": {"name": c.get("name"), "arguments": c.get("arguments", "{}")}}
                             for c in calls if isinstance(c, dict)]
        if out.get("content") == "":
            out["content"] = None  # OpenAI's "no text" beside tool calls
    return out


def export(path: Path, out_dir: Path, warn: Warn = quiet) -> Path:
    """Write PATH's records to out_dir/chat.jsonl; returns the file. warn gets a line per run file not read."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / FILE_NAME
    tmp = target.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(record, ensure_ascii=False, default=str) + "\n" for record in chat_records(path, warn))
    tmp.replace(target)
    return target
