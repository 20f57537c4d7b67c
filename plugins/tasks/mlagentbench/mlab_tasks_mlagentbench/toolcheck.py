"""Checks of what the tool tasks' tools wrote for the scorer's hidden inputs (ours: the original had no
evaluation for them).

Both are judged against the paper corpus shipped with the tasks (files/tools-common/paper_corpus.json) and the
hidden inputs' answers: which corpus papers each hidden paragraph mentions, which are on each hidden query's
topic. Each output gets a weighted score in [0, 1]; a tool's score is the mean over the hidden inputs. Keeping
the paragraph / writing a report is worth a small floor (the placeholder tools' measured baseline); everything
else needs citations of real corpus papers, so invented entries and arXiv ids earn nothing.
"""
from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from pathlib import Path

_CITE = re.compile(r"\\cite[tp]?\*?(?:\[[^\]]*\])?\{([^}]*)\}")
_ENTRY = re.compile(r"@(\w+)\s*\{\s*([^,\s]+)\s*,", re.IGNORECASE)
_ARXIV = re.compile(r"(?:arxiv\.org/(?:abs|pdf)/|arXiv:\s*)(\d{4}\.\d{4,5}|[a-z\-]+(?:\.[A-Z]{2})?/\d{7})",
                    re.IGNORECASE)
_VERSION = re.compile(r"v\d+$")
_WORD = re.compile(r"[A-Za-z0-9]+")
_STOPWORDS = frozenset(
    "a an and are as at be by for from in into is it its of on or that the their this to with we our via using "
    "use based model models learning neural network networks paper method methods these those which also can "
    "such than more most has have were was".split())

TITLE_MATCH = 0.9  # difflib ratio of normalised titles from which an entry names a corpus paper
# A \cite counts as placed when it starts this close after the mention ends (or ends this close before it).
PLACED_AFTER_CHARS, PLACED_BEFORE_CHARS = 100, 40
TEXT_KEPT = 0.9  # share of the paragraph's words the .tex must keep
SUMMARY_WORDS, SHARED_WORDS = 25, 4  # a summary: this many words, sharing this many with the paper's abstract
CONCLUSION_WORDS = 30
ENOUGH_PAPERS = 3  # relevant papers a review must cite for full marks on coverage
# Below this share of cited papers that belong (mentioned / on topic), the other citation checks shrink in
# proportion: a few stray citations cost only their own check, citing the whole corpus earns next to nothing.
PRECISION_FLOOR = 0.5

BIBTEX_WEIGHTS = {"paragraph kept": 0.10, "entries name corpus papers": 0.15, "cites only mentioned papers": 0.15,
                  "mentioned papers cited": 0.35, "citations placed at their mention": 0.25}
REVIEW_WEIGHTS = {"report written": 0.10, "relevant corpus papers cited": 0.30, "cites only relevant papers": 0.15,
                  "each relevant paper summarized": 0.30, "has a conclusion": 0.15}


def words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def content_words(text: str) -> set[str]:
    return {w for w in words(text) if len(w) > 3 and w not in _STOPWORDS}


def weighted(checks: dict[str, float], weights: dict[str, float]) -> float:
    return sum(weights[name] * value for name, value in checks.items())


def precision_factor(precision: float) -> float:
    return min(1.0, precision / PRECISION_FLOOR)


class Corpus:
    """The papers a tool may cite: by arXiv id, and found by title."""

    def __init__(self, papers: Iterable[dict]):
        self.papers = {p["arxiv_id"]: p for p in papers}
        self._titles = {_normal_title(p["title"]): p["arxiv_id"] for p in self.papers.values()}

    @classmethod
    def load(cls, path: Path) -> Corpus:
        return cls(json.loads(Path(path).read_text(encoding="utf-8")))

    def by_title(self, title: str) -> str | None:
        """The arXiv id of the corpus paper with this title (allowing for braces, case and small slips)."""
        wanted = _normal_title(title)
        if not wanted:
            return None
        if wanted in self._titles:
            return self._titles[wanted]
        best = max(self._titles, key=lambda t: difflib.SequenceMatcher(None, wanted, t).ratio())
        return self._titles[best] if difflib.SequenceMatcher(None, wanted, best).ratio() >= TITLE_MATCH else None


def _normal_title(title: str) -> str:
    return " ".join(words(title))


# ---- BibTeX generation ---------------------------------------------------------------------------
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


def field_value(body: str, name: str) -> str | None:
    """A field's value, braces or quotes removed (nested braces kept as text)."""
    match = re.search(rf"(?:^|[,\s]){name}\s*=\s*", body, re.IGNORECASE)
    if not match:
        return None
    rest = body[match.end():]
    if rest.startswith("{"):
        depth = 0
        for pos, char in enumerate(rest):
            depth += {"{": 1, "}": -1}.get(char, 0)
            if depth == 0:
                return rest[1:pos].replace("{", "").replace("}", "")
        return None
    if rest.startswith('"'):
        end = rest.find('"', 1)
        return rest[1:end] if end > 0 else None
    return re.match(r"[^,}\s]*", rest).group(0)  # type: ignore[union-attr]


def check_bibtex(paragraph: str, cites: list[tuple[str, str]], tex: str | None, bib: str | None,
                 corpus: Corpus) -> dict[str, float]:
    """Each check's value in [0, 1] for one hidden paragraph whose mentions `cites` ((phrase, arXiv id)) name
    corpus papers. Nothing counts unless the paragraph's text is kept."""
    tex, bib = tex or "", bib or ""
    original = words(paragraph)
    kept_words = set(words(_CITE.sub(" ", tex)))
    kept = bool(original) and sum(w in kept_words for w in original) / len(original) >= TEXT_KEPT
    checks = dict.fromkeys(BIBTEX_WEIGHTS, 0.0)
    if not kept:
        return checks
    checks["paragraph kept"] = 1.0
    entries = bib_entries(bib)
    paper_of = {key: corpus.by_title(field_value(body, "title") or "") for key, body in entries.items()}
    citations = [(m.start(), m.end(), [k.strip() for k in m.group(1).split(",") if k.strip()])
                 for m in _CITE.finditer(tex)]
    cited_keys = {k for _s, _e, keys in citations for k in keys}
    if not cited_keys:
        return checks
    cited_papers = {paper_of.get(k) for k in cited_keys}
    wanted = {arxiv_id for _phrase, arxiv_id in cites}
    precision = sum(paper_of.get(k) in wanted for k in cited_keys) / len(cited_keys)
    factor = precision_factor(precision)
    checks["entries name corpus papers"] = factor * sum(paper_of.get(k) is not None for k in cited_keys) / len(
        cited_keys)
    checks["cites only mentioned papers"] = precision
    checks["mentioned papers cited"] = factor * len(wanted & cited_papers) / len(wanted)
    lowered = tex.lower()
    placed = 0
    for phrase, arxiv_id in cites:
        spans = [m.span() for m in re.finditer(re.escape(phrase.lower()), lowered)]
        placed += any(
            paper_of.get(k) == arxiv_id and (0 <= start - end_phrase <= PLACED_AFTER_CHARS
                                              or 0 <= start_phrase - end <= PLACED_BEFORE_CHARS)
            for start_phrase, end_phrase in spans for start, end, keys in citations for k in keys)
    checks["citations placed at their mention"] = factor * placed / len(cites)
    return checks


# ---- literature review ---------------------------------------------------------------------------
def _sections(report: str) -> list[tuple[str, str]]:
    """(heading, body) of each Markdown heading."""
    parts = re.split(r"^(#{1,6}\s+.*)$", report, flags=re.MULTILINE)
    return [(parts[i].lstrip("#").strip(), parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def arxiv_ids(text: str) -> set[str]:
    return {_VERSION.sub("", m.lower()) for m in _ARXIV.findall(text)}


def check_review(relevant: list[str], report: str | None, corpus: Corpus) -> dict[str, float]:
    """Each check's value in [0, 1] for one hidden query whose on-topic corpus papers are `relevant`."""
    report = report or ""
    checks = dict.fromkeys(REVIEW_WEIGHTS, 0.0)
    if not report.strip():
        return checks
    checks["report written"] = 1.0
    cited = arxiv_ids(report)
    on_topic = cited & set(relevant)
    factor = 0.0
    if cited:
        checks["cites only relevant papers"] = len(on_topic) / len(cited)
        factor = precision_factor(checks["cites only relevant papers"])
        checks["relevant corpus papers cited"] = factor * min(1.0, len(on_topic) / ENOUGH_PAPERS)
    sections = _sections(report)
    summarized = 0
    for arxiv_id in on_topic:
        paper = corpus.papers[arxiv_id]
        about = content_words(paper["title"] + " " + paper["abstract"])
        summarized += any(arxiv_id in arxiv_ids(head + " " + body) and len(words(body)) >= SUMMARY_WORDS
                          and len(content_words(body) & about) >= SHARED_WORDS
                          for head, body in sections if "conclusion" not in head.lower())
    if on_topic:
        checks["each relevant paper summarized"] = factor * summarized / max(len(on_topic), ENOUGH_PAPERS)
    conclusions = [body for head, body in sections if "conclusion" in head.lower()]
    checks["has a conclusion"] = float(bool(conclusions) and len(words(conclusions[-1])) >= CONCLUSION_WORDS)
    return checks


READ_BYTES = 1 << 20  # what is read of an output: a tool's runaway output is not scored whole


def read(path: Path) -> str | None:
    try:
        if not path.is_file():
            return None
        with open(path, "rb") as f:
            return f.read(READ_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
