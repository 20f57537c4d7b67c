"""Response handling shared by mlab's model-driven agents: lenient JSON, argument checks, retries, summaries.

The autogpt and langchain agent plugins import this module too, so keep it free of research-agent specifics.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from mlab.core import ActionSpec, Message, MlabError

MAX_ATTEMPTS = 5
SUMMARY_THRESHOLD = 5_000  # observations longer than this (characters) are summarized before they enter history
SUMMARY_CHUNK = 20_000  # how much of an observation one summarizing call reads

_FENCE_LINE = re.compile(r"^\s*```[\w+-]*\s*$")


class InvalidResponse(Exception):
    """A model response that cannot be turned into an action; the message tells the model what to fix."""


# ---- lenient JSON ---------------------------------------------------------------------------------
def strip_fences(text: str) -> str:
    """Drop Markdown code-fence lines (```json ... ```) wherever they are."""
    return "\n".join(line for line in text.splitlines() if not _FENCE_LINE.match(line))


def _drop_trailing_commas(text: str) -> str:
    """Remove commas right before } or ], outside strings."""
    out, in_string, escaped = [], False, False
    for i, ch in enumerate(text):
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch == ",":
            rest = text[i + 1 :].lstrip()
            if rest[:1] in ("}", "]"):
                continue
        out.append(ch)
    return "".join(out)


def _value_by_keys(text: str, keys: list[str]) -> dict[str, Any]:
    """Last resort for a JSON object with unescaped quotes inside its strings: cut it at the known keys."""
    found = []
    for key in keys:
        match = re.search(r'"%s"\s*:\s*' % re.escape(key), text)
        if match:
            found.append((match.start(), match.end(), key))
    if not found:
        raise ValueError("none of the expected keys found")
    found.sort()
    result = {}
    for n, (_start, value_start, key) in enumerate(found):
        end = found[n + 1][0] if n + 1 < len(found) else len(text)
        raw = text[value_start:end].rstrip()
        raw = raw[:-1].rstrip() if n + 1 == len(found) and raw.endswith("}") else raw
        raw = raw[:-1].rstrip() if raw.endswith(",") else raw
        if raw.startswith('"') and raw.endswith('"') and len(raw) >= 2:
            inner = raw[1:-1]
            try:
                result[key] = json.loads(f'"{inner}"', strict=False)
            except json.JSONDecodeError:
                result[key] = inner.replace('\\"', '"').replace("\\n", "\n")
        else:
            try:
                result[key] = json.loads(raw, strict=False)
            except json.JSONDecodeError:
                raise ValueError(f"cannot read the value of {key!r}")
    return result


def loads_lenient(text: str, keys: list[str] | None = None) -> Any:
    """Parse the first JSON object in text, forgiving code fences, text around it, trailing commas, raw
    newlines inside strings and (when the expected keys are given) unescaped quotes inside strings."""
    body = strip_fences(text)
    start = body.find("{")
    if start < 0:
        raise ValueError("no JSON object (nothing starting with '{')")
    body = body[start:]
    decoder = json.JSONDecoder(strict=False)  # strict=False accepts raw newlines and tabs inside strings
    first_error = None
    for candidate in (body, _drop_trailing_commas(body)):
        try:
            return decoder.raw_decode(candidate)[0]
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
    if keys:
        try:
            return _value_by_keys(_drop_trailing_commas(body), keys)
        except ValueError:
            pass
    raise ValueError(f"not valid JSON: {first_error.msg} at line {first_error.lineno} column {first_error.colno}")


# ---- actions --------------------------------------------------------------------------------------
def usage(spec: ActionSpec) -> str:
    return json.dumps({arg: f"<{hint}>" for arg, hint in spec.args.items()})


def check_args(spec: ActionSpec, args: Any) -> dict[str, Any]:
    """The arguments an action needs, exactly; raises InvalidResponse saying what is wrong."""
    if not isinstance(args, dict):
        raise InvalidResponse(f"the input of {spec.name} must be a JSON object like {usage(spec)}")
    missing = [a for a in spec.args if a not in args]
    unknown = [a for a in args if a not in spec.args]
    if missing or unknown:
        problems = ([f"missing {', '.join(missing)}"] if missing else []) + (
            [f"unexpected {', '.join(unknown)}"] if unknown else [])
        raise InvalidResponse(f"wrong arguments for {spec.name} ({'; '.join(problems)}); "
                              f"it takes exactly {usage(spec)}")
    clean = {}
    for name, value in args.items():
        if name.endswith("_line_number"):
            clean[name] = value
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            clean[name] = str(value)  # a number where text was asked for is harmless
        elif isinstance(value, (dict, list)):
            raise InvalidResponse(f"argument {name} of {spec.name} must be a string, not a JSON "
                                  f"{'object' if isinstance(value, dict) else 'list'}")
        else:
            clean[name] = value
    return clean


def match_name(given: Any, names: list[str]) -> str:
    """The action name a model meant: exact, or differing only in case, quotes or Markdown emphasis."""
    if not isinstance(given, str):
        raise InvalidResponse(f"the action must be a name, one of: {', '.join(names)}")
    cleaned = given.strip().strip("`*\"'").strip()
    for name in names:
        if cleaned.lower() == name.lower():
            return name
    raise InvalidResponse(f"unknown action {cleaned!r}; it must be one of: {', '.join(names)}")


# ---- asking until the response is usable ----------------------------------------------------------
@dataclass
class Attempts:
    """The outcome of asking with retries: the parsed value, or the failures that used up the attempts."""

    value: Any = None
    text: str = ""
    failures: list[dict[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.value is not None


def ask_until_valid(llm, messages: list[Message], parse: Callable[[str], Any],
                    correction: Callable[[str], str], attempts: int = MAX_ATTEMPTS, role: str = "main") -> Attempts:
    """Ask, parse, and on InvalidResponse ask again with the bad response and what was wrong with it.

    Only the latest bad response is kept in the retry prompt, so retries do not pile up context.
    """
    result = Attempts()
    for _ in range(attempts):
        asked = messages
        if result.failures:
            last = result.failures[-1]
            asked = messages + [Message(role="assistant", content=last["response"]),
                                Message(role="user", content=correction(last["problem"]))]
        text = llm.complete(asked, role=role).text
        try:
            result.value, result.text = parse(text), text
            return result
        except InvalidResponse as exc:
            result.failures.append({"response": text, "problem": str(exc)})
    return result


# ---- summaries of long observations ---------------------------------------------------------------
def _chunks(text: str, size: int) -> list[str]:
    pieces, current, length = [], [], 0
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


def summarize_observation(llm, observation: str, action_text: str, role: str = "fast") -> str:
    """Condense a long observation with the fast model, keeping what an experimenter needs from it."""
    pieces = _chunks(observation, SUMMARY_CHUNK)
    notes = []
    for n, piece in enumerate(pieces, start=1):
        part = f" (part {n} of {len(pieces)})" if len(pieces) > 1 else ""
        prompt = (
            f"An agent doing machine-learning research took this action:\n{action_text}\n\n"
            f"It got back this output{part}:\n<output>\n{piece}\n</output>\n\n"
            "Write a concise factual summary of the output for the agent's notes. Keep verbatim every number, "
            "metric, error message with its line, file name and setting; drop repetition and progress noise. "
            "Do not guess or add advice."
        )
        notes.append(llm.complete(prompt, role=role).text.strip())
    if len(notes) == 1:
        return notes[0]
    joined = "\n\n".join(f"[part {n}]\n{note}" for n, note in enumerate(notes, start=1))
    prompt = (f"These are summaries of consecutive parts of one long output of the action:\n{action_text}\n\n"
              f"{joined}\n\nMerge them into one concise summary, keeping every number, error and file name.")
    return llm.complete(prompt, role=role).text.strip()


def truncate_middle(text: str, limit: int) -> str:
    """Keep the head and tail of a long text (where scripts print set-up and results)."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    return f"{text[:head]}\n[... {len(text) - limit} characters left out ...]\n{text[-tail:]}"


# ---- agent options (shared so every agent words its option errors alike) ---------------------------
def check_option_names(agent: str, options: dict, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise MlabError(f"agent {agent!r} has no option {', '.join(unknown)}; options: {', '.join(allowed)}")


def pick_actions(names: Any, option: str, actions: dict[str, ActionSpec]) -> list[str]:
    """The action names of a list option, each one the environment offers."""
    if not isinstance(names, list) or not names:
        raise MlabError(f"option {option} must be a list of action names")
    unknown = [n for n in names if n not in actions]
    if unknown:
        raise MlabError(f"unknown action(s) {', '.join(map(repr, unknown))} in option {option}; "
                        f"valid: {', '.join(actions)}")
    return names


def positive_int_option(options: dict, name: str, default: int) -> int:
    value = options.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MlabError(f"option {name} must be a positive whole number, not {value!r}")
    return value
