"""The actions that ask a model: reading long files, editing scripts, reflecting on the research log."""
from __future__ import annotations

import difflib
import os
import re

from mlab.core.errors import EnvError
from mlab.core.llm.client import LLMClient
from mlab.core.run.edit_history import EditHistory
from mlab.core.run.research_log import ResearchLog
from mlab.core.run.workspace import Workspace

BLOCK_CHARS = 12_000
# Fences at line starts, so a ``` inside the code (a docstring, a markdown string) does not end the block.
_FENCE = re.compile(r"^[ \t]*```[^\n`]*\n(.*?)^[ \t]*```", re.DOTALL | re.MULTILINE)
_LOOSE_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_OPENING = re.compile(r"^[ \t]*```[^\n`]*\n", re.MULTILINE)


def extract_code(text: str) -> str:
    """The longest fenced code block of a reply, or the whole reply when it has no fence.

    A reply cut off before its closing fence gives everything after the opening fence.
    """
    blocks: list[str] = _FENCE.findall(text) or _LOOSE_FENCE.findall(text)
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
    blocks: list[tuple[int, int, str]] = []
    current: list[str] = []
    first, size = 1, 0
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
    """Understand File, Edit Script (AI), Edit Script Segment (AI), Reflection, Retrieval from Research Log."""

    def __init__(self, llm: LLMClient | None, workspace: Workspace, history: EditHistory, log: ResearchLog):
        self.llm = llm
        self.workspace = workspace
        self.history = history
        self.log = log

    def _ask(self, prompt: str, role: str) -> str:
        if self.llm is None:
            raise EnvError("this run has no language model, so this action is unavailable")
        return self.llm.complete(prompt, role=role).text

    # ---- actions --------------------------------------------------------------------------------
    def understand_file(self, file_name: str, things_to_look_for: str) -> str:
        text = self.workspace.read_text(file_name, advice="Understand File reads files up to that size; "
                                        "use Inspect Script Lines for parts of larger ones")
        return self._understand(file_name, text, things_to_look_for)

    def edit_script(self, script_name: str, edit_instruction: str, save_name: str) -> str:
        source = self.workspace.path(script_name)
        old = self.workspace.read_text(script_name) if os.path.lexists(source) else ""
        target = self.workspace.writable(save_name)
        new = self._edit(script_name, old, edit_instruction)
        if not new.strip() and old.strip():
            raise EnvError("the model returned no code, so nothing was saved; try a clearer instruction")
        note = self.history.save(target, new.encode("utf-8"), save_name)
        return _diff_report(save_name, old, new) + note

    def edit_script_segment(self, script_name: str, start_line_number: int, end_line_number: int,
                            edit_instruction: str, save_name: str) -> str:
        start, end = start_line_number, end_line_number
        old = self.workspace.read_text(script_name)
        lines = old.splitlines(keepends=True)
        if start < 1 or end < start or start > len(lines) + 1:
            raise EnvError(f"lines {start}-{end} are not in {script_name!r}, which has {len(lines)} lines")
        target = self.workspace.writable(save_name)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        segment = "".join(lines[start - 1 : end])
        edited = self._edit(script_name, segment, edit_instruction, whole=False)
        if edited and not edited.endswith("\n"):
            edited += "\n"
        new = "".join(lines[: start - 1]) + edited + "".join(lines[end:])
        note = self.history.save(target, new.encode("utf-8"), save_name)
        return _diff_report(save_name, old, new) + note

    def reflection(self, things_to_reflect_on: str) -> str:
        prompt = (
            f"Research log so far:\n{self.log.read() or '(empty)'}\n\n"
            f"Think carefully about this and answer in plain prose: {things_to_reflect_on}"
        )
        return self._ask(prompt, "fast")

    def retrieval(self, current_plan: str) -> str:
        prompt = (
            f"Research log so far:\n{self.log.read() or '(empty)'}\n\nCurrent plan: {current_plan}\n\n"
            "Recall, concisely, everything in the log that matters for carrying out this plan: "
            "results measured, what failed and why, files and settings involved."
        )
        return self._ask(prompt, "fast")

    # ---- prompts --------------------------------------------------------------------------------
    def _understand(self, file_name: str, text: str, wanted: str) -> str:
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
        joined = "\n\n".join(f"[lines {b[0]}-{b[1]}]\n{n}" for b, n in zip(blocks, notes, strict=True))
        prompt = (
            f"Several readers each covered a part of {file_name}, looking for: {wanted}\n\n{joined}\n\n"
            "Merge their reports into one account of the whole file, keeping line references."
        )
        return self._ask(prompt, "fast")

    def _edit(self, file_name: str, code: str, instruction: str, whole: bool = True) -> str:
        what = "the script" if whole else "this excerpt of the script"
        prompt = (
            f"Here is {what} {file_name}:\n```python\n{code}```\n\n"
            f"Change it as follows: {instruction}\n\n"
            f"Answer with the complete new version of {what} in a single ```python code block, "
            "nothing left out or abbreviated."
        )
        return extract_code(self._ask(prompt, "edit"))


def _diff_report(save_name: str, old: str, new: str) -> str:
    diff = "".join(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                        fromfile=f"{save_name} (before)", tofile=f"{save_name} (after)"))
    return f"The edited file is saved as {save_name}. Check that this diff does what you meant:\n{diff}"
