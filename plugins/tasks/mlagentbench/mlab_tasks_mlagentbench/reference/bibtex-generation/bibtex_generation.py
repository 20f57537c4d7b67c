"""BibTeX generation tool (reference): usage `python bibtex_generation.py INPUT.txt OUTPUT_PREFIX`.

The LLM names what needs a citation and how to search for it; paper_search finds candidates; the LLM picks
the paper each mention refers to; the \\cite goes right after the mention and the .bib holds each cited entry.
"""
import json
import re
import sys
from pathlib import Path

import llm_tool
import paper_search

CANDIDATES = 5


def ask_json(prompt, fallback):
    """The first JSON value in the LLM's answer, or fallback when there is none (or the budget is spent)."""
    try:
        answer = llm_tool.complete(prompt, max_tokens=800)
    except llm_tool.LLMBudgetExhausted:
        return fallback
    match = re.search(r"(\[.*\]|\{.*\})", answer, re.DOTALL)
    try:
        return json.loads(match.group(1)) if match else fallback
    except ValueError:
        return fallback


def mentions(paragraph):
    found = ask_json(
        "TASK: find citations.\n"
        "List each phrase of the paragraph below that names a method, model, dataset, benchmark or technique a "
        "reader would expect a citation for. Copy the phrase exactly as written, and give a search query of "
        "plain keywords describing the paper that introduced it (its subject, not only an acronym).\n"
        'Answer with JSON only: [{"phrase": "...", "query": "..."}]\n\n'
        f"Paragraph:\n{paragraph}", [])
    return [m for m in found if isinstance(m, dict) and str(m.get("phrase", "")).strip()
            and str(m["phrase"]).lower() in paragraph.lower()]


def choose(phrase, candidates):
    """The candidate paper the phrase refers to, or None."""
    listing = "\n".join(f"{p['arxiv_id']}: {p['title']} ({p['year']}). {p['abstract']}" for p in candidates)
    answer = ask_json(
        "TASK: choose the cited paper.\n"
        f"Which of these papers introduced or defines \"{phrase}\"? Answer with JSON only: "
        '{"arxiv_id": "..."} or {"arxiv_id": null} when none does.\n\n' + listing, {})
    chosen = answer.get("arxiv_id") if isinstance(answer, dict) else None
    return next((p for p in candidates if p["arxiv_id"] == chosen), None)


def generate(paragraph):
    """The paragraph with \\cite commands, and the BibTeX entries of the cited papers."""
    placed, cited = [], {}
    for mention in mentions(paragraph):
        phrase = str(mention["phrase"])
        candidates = {}
        for query in (str(mention.get("query") or ""), phrase):
            for paper in paper_search.search(query, limit=CANDIDATES):
                candidates.setdefault(paper["arxiv_id"], paper)
        if not candidates:
            continue
        paper = choose(phrase, list(candidates.values()))
        if paper is None:
            continue
        start = paragraph.lower().find(phrase.lower())
        end = start + len(phrase)
        if any(s < end and start < e for s, e, _k in placed):
            continue  # overlaps a mention already cited
        key = paper_search.cite_key(paper)
        cited[key] = paper
        placed.append((start, end, key))
    text = paragraph
    for _start, end, key in sorted(placed, key=lambda p: -p[1]):
        text = text[:end] + f" \\cite{{{key}}}" + text[end:]
    return text, "\n".join(paper_search.bibtex(paper) for paper in cited.values())


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python bibtex_generation.py INPUT.txt OUTPUT_PREFIX")
    source, prefix = Path(sys.argv[1]), sys.argv[2]
    tex, bib = generate(source.read_text(encoding="utf-8"))
    Path(prefix).parent.mkdir(parents=True, exist_ok=True)
    Path(prefix + ".tex").write_text(tex, encoding="utf-8")
    Path(prefix + ".bib").write_text(bib, encoding="utf-8")
    print(f"wrote {prefix}.tex and {prefix}.bib")
