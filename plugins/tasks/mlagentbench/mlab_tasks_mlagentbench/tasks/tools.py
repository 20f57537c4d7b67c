"""The two tool-building tasks: an LLM-based BibTeX generator and an LLM-based literature-review tool.

The original gave no evaluation and an Anthropic key file. Ours runs with any LLM (llm_tool.py talks to an
OpenAI-compatible or Anthropic endpoint configured at prepare: MLAB_TOOL_LLM=provider:model, optional
MLAB_TOOL_LLM_BASE_URL and MLAB_TOOL_LLM_KEY_FILE) and searches an offline corpus of real papers
(paper_search.py over paper_corpus.json) instead of a paid Google Scholar API.

The score is the agent's tool, not its outputs: the scorer runs the tool in the scoring sandbox (no network)
on hidden inputs prepared with the task, with the task's model reachable only through a budgeted LLM proxy on a
unix socket (mlab.core.llm.proxy; the key stays in the harness), and checks what it wrote against the corpus
(toolcheck.py). The proxy's usage is recorded beside the task's data (scoring_llm_usage.jsonl), apart from the
agent's own calls. The baseline is measured: the placeholder tool (it cites nothing, or finds no papers).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path

from mlab.core import (
    LLM_PROXY_SOCKET_ENV,
    HttpUpstream,
    InvalidSubmission,
    LLMProxy,
    Metric,
    MlabError,
    PrepareContext,
    ProxyBudget,
    ProxyUsage,
    Resources,
    extra_read_only,
    scoring_context,
)

from ..base import FILES_DIR, PACK, MLAgentBenchTask, copy_files
from ..toolcheck import BIBTEX_WEIGHTS, REVIEW_WEIGHTS, Corpus, check_bibtex, check_review, read, weighted

log = logging.getLogger("mlab.tasks.tools")

LLM_ENV, BASE_URL_ENV, KEY_FILE_ENV = "MLAB_TOOL_LLM", "MLAB_TOOL_LLM_BASE_URL", "MLAB_TOOL_LLM_KEY_FILE"
PROVIDERS = ("openai", "anthropic")  # what llm_tool.py speaks
COMMON_DIR = FILES_DIR / "tools-common"
CORPUS_FILE = COMMON_DIR / "paper_corpus.json"
SHIPPED_TOOL_FILES = ("llm_tool.py", "paper_search.py", "paper_corpus.json")  # the scorer uses the pack's copies
HIDDEN_FOLDER = "hidden"  # below a task's files: its hidden inputs, copied to the hidden folder, never shown
INPUTS_FILE, UPSTREAM_FILE = "inputs.json", "llm_upstream.json"
USAGE_LOG = "scoring_llm_usage.jsonl"  # in the task's folder, beside baseline.json: the scorer's model use
# What the tool may spend on one hidden input: a working tool needs a handful of calls; a looping one is cut off
# and scored on what it wrote.
SCORING_BUDGET = ProxyBudget(max_calls=30, max_tokens=60_000, max_tokens_per_call=2048)
SECONDS_PER_INPUT = 240.0


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


def upstream_of(config: dict) -> HttpUpstream:
    return HttpUpstream(provider=config["provider"], model=config["model"], base_url=config.get("base_url", ""),
                        api_key_file=config.get("api_key_file", ""))


class ToolTask(MLAgentBenchTask):
    metric = Metric(name="check_score", higher_is_better=True)
    # The placeholder tool over the examples: a measured baseline, non-zero (it keeps the paragraph / writes a
    # report) and well below a working tool's.
    starter_script = "run_examples.py"
    reference_script = "check_tool.py"
    tool_script = ""  # the agent's tool, run by the scorer
    resources = Resources(gpu="none", ram_gb=1.0, network_for_prepare=False, network_at_run_time=True,
                          baseline_seconds=1.0,
                          extras=["none (an LLM endpoint at run time; scoring reaches it through the harness)"])
    scoring_timeout_s = 5 * SECONDS_PER_INPUT + 120

    @property
    def offline_ready(self) -> bool:
        """Prepared without the network, but the tool calls an LLM endpoint (runs keep the host's network for
        it; scoring needs none): never offline, and never prepared on the fly (prepare must see the LLM
        settings)."""
        return False

    def prepare(self, ctx: PrepareContext) -> None:
        if not os.environ.get(LLM_ENV):
            raise MlabError(f"{self.name} builds a tool that calls an LLM: set {LLM_ENV}=provider:model (e.g. "
                            f"openai:gpt-4o-mini; optional {BASE_URL_ENV}, {KEY_FILE_ENV}) and prepare again; "
                            "runs also need the network to reach that endpoint")
        config = llm_config()
        copy_files(COMMON_DIR, ctx.public_dir)
        assert self.files
        shutil.copytree(FILES_DIR / self.files, ctx.public_dir, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(HIDDEN_FOLDER, "__pycache__", "*.pyc"))
        (ctx.public_dir / "llm_config.json").write_text(json.dumps(config, indent=2))
        shutil.copyfile(FILES_DIR / self.files / HIDDEN_FOLDER / INPUTS_FILE, ctx.hidden_dir / INPUTS_FILE)
        # the scorer's proxy forwards to the same model, from the harness
        (ctx.hidden_dir / UPSTREAM_FILE).write_text(json.dumps(config, indent=2))

    def reference_solution(self, workspace: Path) -> str | None:
        super().reference_solution(workspace)
        (workspace / "check_tool.py").write_text(
            "# Reference (ours): the scorer runs the tool itself on its hidden inputs; this only checks it compiles.\n"
            f"import py_compile\npy_compile.compile({self.tool_script!r}, doraise=True)\n"
            f"print('{self.tool_script} compiles')\n")
        return "check_tool.py"

    # ---- scoring: the tool on the hidden inputs --------------------------------------------------------
    def tool_command(self, item: dict, inputs: Path, outputs: Path, n: int) -> list[str]:
        """The tool's command line for hidden input n (files it needs go in `inputs`)."""
        raise NotImplementedError

    def check_output(self, item: dict, outputs: Path, n: int, corpus: Corpus) -> float:
        raise NotImplementedError

    def evaluate(self, workspace: Path, hidden_dir: Path) -> float:
        workspace, hidden_dir = Path(workspace), Path(hidden_dir)
        if not (workspace / self.tool_script).is_file():
            raise InvalidSubmission(f"no {self.tool_script} in the workspace: the scorer runs your tool")
        try:
            items = json.loads((hidden_dir / INPUTS_FILE).read_text())
            config = json.loads((hidden_dir / UPSTREAM_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise MlabError(f"{self.name} was prepared without hidden inputs ({exc}): prepare it again with "
                            "--force") from None
        upstream = upstream_of(config)
        if upstream.api_key_file and not os.access(upstream.api_key_file, os.R_OK):
            raise MlabError(f"{self.name}: the LLM key file {upstream.api_key_file} is gone; scoring runs the tool "
                            "with the model the task was prepared with")
        corpus = Corpus.load(CORPUS_FILE)
        ctx = scoring_context()
        if upstream.api_key_file:  # even a key folder shown through MLAB_SANDBOX_RO is covered while scoring
            ctx = dataclasses.replace(ctx, hidden_paths=[*ctx.hidden_paths, Path(upstream.api_key_file)])
        scores, usages = [], []
        with ctx.scratch() as scratch:
            tool = scratch / "tool"
            shutil.copytree(workspace, tool, symlinks=True,
                            ignore=shutil.ignore_patterns("outputs", "llm_config.json", *SHIPPED_TOOL_FILES))
            for name in SHIPPED_TOOL_FILES:  # links into the public folder do not resolve in the sandbox
                shutil.copyfile(COMMON_DIR / name, tool / name)
            inputs, outputs = scratch / "inputs", scratch / "outputs"
            inputs.mkdir()
            outputs.mkdir()
            for n, item in enumerate(items, 1):
                argv = [sys.executable, str(tool / self.tool_script), *self.tool_command(item, inputs, outputs, n)]
                # a proxy per input: each input gets the whole budget, whatever the tool spent before
                with LLMProxy(upstream, SCORING_BUDGET, scratch / f"llm-{n}") as proxy:
                    result = ctx.run(argv, tool, scratch, env={LLM_PROXY_SOCKET_ENV: str(proxy.socket_path)},
                                     timeout_s=SECONDS_PER_INPUT)
                usages.append(proxy.usage)
                if result.exit_code != 0:
                    log.warning("%s: the tool exited with %s on hidden input %d: %s", self.name, result.exit_code, n,
                             " | ".join(result.output.strip().splitlines()[-3:])[-300:])
                scores.append(self.check_output(item, outputs, n, corpus))
        self.record_usage(hidden_dir, upstream, usages)
        errors = [error for usage in usages for error in usage.upstream_errors]
        if errors and not any(usage.calls for usage in usages):
            # the endpoint, not the tool, failed: no score rather than a low one
            raise MlabError(f"{self.name}: the LLM endpoint failed on every call while scoring: {errors[0]}")
        return sum(scores) / len(scores)

    def record_usage(self, hidden_dir: Path, upstream: HttpUpstream, usages: list[ProxyUsage]) -> None:
        """One line per scoring in the task's folder: the scorer's model use, never counted as the agent's."""
        total = {key: sum(u.summary()[key] for u in usages) for key in usages[0].summary()} if usages else {}
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "task": self.name,
                 **upstream.describe(), "inputs": len(usages), **total,
                 "per_input": [u.summary() for u in usages]}
        log.info("%s scoring used the LLM: %s", self.name, total)
        try:
            with open(hidden_dir.parent / USAGE_LOG, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
        except OSError as exc:  # a read-only task folder loses the record, not the score
            log.warning("cannot record the scoring's LLM use in %s: %s", hidden_dir.parent / USAGE_LOG, exc)


class BibtexGeneration(ToolTask):
    short = "bibtex-generation"
    name = f"{PACK}/bibtex-generation"
    description = ("Build an LLM tool that adds citations and BibTeX to a paragraph; the scorer runs it on hidden "
                   "paragraphs, higher is better; needs an LLM endpoint at run time")
    files = "bibtex-generation"
    reference = "bibtex-generation"
    tool_script = "bibtex_generation.py"
    read_only_files = ["llm_tool.py", "paper_search.py", "paper_corpus.json", "search_api_reference.txt",
                       "examples/*"]
    research_problem = (
        "Turn bibtex_generation.py into an LLM-based AI system for the task of BibTeX generation (as shipped it "
        "is a placeholder that cites nothing: it writes the paragraph back unchanged with an empty .bib). The "
        "LLM is available through llm_tool.py: call llm_tool.complete(prompt) (run `python llm_tool.py` to try "
        "it). Papers are found with paper_search.py (see search_api_reference.txt): an offline index of real "
        "papers, the only source of references.\n"
        "Given ANY paragraph, e.g. \"We use the method proposed in PromptTuning to train the Transformer "
        "model...\", the system should\n"
        "  - use the LLM to find all phrases and claims in the paragraph that need citations, e.g. PromptTuning "
        "and Transformer;\n"
        "  - search for the right papers with suitable queries and get BibTeX entries for them;\n"
        "  - finally, write the original paragraph with citations, e.g. \"We use the method proposed in "
        "\\cite{lester2021power} to train the Transformer \\cite{...} model...\", together with the BibTeX "
        "entries of the cited papers.\n"
        "Usage: python bibtex_generation.py INPUT.txt OUTPUT_PREFIX writes OUTPUT_PREFIX.tex (the paragraph "
        "with \\cite commands) and OUTPUT_PREFIX.bib (an entry for every cited key). examples/paragraph_N.txt "
        "are examples to try it on (python run_examples.py writes outputs/paragraph_N.tex and .bib). The score "
        "is your tool's: the scorer runs bibtex_generation.py on paragraphs you have not seen, without network, "
        "with the same model behind llm_tool.py and a budget of LLM calls and tokens per paragraph, and checks "
        "that the paragraph is kept, that each paper it mentions is cited right at its mention, and that every "
        "entry's title names a paper of the index. Outputs you write yourself are not scored.")

    def tool_command(self, item: dict, inputs: Path, outputs: Path, n: int) -> list[str]:
        paragraph = inputs / f"paragraph_{n}.txt"
        paragraph.write_text(item["paragraph"], encoding="utf-8")
        return [str(paragraph), str(outputs / f"paragraph_{n}")]

    def check_output(self, item: dict, outputs: Path, n: int, corpus: Corpus) -> float:
        checks = check_bibtex(item["paragraph"], [tuple(c) for c in item["cites"]],
                              read(outputs / f"paragraph_{n}.tex"), read(outputs / f"paragraph_{n}.bib"), corpus)
        return weighted(checks, BIBTEX_WEIGHTS)


class LiteratureReviewTool(ToolTask):
    short = "literature-review-tool"
    name = f"{PACK}/literature-review-tool"
    description = ("Build an LLM tool that writes a literature review; the scorer runs it on hidden queries, "
                   "higher is better; needs an LLM endpoint at run time")
    files = "literature-review-tool"
    reference = "literature-review-tool"
    tool_script = "literature_review.py"
    read_only_files = ["llm_tool.py", "paper_search.py", "paper_corpus.json", "search_api_reference.txt",
                       "examples/*"]
    research_problem = (
        "Turn literature_review.py into a large language model (LLM) based AI system for the task of "
        "literature review (as shipped it is a placeholder that searches nothing and lists no papers). The LLM "
        "is available through llm_tool.py: call llm_tool.complete(prompt) (run `python llm_tool.py` to try "
        "it). Papers are found with paper_search.py (see search_api_reference.txt): an offline index of real "
        "papers with their arXiv ids and abstracts, the only source of papers.\n"
        "Given ANY query on a research topic, e.g. Language model hallucination detection, the system should\n"
        "  - search with suitable queries to get a list of related papers;\n"
        "  - use the LLM to summarize these papers and generate a report. The report should include 1) the list "
        "of papers; 2) the summary of each paper; 3) the conclusion of the literature review.\n"
        "Usage: python literature_review.py \"QUERY\" OUTPUT.md writes the report in Markdown: a section per "
        "paper summary whose heading or text gives the paper's arXiv id (arXiv:ID), and a section headed "
        "Conclusion. examples/queries.txt are queries to try it on (python run_examples.py writes "
        "outputs/review_N.md). The score is your tool's: the scorer runs literature_review.py on queries you "
        "have not seen, without network, with the same model behind llm_tool.py and a budget of LLM calls and "
        "tokens per query, and checks that the report cites at least 3 papers of the index on the query's "
        "topic and no off-topic ones, summarizes each of them, and concludes. Reports you write yourself are "
        "not scored.")

    def tool_command(self, item: dict, inputs: Path, outputs: Path, n: int) -> list[str]:
        return [item["query"], str(outputs / f"review_{n}.md")]

    def check_output(self, item: dict, outputs: Path, n: int, corpus: Corpus) -> float:
        return weighted(check_review(item["relevant"], read(outputs / f"review_{n}.md"), corpus), REVIEW_WEIGHTS)
