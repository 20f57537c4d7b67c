"""Paper search for your tool: an offline index of real machine-learning papers (paper_corpus.json beside this
file: arXiv id, title, authors, year, abstract), searched by keywords. Your tool is scored with this same
search, without network, so search here rather than on the web.

    import paper_search
    hits = paper_search.search("low-rank adaptation of language models", limit=5)
    hits[0]["title"], hits[0]["arxiv_id"], hits[0]["score"]
    paper_search.get("2106.09685")          # one paper by arXiv id (None when not in the index)
    paper_search.bibtex(hits[0])            # a BibTeX entry for a paper; its key: paper_search.cite_key(hits[0])

Run `python paper_search.py WORDS...` to try it. Only the standard library is used.
"""
import json
import math
import re
import sys
from functools import lru_cache
from pathlib import Path

CORPUS_FILE = Path(__file__).resolve().parent / "paper_corpus.json"
_WORD = re.compile(r"[a-z0-9]+")
# Words too common to tell papers apart.
STOPWORDS = frozenset(
    "a an and are as at be by for from in into is it its of on or that the their this to with we our via using "
    "use based model models learning neural network networks paper method methods".split())
TITLE_WEIGHT = 3  # a word in the title counts three times one in the abstract


def tokens(text):
    return [w for w in _WORD.findall(text.lower()) if w not in STOPWORDS]


@lru_cache(maxsize=1)
def papers():
    """Every paper in the index: dicts with arxiv_id, title, authors (list), year, abstract."""
    return json.loads(CORPUS_FILE.read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def _index():
    documents = []
    for paper in papers():
        counts = {}
        for word in tokens(paper["title"]) * TITLE_WEIGHT + tokens(paper["abstract"]):
            counts[word] = counts.get(word, 0) + 1
        documents.append(counts)
    frequency = {}
    for counts in documents:
        for word in counts:
            frequency[word] = frequency.get(word, 0) + 1
    return documents, frequency


def search(query, limit=5):
    """Papers matching the query's words, best first (BM25 over title and abstract), each with a "score"."""
    documents, frequency = _index()
    total = len(documents)
    mean_length = sum(sum(d.values()) for d in documents) / max(total, 1)
    words = set(tokens(query))
    ranked = []
    for paper, counts in zip(papers(), documents, strict=True):
        length = sum(counts.values())
        score = 0.0
        for word in words:
            if word in counts:
                idf = math.log(1 + (total - frequency[word] + 0.5) / (frequency[word] + 0.5))
                tf = counts[word]
                score += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / mean_length))
        if score > 0:
            ranked.append(dict(paper, score=round(score, 4)))
    ranked.sort(key=lambda p: -p["score"])
    return ranked[:limit]


def get(arxiv_id):
    """The paper with this arXiv id, or None."""
    wanted = str(arxiv_id).strip().lower().removeprefix("arxiv:")
    return next((p for p in papers() if p["arxiv_id"] == wanted), None)


def cite_key(paper):
    """e.g. vaswani2017attention: the first author's surname, the year, the title's first long word."""
    surname = tokens(paper["authors"][0].split()[-1]) or ["anon"]
    title = [w for w in tokens(paper["title"]) if len(w) > 3] or ["paper"]
    return f"{surname[0]}{paper['year']}{title[0]}"


def bibtex(paper):
    """A BibTeX @article entry for a paper of the index."""
    authors = " and ".join(paper["authors"])
    return (f"@article{{{cite_key(paper)},\n"
            f"  title = {{{paper['title']}}},\n"
            f"  author = {{{authors}}},\n"
            f"  journal = {{arXiv preprint arXiv:{paper['arxiv_id']}}},\n"
            f"  year = {{{paper['year']}}}\n}}\n")


if __name__ == "__main__":
    for hit in search(" ".join(sys.argv[1:]) or "attention transformer"):
        print(f"{hit['score']:6.2f}  arXiv:{hit['arxiv_id']}  {hit['title']} ({hit['year']})")
