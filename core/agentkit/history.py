"""Turning earlier steps into prompt text: actions as one line, long observations cut or summarized."""
from __future__ import annotations

import json

from mlab.core.llm.client import LLMClient
from mlab.core.models import Action, Step

SUMMARY_THRESHOLD = 5_000  # observations longer than this (characters) are summarized before entering history
SUMMARY_CHUNK = 20_000  # how much of an observation one summarizing call reads
# An edit's diff is for the agent to check line by line: a summary would hide the mistakes it must catch. The
# environment bounds these observations itself (and says how to see the rest).
VERBATIM_ACTIONS = frozenset({"Edit Script (AI)", "Edit Script Segment (AI)"})


def needs_summary(step: Step, threshold: int = SUMMARY_THRESHOLD) -> bool:
    """True when a step's observation is long enough to summarize and is not one that must stay verbatim."""
    return len(step.observation) > threshold and step.action.name not in VERBATIM_ACTIONS


def action_text(action: Action) -> str:
    """An action as one line: its name and its arguments as JSON."""
    return f"{action.name} {json.dumps(action.args, ensure_ascii=False)}"


def truncate_middle(text: str, limit: int) -> str:
    """Keep the head and tail of a long text (where scripts print set-up and results)."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters left out ...]\n{text[-tail:]}"


def _chunks(text: str, size: int) -> list[str]:
    pieces: list[str] = []
    current: list[str] = []
    length = 0
    for line in text.splitlines(keepends=True):
        while len(line) > size:  # one huge line: cut it
            pieces.extend(["".join(current)] if current else [])
            current, length = [], 0
            pieces.append(line[:size])
            line = line[size:]
        if current and length + len(line) > size:
            pieces.append("".join(current))
            current, length = [], 0
        current.append(line)
        length += len(line)
    if current:
        pieces.append("".join(current))
    return pieces or [""]


def summarize_observation(llm: LLMClient, observation: str, action_line: str, role: str = "fast") -> str:
    """Condense a long observation with the fast model, keeping what an experimenter needs from it."""
    pieces = _chunks(observation, SUMMARY_CHUNK)
    notes: list[str] = []
    for n, piece in enumerate(pieces, start=1):
        part = f" (part {n} of {len(pieces)})" if len(pieces) > 1 else ""
        prompt = (
            f"An agent doing machine-learning research took this action:\n{action_line}\n\n"
            f"It got back this output{part}:\n<output>\n{piece}\n</output>\n\n"
            "Write a concise factual summary of the output for the agent's notes. Keep verbatim every number, "
            "metric, error message with its line, file name and setting; drop repetition and progress noise. "
            "Do not guess or add advice."
        )
        notes.append(llm.complete(prompt, role=role).text.strip())
    if len(notes) == 1:
        return notes[0]
    joined = "\n\n".join(f"[part {n}]\n{note}" for n, note in enumerate(notes, start=1))
    prompt = (f"These are summaries of consecutive parts of one long output of the action:\n{action_line}\n\n"
              f"{joined}\n\nMerge them into one concise summary, keeping every number, error and file name.")
    return llm.complete(prompt, role=role).text.strip()
