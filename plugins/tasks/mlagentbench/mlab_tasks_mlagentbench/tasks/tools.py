"""The two tool-building tasks: an LLM-based BibTeX generator and an LLM-based literature-review tool.

The original gave no evaluation and an Anthropic key file; ours runs with any LLM (llm_tool.py talks to an
OpenAI-compatible or Anthropic endpoint configured at prepare: MLAB_TOOL_LLM=provider:model, optional
MLAB_TOOL_LLM_BASE_URL and MLAB_TOOL_LLM_KEY_FILE), uses free search APIs (arXiv, Crossref) instead of a paid
Google Scholar API, and ships an automatic check of the outputs' format and structure (toolcheck.py).
The original had no baseline either; ours is measured: a placeholder tool (it cites nothing, or finds no papers)
run over the examples by run_examples.py, the starter script. The reference for `mlab check-task` is a set of
known-good outputs.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from mlab.core import InvalidSubmission, Metric, MlabError, PrepareContext, Resources, extra_read_only

from ..base import FILES_DIR, PACK, MLAgentBenchTask, copy_files
from ..toolcheck import check_bibtex, check_review, read

LLM_ENV, BASE_URL_ENV, KEY_FILE_ENV = "MLAB_TOOL_LLM", "MLAB_TOOL_LLM_BASE_URL", "MLAB_TOOL_LLM_KEY_FILE"
PROVIDERS = ("openai", "anthropic")  # what llm_tool.py speaks


def llm_config() -> dict:
    """provider:model from MLAB_TOOL_LLM (e.g. openai:gpt-4o-mini, anthropic:claude-3-5-haiku-latest)."""
    provider, _, model = os.environ[LLM_ENV].partition(":")
    if provider not in PROVIDERS or not model:
        raise MlabError(f"{LLM_ENV}={os.environ[LLM_ENV]!r}: give provider:model with provider one of "
                        f"{', '.join(PROVIDERS)}, e.g. openai:gpt-4o-mini")
    config = {"provider": provider, "model": model}
    if os.environ.get(BASE_URL_ENV):
        config["base_url"] = os.environ[BASE_URL_ENV]
    if os.environ.get(KEY_FILE_ENV):
        key = Path(os.environ[KEY_FILE_ENV]).expanduser().resolve()
        if not key.is_file():
            raise MlabError(f"{KEY_FILE_ENV}={os.environ[KEY_FILE_ENV]!r} is not a file")
        shown = [Path(p).expanduser().resolve() for p in extra_read_only()]
        if not any(key.is_relative_to(folder) for folder in shown):
            # agent code sees a file system built from nothing: only folders the user names are there
            raise MlabError(f"{KEY_FILE_ENV}: agent code cannot see {key} inside the sandbox; add its folder to "
                            f"MLAB_SANDBOX_RO (e.g. MLAB_SANDBOX_RO={key.parent}), not below /tmp nor MLAB_HOME")
        config["api_key_file"] = str(key)
    return config


class ToolTask(MLAgentBenchTask):
    metric = Metric(name="check_score", higher_is_better=True)
    # The placeholder tool over the examples: a measured, non-zero baseline well below a working tool's.
    starter_script = "run_examples.py"
    reference_script = "reference_outputs.py"
    resources = Resources(gpu="none", ram_gb=1.0, network_for_prepare=False, network_at_run_time=True,
                          baseline_seconds=1.0, extras=["none (an LLM endpoint and internet access at run time)"])

    @property
    def offline_ready(self) -> bool:
        """Prepared without the network, but runs need an LLM endpoint and paper search: never offline, and
        never prepared on the fly (prepare must see the LLM settings)."""
        return False

    def prepare_data(self, ctx: PrepareContext) -> None:
        if not os.environ.get(LLM_ENV):
            raise MlabError(f"{self.name} builds a tool that calls an LLM: set {LLM_ENV}=provider:model (e.g. "
                            f"openai:gpt-4o-mini; optional {BASE_URL_ENV}, {KEY_FILE_ENV}) and prepare again; "
                            "runs also need the network (the LLM endpoint, arXiv/Crossref)")
        config = llm_config()
        copy_files(FILES_DIR / "tools-common", ctx.public_dir)
        (ctx.public_dir / "llm_config.json").write_text(json.dumps(config, indent=2))

    def reference_solution(self, workspace: Path) -> str | None:
        super().reference_solution(workspace)
        golden = sorted((workspace / "golden").iterdir())
        (workspace / "reference_outputs.py").write_text(
            "# Reference (ours): known-good outputs, to show the automatic check accepts them.\n"
            "import shutil\nshutil.copytree('golden', 'outputs', dirs_exist_ok=True)\n"
            f"print('copied', {len(golden)}, 'files')\n")
        return "reference_outputs.py"


class BibtexGeneration(ToolTask):
    short = "bibtex-generation"
    name = f"{PACK}/bibtex-generation"
    description = ("Build an LLM tool that adds citations and BibTeX to a paragraph; structure check, higher is "
                   "better; needs an LLM endpoint and the network at run time")
    files = "bibtex-generation"
    reference = "bibtex-generation"
    read_only_files = ["llm_tool.py", "search_api_reference.txt", "examples/*"]
    research_problem = (
        "Turn bibtex_generation.py into an LLM-based AI system for the task of BibTeX generation (as shipped it "
        "is a placeholder that cites nothing: it writes the paragraph back unchanged with an empty .bib). The "
        "LLM is available through llm_tool.py: call llm_tool.complete(prompt) (run `python llm_tool.py` to try "
        "it).\n"
        "Given ANY paragraph, e.g. \"We use the method proposed in PromptTuning to train the Transformer "
        "model...\", the system should\n"
        "  - use the LLM to find all phrases and claims in the paragraph that need citations, e.g. PromptTuning "
        "and Transformer;\n"
        "  - use a paper search API (see search_api_reference.txt) with suitable queries to find the right "
        "references and get BibTeX entries for them;\n"
        "  - finally, use the LLM to write the original paragraph with citations, e.g. \"We use the method "
        "proposed in \\cite{lester-etal-2021-power} to train the Transformer \\cite{...} model...\", together "
        "with the BibTeX entries of the cited papers.\n"
        "Usage: python bibtex_generation.py INPUT.txt OUTPUT_PREFIX writes OUTPUT_PREFIX.tex (the paragraph "
        "with \\cite commands) and OUTPUT_PREFIX.bib (an entry for every cited key). Run it on every "
        "examples/paragraph_N.txt, writing outputs/paragraph_N.tex and outputs/paragraph_N.bib (python "
        "run_examples.py does exactly that): those outputs are checked automatically (citations present, every "
        "key has a well-formed entry with title, author and year, the paragraph's text kept).")

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        workspace = Path(workspace)
        examples = sorted((FILES_DIR / self.files / "examples").glob("paragraph_*.txt"))
        outputs = workspace / "outputs"
        if not outputs.is_dir() or not any(outputs.glob("paragraph_*.tex")):
            raise InvalidSubmission("no outputs/paragraph_N.tex: run bibtex_generation.py on the examples")
        results = [check_bibtex(example.read_text(), read(outputs / f"{example.stem}.tex"),
                                read(outputs / f"{example.stem}.bib")) for example in examples]
        return sum(sum(r.values()) / len(r) for r in results) / len(results)


class LiteratureReviewTool(ToolTask):
    short = "literature-review-tool"
    name = f"{PACK}/literature-review-tool"
    description = ("Build an LLM tool that writes a literature review from arXiv; structure check, higher is "
                   "better; needs an LLM endpoint and the network at run time")
    files = "literature-review-tool"
    reference = "literature-review-tool"
    read_only_files = ["llm_tool.py", "arxiv_api_reference.txt", "examples/*"]
    research_problem = (
        "Turn literature_review.py into a large language model (LLM) based AI system for the task of "
        "literature review (as shipped it is a placeholder that searches nothing and lists no papers). The LLM "
        "is available through llm_tool.py: call llm_tool.complete(prompt) (run `python llm_tool.py` to try "
        "it).\n"
        "Given ANY query on a research topic, e.g. Language model hallucination detection, the system should\n"
        "  - call the arXiv API (see arxiv_api_reference.txt) with suitable queries to get a list of related "
        "papers;\n"
        "  - use the LLM to summarize these papers and generate a report. The report should include 1) the list "
        "of papers; 2) the summary of each paper; 3) the conclusion of the literature review.\n"
        "Usage: python literature_review.py \"QUERY\" OUTPUT.md writes the report in Markdown: a section per "
        "paper summary whose heading or text gives the paper's arXiv link or id, and a section headed "
        "Conclusion. Run it for each line N of examples/queries.txt, writing outputs/review_N.md (python "
        "run_examples.py does exactly that): those reports are checked automatically (at least 3 arXiv papers, "
        "a summary per paper, a conclusion, on topic).")

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        workspace = Path(workspace)
        queries = [q.strip() for q in (FILES_DIR / self.files / "examples" / "queries.txt").read_text().splitlines()
                   if q.strip()]
        outputs = workspace / "outputs"
        if not outputs.is_dir() or not any(outputs.glob("review_*.md")):
            raise InvalidSubmission("no outputs/review_N.md: run literature_review.py on the example queries")
        results = [check_review(query, read(outputs / f"review_{n}.md")) for n, query in enumerate(queries, 1)]
        return sum(sum(r.values()) / len(r) for r in results) / len(results)
