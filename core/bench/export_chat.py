"""`mlab export --format chat-jsonl`: each model call of each run as one chat record (the request's messages and
the completion as the assistant's turn), with the run's score, improvement and success, the shape fine-tuning and
RL tooling reads. One line per entry of the run's llm_calls.jsonl, in its order, for every agent kind; a failed
call keeps its error and has no assistant turn."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mlab.core.bench.run_folders import runs_in
from mlab.core.bench.verdict import trace_judge
from mlab.core.llm.client import read_call_log
from mlab.core.run.trace import LLM_LOG_FILE, read_trace

FILE_NAME = "chat.jsonl"


def chat_records(path: Path) -> Iterator[dict[str, Any]]:
    """The records of every run PATH stands for (a run, a folder of runs, a bench)."""
    verdict_of = trace_judge()
    for run_dir in runs_in(path):
        trace = read_trace(run_dir)
        verdict = verdict_of(run_dir, trace)
        run = {"run": str(run_dir), "run_id": trace.run_id, "task": trace.config.task, "agent": trace.config.agent,
               "seed": trace.config.seed, "status": trace.status, "score": trace.final_score,
               "improvement": verdict.get("improvement"), "success": verdict.get("success")}
        for n, entry in enumerate(read_call_log(run_dir / LLM_LOG_FILE), 1):
            messages = list(entry.get("messages") or [])
            if entry.get("completion") is not None and entry.get("error") is None:
                messages.append({"role": "assistant", "content": entry["completion"]})
            yield {"messages": messages, **run, "call": n, "step": entry.get("step"), "role": entry.get("role"),
                   "model": entry.get("model"), "params": entry.get("params") or {},
                   "prompt_tokens": entry.get("prompt_tokens"), "completion_tokens": entry.get("completion_tokens"),
                   "cost_usd": entry.get("cost_usd"), "cached": entry.get("cached"), "error": entry.get("error")}


def export(path: Path, out_dir: Path) -> Path:
    """Write PATH's records to out_dir/chat.jsonl; returns the file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / FILE_NAME
    tmp = target.with_suffix(".jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for record in chat_records(path):
            f.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    tmp.replace(target)
    return target
