"""Literature review tool (reference): usage `python literature_review.py "QUERY" OUTPUT.md`.

The LLM turns the query into searches; paper_search finds candidates; the LLM keeps those on the topic,
summarizes each and writes the conclusion. Each summary's heading gives the paper's arXiv id.
"""
import json
import re
import sys
from pathlib import Path

import llm_tool
import paper_search

PER_SEARCH, MAX_PAPERS = 6, 6


def ask(prompt, max_tokens=600):
    try:
        return llm_tool.complete(prompt, max_tokens=max_tokens).strip()
    except llm_tool.LLMBudgetExhausted:
        return ""


def ask_json(prompt, fallback):
    match = re.search(r"(\[.*\])", ask(prompt), re.DOTALL)
    try:
        return json.loads(match.group(1)) if match else fallback
    except ValueError:
        return fallback


def review(query):
    """The Markdown report for a query."""
    searches = ask_json(
        "TASK: search queries.\n"
        f"Give up to 3 keyword search queries that find research papers on this topic: {query}\n"
        'Answer with JSON only: ["...", "..."]', [])
    candidates = {}
    for words in [query, *[str(s) for s in searches][:3]]:
        for paper in paper_search.search(words, limit=PER_SEARCH):
            candidates.setdefault(paper["arxiv_id"], paper)
    listing = "\n".join(f"{p['arxiv_id']}: {p['title']}. {p['abstract']}" for p in candidates.values())
    kept = ask_json(
        "TASK: select relevant papers.\n"
        f"Topic: {query}\nWhich of these papers are about the topic? Leave out papers on other subjects.\n"
        'Answer with JSON only: a list of arXiv ids, e.g. ["1234.56789"]\n\n' + listing, [])
    papers = [candidates[i] for i in kept if isinstance(i, str) and i in candidates][:MAX_PAPERS]
    ids = ", ".join("arXiv:" + p["arxiv_id"] for p in papers) or "none found"
    parts = [f"# Literature review: {query}\n", f"Papers reviewed: {ids}\n"]
    summaries = []
    for paper in papers:
        summary = ask(
            "TASK: summarize a paper.\n"
            f"In 3-4 sentences, summarize this paper's contribution and its relevance to \"{query}\".\n\n"
            f"Title: {paper['title']}\nAbstract: {paper['abstract']}")
        summaries.append(f"{paper['title']}: {summary}")
        parts.append(f"## {paper['title']} (arXiv:{paper['arxiv_id']}, {paper['year']})\n\n"
                     f"Authors: {', '.join(paper['authors'])}\n\n{summary}\n")
    conclusion = ask(
        "TASK: conclude a literature review.\n"
        f"Write the conclusion (one paragraph) of a literature review on \"{query}\" from these summaries: "
        "common themes, differences, open questions.\n\n" + "\n".join(summaries), max_tokens=800)
    parts.append(f"## Conclusion\n\n{conclusion or 'No conclusion could be written.'}\n")
    return "\n".join(parts)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit('usage: python literature_review.py "QUERY" OUTPUT.md')
    query, output = sys.argv[1], Path(sys.argv[2])
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(review(query), encoding="utf-8")
    print(f"wrote {output}")
