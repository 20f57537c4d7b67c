"""The actions that ask a model: reading long files, editing scripts, reflecting on the research log."""
from __future__ import annotations

import re

from mlab.core.errors import EnvError

BLOCK_CHARS = 12_000
# Fences at line starts, so a ``` inside the code (a docstring, a markdown string) does not end the block.
_FENCE = re.compile(r"^[ \t]*```[^\n`]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
_LOOSE_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_OPENING = re.compile(r"^[ \t]*```[^\n`]*\n", re.MULTILINE)


def extract_code(text: str) -> str:
    """The longest fenced code block of a reply, or the whole reply when it has no fence.

    A reply cut off before its closing fence gives everything after the opening fence.
    """
    blocks = _FENCE.findall(text) or _LOOSE_FENCE.findall(text)
    if blocks:
        code = max(blocks, key=len)
    else:
        opening = _OPENING.search(text)
        code = text[opening.end():] if opening else text.strip("\n")
    if not code.strip():
        return ""
    return code if code.endswith("\n") else code + "\n"


def split_blocks(text: str, limit: int = BLOCK_CHARS) -> list[tuple[int, int, str]]:
    """Split text on line boundaries into (first line, last line, block) pieces of at most ~limit chars."""
    blocks, current, first, size = [], [], 1, 0
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        if current and size + len(line) > limit:
            blocks.append((first, number - 1, "".join(current)))
            current, first, size = [], number, 0
        current.append(line[: limit * 2])
        size += len(line)
    if current:
        blocks.append((first, first + len(current) - 1, "".join(current)))
    return blocks or [(1, 0, "")]


class LLMActions:
    def __init__(self, llm):
        self.llm = llm

    def _ask(self, prompt: str, role: str) -> str:
        if self.llm is None:
            raise EnvError("this run has no language model, so this action is unavailable")
        return self.llm.complete(prompt, role=role).text

    def understand(self, file_name: str, text: str, wanted: str) -> str:
        blocks = split_blocks(text)
        notes = []
        for first, last, block in blocks:
            prompt = (
                f"You are reading lines {first} to {last} of the file {file_name}.\n"
                f"What to look for: {wanted}\n\n"
                f"--- file segment ---\n{block}\n--- end of segment ---\n\n"
                "Report only what this segment actually shows about what was asked, citing line numbers. "
                "Say plainly when the segment does not show something."
            )
            notes.append(self._ask(prompt, "fast"))
        if len(notes) == 1:
            return notes[0]
        joined = "\n\n".join(f"[lines {b[0]}-{b[1]}]\n{n}" for b, n in zip(blocks, notes))
        prompt = (
            f"Several readers each covered a part of {file_name}, looking for: {wanted}\n\n{joined}\n\n"
            "Merge their reports into one account of the whole file, keeping line references."
        )
        return self._ask(prompt, "fast")

    def edit(self, file_name: str, code: str, instruction: str, whole: bool = True) -> str:
        what = "the script" if whole else "this excerpt of the script"
        prompt = (
            f"Here is {what} {file_name}:\n```python\n{code}```\n\n"
            f"Change it as follows: {instruction}\n\n"
            f"Answer with the complete new version of {what} in a single ```python code block, "
            "nothing left out or abbreviated."
        )
        return extract_code(self._ask(prompt, "edit"))

    def reflect(self, log: str, question: str) -> str:
        prompt = (
            f"Research log so far:\n{log or '(empty)'}\n\n"
            f"Think carefully about this and answer in plain prose: {question}"
        )
        return self._ask(prompt, "fast")

    def retrieve(self, log: str, plan: str) -> str:
        prompt = (
            f"Research log so far:\n{log or '(empty)'}\n\nCurrent plan: {plan}\n\n"
            "Recall, concisely, everything in the log that matters for carrying out this plan: "
            "results measured, what failed and why, files and settings involved."
        )
        return self._ask(prompt, "fast")
