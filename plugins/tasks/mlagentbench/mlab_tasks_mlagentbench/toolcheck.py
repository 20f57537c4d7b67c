"""Automatic checks of the tool-building tasks' outputs (ours: the original had no evaluation for them).

Each example's output gets a fraction of structural checks passed; the score is the mean over examples and
checks, in [0, 1]. They check format and citation/report structure, not whether the citations are right.
"""
from __future__ import annotations

import re
from pathlib import Path

_CITE = re.compile(r"\\cite[tp]?\*?(?:\[[^\]]*\])?\{([^}]*)\}")
_ENTRY = re.compile(r"@(\w+)\s*\{\s*([^,\s]+)\s*,", re.IGNORECASE)
_ARXIV = re.compile(r"(?:arxiv\.org/(?:abs|pdf)/|arXiv:\s*)(\d{4}\.\d{4,5}|[a-z\-]+(?:\.[A-Z]{2})?/\d{7})",
                    re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z0-9]+")


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def bib_entries(text: str) -> dict[str, str]:
    """key -> the entry's body, for entries whose braces balance; unbalanced entries are left out."""
    entries = {}
    for match in _ENTRY.finditer(text):
        depth, end = 0, None
        for pos in range(text.index("{", match.start()), len(text)):
            depth += {"{": 1, "}": -1}.get(text[pos], 0)
            if depth == 0:
                end = pos
                break
        if end is not None:
            entries[match.group(2)] = text[match.end():end]
    return entries


def has_field(body: str, name: str) -> bool:
    return re.search(rf"(^|[,\s]){name}\s*=\s*[{{\"\d]", body, re.IGNORECASE) is not None


def check_bibtex(paragraph: str, tex: str | None, bib: str | None) -> dict[str, bool]:
    cited = [k.strip() for group in _CITE.findall(tex or "") for k in group.split(",") if k.strip()]
    entries = bib_entries(bib or "")
    stripped = _CITE.sub(" ", tex or "")
    original, kept = words(paragraph), set(words(stripped))
    return {
        "paragraph written": bool(tex and tex.strip()),
        "has citations": bool(cited),
        "original text kept": bool(original) and sum(w in kept for w in original) / len(original) >= 0.9,
        "bibtex parses": bool(entries) and len(entries) >= len(_ENTRY.findall(bib or "")),
        "every citation has an entry": bool(cited) and all(k in entries for k in cited),
        "entries have title, author and year": bool(entries) and all(
            has_field(b, "title") and has_field(b, "author") and has_field(b, "year") for b in entries.values()),
    }


def _sections(report: str) -> list[tuple[str, str]]:
    """(heading, body) of each Markdown heading."""
    parts = re.split(r"^(#{1,6}\s+.*)$", report, flags=re.MULTILINE)
    return [(parts[i].lstrip("#").strip().lower(), parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def check_review(query: str, report: str | None) -> dict[str, bool]:
    report = report or ""
    ids = {m.lower() for m in _ARXIV.findall(report)}
    sections = _sections(report)
    conclusion = [body for head, body in sections if "conclusion" in head]
    summaries = [body for head, body in sections if head and "conclusion" not in head and
                 len(words(body)) >= 25 and _ARXIV.search(head + body)]
    query_words = [w for w in words(query) if len(w) > 3]
    return {
        "report written": bool(report.strip()),
        "lists at least 3 arXiv papers": len(ids) >= 3,
        "a summary per paper": len(summaries) >= min(3, max(len(ids), 1)),
        "has a conclusion": bool(conclusion) and len(words(conclusion[0])) >= 30,
        "about the query": bool(query_words) and sum(w in set(words(report)) for w in query_words)
        >= max(1, len(query_words) // 2),
    }


def read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None
    except OSError:
        return None
