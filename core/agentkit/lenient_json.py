"""Reading the JSON a model wrote: code fences, text around the object, trailing commas, raw newlines and
unescaped quotes inside strings are all forgiven."""
from __future__ import annotations

import json
import re
from contextlib import suppress
from typing import Any

_FENCE_LINE = re.compile(r"^\s*```[\w+-]*\s*$")


def strip_fences(text: str) -> str:
    """Drop Markdown code-fence lines (```json ... ```) wherever they are."""
    return "\n".join(line for line in text.splitlines() if not _FENCE_LINE.match(line))


def _drop_trailing_commas(text: str) -> str:
    """Remove commas right before } or ], outside strings."""
    out: list[str] = []
    in_string = escaped = False
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
    found: list[tuple[int, int, str]] = []
    for key in keys:
        match = re.search(rf'"{re.escape(key)}"\s*:\s*', text)
        if match:
            found.append((match.start(), match.end(), key))
    if not found:
        raise ValueError("none of the expected keys found")
    found.sort()
    result: dict[str, Any] = {}
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
            except json.JSONDecodeError as exc:
                raise ValueError(f"cannot read the value of {key!r}") from exc
    return result


def loads_lenient(text: str, keys: list[str] | None = None) -> Any:
    """Parse the first JSON object in text, forgiving code fences, text around it, trailing commas, raw
    newlines inside strings and (when the expected keys are given) unescaped quotes inside strings.

    Raises ValueError saying what is wrong when nothing usable is found."""
    body = strip_fences(text)
    start = body.find("{")
    if start < 0:
        raise ValueError("no JSON object (nothing starting with '{')")
    body = body[start:]
    decoder = json.JSONDecoder(strict=False)  # strict=False accepts raw newlines and tabs inside strings
    errors: list[json.JSONDecodeError] = []
    for candidate in (body, _drop_trailing_commas(body)):
        try:
            return decoder.raw_decode(candidate)[0]
        except json.JSONDecodeError as exc:
            errors.append(exc)
    if keys:
        with suppress(ValueError):
            return _value_by_keys(_drop_trailing_commas(body), keys)
    first = errors[0]  # the error in the text as written, not in its repaired copy
    raise ValueError(f"not valid JSON: {first.msg} at line {first.lineno} column {first.colno}")
