"""A person is the model: `--llm human` shows each prompt in the terminal and reads the completion typed or pasted.

For debugging prompts and for interactive research. The answer may span many lines; it ends with a line holding
only a single "." (or with Ctrl-D at the start of a line). A line of ".." stands for a line holding "." itself.
Without a terminal on stdin the backend refuses to start, with one line saying why, instead of waiting forever.
"""
from __future__ import annotations

import sys
from typing import IO, Any

from mlab.core import LLM, Completion, LLMError, Message

END_LINE = "."
RULE = "=" * 78


def _estimate_tokens(text: str) -> int:
    return max(1, round(len(text.split()) * 4 / 3)) if text else 0


def read_answer(stream: IO[str]) -> str:
    """Lines up to a line holding only "." (or end of input); raises LLMError when input ends before any text."""
    lines: list[str] = []
    while True:
        line = stream.readline()
        if line == "":  # Ctrl-D, or the terminal went away
            if not lines:
                raise LLMError("the person ended the input without typing an answer")
            break
        bare = line.rstrip("\r\n")
        if bare == END_LINE:
            break
        lines.append("." + "\n" if bare == ".." else bare + "\n")
    return "".join(lines).rstrip("\n")


def terminal_problem(stream: IO[str] | None) -> str | None:
    if stream is None or getattr(stream, "closed", False):
        return "the human backend needs a terminal to read answers from, but there is no stdin"
    try:
        is_tty = stream.isatty()
    except (ValueError, OSError):
        is_tty = False
    if not is_tty:
        return ("the human backend needs a terminal to read answers from, but stdin is not one "
                "(run mlab in a terminal, or use replay:RUN_DIR or scripted:FILE for unattended runs)")
    return None


class HumanLLM(LLM):
    name = "human"
    description = "You are the model: each prompt is shown in the terminal and you type the completion."
    uses_terminal = True  # the CLI turns its live display off so the prompt and your typing stay readable

    def __init__(self, model: str = "", **options: Any):
        super().__init__(model, **options)
        problem = terminal_problem(sys.stdin)
        if problem:
            raise ValueError(problem)
        self.calls = 0

    def complete(self, messages: list[Message], **params: Any) -> Completion:
        problem = terminal_problem(sys.stdin)
        if problem:
            raise LLMError(problem)
        self.calls += 1
        out = sys.stderr
        roles = ", ".join(self.roles or ("main",))
        out.write(f"\n{RULE}\nLLM call {self.calls} (roles: {roles})"
                  + (f", parameters: {params}" if params else "") + "\n")
        for message in messages:
            out.write(f"----- {message.role} -----\n{message.content}\n")
        out.write(f"{RULE}\nType or paste the completion. End it with a line holding only \"{END_LINE}\" "
                  f"(or Ctrl-D).\n")
        out.flush()
        text = read_answer(sys.stdin)
        out.write(f"[{len(text)} characters received]\n")
        out.flush()
        prompt = "\n".join(m.content for m in messages)
        return Completion(text=text, model=f"human:{self.model}" if self.model else "human",
                          prompt_tokens=_estimate_tokens(prompt), completion_tokens=_estimate_tokens(text),
                          cost_usd=None)  # a person has no price: unpriced, never a made-up $0

    def state_dict(self) -> dict[str, Any]:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.calls = int(state.get("calls", 0))
