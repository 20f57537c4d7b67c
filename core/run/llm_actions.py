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
LONG_LINE_CHARS = 2 * BLOCK_CHARS  # a single line longer than this is shown cut, with a note saying so
# With its note, an edit's observation stays under the 5,000 characters the built-in agents show unabridged.
MAX_DIFF_CHARS = 4_000
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
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


def _break_rank(lines: list[str], at: int) -> int:
    """How good a place it is to start a block at lines[at]: 3 after a blank line and at an unindented line (a
    new entry or paragraph), 2 after a blank line, 1 at an unindented line, 0 anywhere else. A blank line between
    an entry's heading and its indented items ("PoolQC: Pool quality", blank, "Ex Excellent") ranks 2, below the
    blank line before the next heading."""
    after_blank = at > 0 and not lines[at - 1].strip()
    unindented = bool(lines[at].strip()) and not lines[at][0].isspace()
    return 2 * after_blank + unindented


def split_blocks(text: str, limit: int = BLOCK_CHARS) -> list[tuple[int, int, str]]:
    """Split text into (first line, last line, block) pieces of at most ~limit characters, always between lines:
    each block ends at the best break (see _break_rank) in the second half of what fits, the latest of the best.
    A single line over LONG_LINE_CHARS is cut in its own block, with a note saying so."""
    lines = text.splitlines(keepends=True)
    blocks: list[tuple[int, int, str]] = []
    start = 0
    while start < len(lines):
        end, size = start, 0
        while end < len(lines) and (end == start or size + len(lines[end]) <= limit):
            size += len(lines[end])
            end += 1
        if end < len(lines) and end - start > 1:
            low, grown = start + 1, 0
            for k in range(start, end):  # breaks in the second half of the block only, so blocks stay large
                grown += len(lines[k])
                if grown >= size // 2:
                    low = max(k + 1, start + 1)
                    break
            end = max(range(low, end + 1), key=lambda k: (_break_rank(lines, k), k))
        shown = [_shown_line(line, start + i + 1) for i, line in enumerate(lines[start:end])]
        blocks.append((start + 1, end, "".join(shown)))
        start = end
    return blocks or [(1, 0, "")]


def _shown_line(line: str, number: int) -> str:
    if len(line) <= LONG_LINE_CHARS:
        return line
    return (f"{line[:LONG_LINE_CHARS]}\n[line {number} is {len(line)} characters long; the rest of it is not "
            "shown]\n")


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
    """The edit's unified diff, shown verbatim (never summarized: the agent must check the code itself) up to
    MAX_DIFF_CHARS, cut between lines, with a note naming the lines of the file where the rest is."""
    lines = list(difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                      fromfile=f"{save_name} (before)", tofile=f"{save_name} (after)"))
    lines = [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in lines]
    shown, size = 0, 0
    while shown < len(lines) and size + len(lines[shown]) <= MAX_DIFF_CHARS:
        size += len(lines[shown])
        shown += 1
    report = f"The edited file is saved as {save_name}. Check that this diff does what you meant:\n"
    report += "".join(lines[:shown])
    if shown < len(lines):
        left = lines[shown:]
        where = _new_line_ranges(lines, shown)
        report += (f"[The diff goes on for {len(left)} more lines ({sum(map(len, left))} characters), not shown here. "
                   f"See the rest in the file itself with Inspect Script Lines on {save_name}"
                   + (f", {where}" if where else "") + ".]\n")
    return report


def _new_line_ranges(lines: list[str], shown: int, most: int = 5) -> str:
    """The lines of the edited file that the diff lines from `shown` on are about, e.g. "lines 120-180, 240"."""
    ranges: list[tuple[int, int]] = []
    position = 0  # the edited file's line the next diff line stands at
    for index, line in enumerate(lines):
        hunk = _HUNK.match(line)
        if hunk:
            position = int(hunk.group(1)) or 1
            continue
        if index >= shown and line[:1] in " +-" and not line.startswith(("+++", "---")):
            if ranges and ranges[-1][1] >= position - 1:
                ranges[-1] = (ranges[-1][0], max(ranges[-1][1], position))
            else:
                ranges.append((position, position))
        if line[:1] in " +":
            position += 1
    if not ranges:
        return ""
    text = ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in ranges[:most])
    more = f" and {len(ranges) - most} more places" if len(ranges) > most else ""
    return f"{'line' if ranges == [(ranges[0][0], ranges[0][0])] else 'lines'} {text}{more}"
