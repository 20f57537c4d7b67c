"""The search agent: grows a graph of whole solution scripts, one environment action per step.

The steps go to nodes. The first step takes the data overview (overview_script.py, run by the agent's own code
in the Python REPL: files, starter script, description files, each CSV file's rows, columns and types), which
every prompt shows. Each node is then one step: a Python REPL command that writes the script the operator's
model call returned (to solutions/) and runs it as `python SCRIPT`; its output gives the node's status and
fitness. Without the REPL a node is two steps (Write File, Execute Script) and the overview is List Files and
Read File of the starter. When the run offers Validate Submission (--allow-validate), a node that ran takes one
more step: the harness scores the predictions it wrote for the task's validation split, and that score is its
fitness instead of the metric the script prints.

The number of drafts adapts to the budget (at most DRAFT_SHARE of the nodes the steps allow), so a short run
improves and debugs too. The search ends at max_nodes, when the steps, time, tokens or cost left would not cover
another node and the finish, or when the model gives no usable script; then the best node's script becomes the
task's starter script and runs once more so its submission is in place, and the agent submits with Final Answer.
"""
from __future__ import annotations

import math
import random
import re
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field

from mlab.core import VALIDATE_SUBMISSION, Action, Agent, AgentContext, Message, RunState, Step, StopRun
from mlab.core.agentkit import (
    MAX_ATTEMPTS,
    AgentOptions,
    InvalidResponse,
    ask_until_valid,
    pick_actions,
    research_problem,
    truncate_middle,
)

from . import prompts
from .fitness import METRIC_TAG, infer_direction, read_outcome, read_validated
from .graph import FAILED, Node, SolutionGraph
from .policies import POLICIES, Proposal, Settings

USED_ACTIONS = ["List Files", "Read File", "Write File", "Execute Script", "Final Answer"]
REPL = "Python REPL"  # writes and runs a script in one step, and takes the overview in one
SCRIPT_DIR = "solutions"
FINISH_TIME_MARGIN_S = 60.0  # besides two of the longest runs so far: one more node and the final run
DRAFT_SHARE = 0.4  # of the nodes the budget allows, at most, go to drafts: the rest improve and debug
BUDGET_MARGIN = 1.5  # another model call is made only while this many of the largest call so far fit the budget
OVERVIEW_CHARS = 24_000
STARTER_CHARS = 8_000
LISTING_CHARS = 3_000
RESULT_LINES = 30  # nodes listed under "Results so far", the newest
_CODE_BLOCK = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
# "Plan:", "**Plan:**" or "## Plan" heading a reply's plan: memory and prompts label the plan themselves
_PLAN_LABEL = re.compile(r"\A(?:[*_\s]*plan[*_\s]*:|\s*#+[ \t]*plan[ \t]*:?[ \t]*(?=\n))[*_\s]*", re.IGNORECASE)
Stage = Literal["list", "read", "search", "finish-write", "finish-run", "answer"]
_OVERVIEW = (Path(__file__).with_name("overview_script.py")).read_text(encoding="utf-8")


class SearchOptions(AgentOptions):
    policy: Literal["greedy", "mcts", "evolutionary"] = Field(
        "greedy", description="how the next node is chosen: greedy (AIDE-like), mcts (UCT) or evolutionary")
    num_drafts: int = Field(5, ge=1, description="drafts written before any other operator (greedy, mcts), at "
                                                "most 40% of the nodes the run's steps allow")
    max_debug_depth: int = Field(3, ge=0, description="debug operators in a row on one failing line of nodes")
    max_nodes: int = Field(20, ge=1, description="nodes (scripts written and run) before the search ends")
    exploration_constant: float = Field(1.414, ge=0, allow_inf_nan=False,
                                        description="UCT's exploration constant (mcts)")
    population_size: int = Field(4, ge=2, description="initial drafts and population kept (evolutionary), at "
                                                     "most 40% of the nodes the run's steps allow (at least 2)")
    direction: Literal["auto", "higher", "lower"] = Field(
        "auto", description="which way the task's metric is better; auto reads it from the task's text")
    output_chars: int = Field(4_000, ge=200, description="characters of a script's output shown to the model")
    max_attempts: int = Field(MAX_ATTEMPTS, ge=1, description="replies to try before the search gives up")


class SearchAgent(Agent):
    name = "search"
    description = ("Search over whole solution scripts (draft, improve, debug, crossover) with a greedy "
                   "(AIDE-like), MCTS or evolutionary policy; submits the best node.")
    Options: ClassVar[type[AgentOptions]] = SearchOptions

    def __init__(self, ctx: AgentContext):
        super().__init__(ctx)
        opts = self.options
        assert isinstance(opts, SearchOptions)
        self.opts = opts
        pick_actions(USED_ACTIONS, "(the actions the search agent needs)", ctx.actions)
        inferred = infer_direction(ctx.research_problem) if opts.direction == "auto" else opts.direction
        self.direction_known = inferred is not None
        self.settings = Settings(num_drafts=opts.num_drafts, max_debug_depth=opts.max_debug_depth,
                                 exploration_constant=opts.exploration_constant,
                                 population_size=opts.population_size)
        self.task_text = prompts.for_script_writer(research_problem(ctx, USED_ACTIONS))
        # The harness's validation score is the fitness when the run offers it.
        self.validate_spec = ctx.actions.get(VALIDATE_SUBMISSION)
        self.repl = REPL in ctx.actions
        self.node_steps = (1 if self.repl else 2) + (1 if self.validate_spec else 0)
        self.look_steps = 1 if self.repl else 2
        self.finish_steps = 2 if self.repl else 3  # (Write File,) run the best as the starter, Final Answer
        self.largest_call = (0, 0.0)  # the most tokens and cost one operator's model calls took so far
        # Memory (state_dict): the graph, where the search is, and the steps that looked at the task.
        self.graph = SolutionGraph(direction="lower" if inferred == "lower" else "higher")
        self.stage: Stage = "list"
        self.look: dict[str, int] = {}
        self.stopped = ""

    # ---- the step -------------------------------------------------------------------------------
    def step(self, state: RunState) -> Action | StopRun:
        steps = {s.index: s for s in state.history}
        self._absorb(steps)
        if self.stage == "list" and self.repl:
            self.stage, self.look["overview"] = "search", state.step_index
            command = f"{_OVERVIEW}\n_mlab_overview({self.ctx.starter_script!r})\ndel _mlab_overview\n"
            return Action(name=REPL, args={"command": command}, entries={"overview": "the data overview"})
        if self.stage == "list":
            self.stage, self.look["listing"] = "read", state.step_index
            return Action(name="List Files", args={"dir_path": "."})
        if self.stage == "read":
            self.stage, self.look["starter"] = "search", state.step_index
            return Action(name="Read File", args={"file_name": self.ctx.starter_script})
        if self.stage == "search":
            action = self._search(state, steps)
            if action is not None:
                return action
            self.stage = "finish-write"
        return self._finish(state, steps)

    def _absorb(self, steps: dict[int, Step]) -> None:
        """Give every node whose run (and validation) is in the history its status and fitness."""
        for node in self.graph.nodes:
            if node.status != "pending" or node.run_step is None or node.run_step not in steps:
                continue
            run = steps[node.run_step]
            outcome = read_outcome(run.observation, run.is_error, need_metric=not self.validate_spec)
            if self.validate_spec and outcome.status == "ok":
                if node.validate_step is None or node.validate_step not in steps:
                    continue  # ran: its validation is the next step
                validated = steps[node.validate_step]
                outcome, direction = read_validated(validated.observation, validated.is_error)
                if direction is not None:  # the harness knows which way the task's metric points
                    self.graph.direction, self.direction_known = direction, True  # type: ignore[assignment]
            node.status, node.fitness, node.error = outcome.status, outcome.fitness, outcome.error  # type: ignore[assignment]

    def _search(self, state: RunState, steps: dict[int, Step]) -> Action | None:
        pending = next((n for n in self.graph.nodes if n.status == "pending"), None)
        if self.validate_spec and pending is not None and pending.run_step is not None:  # ran well: validate it
            pending.validate_step = state.step_index
            return Action(name=VALIDATE_SUBMISSION, args={"predictions_file": self._predictions_file(pending.id)},
                          entries={"node": pending.id, "graph": self.graph.table()})
        if pending is not None and pending.run_step is None:
            written = steps.get(pending.write_step)
            if written is not None and not written.is_error:
                pending.run_step = state.step_index
                return Action(name="Execute Script", args={"script_name": pending.file},
                              entries={"node": pending.id, "graph": self.graph.table()})
            first_line = (written.observation.strip().splitlines() or ["?"])[0] if written else "?"
            pending.status, pending.error = "buggy", f"could not be written: {first_line[:150]}"
        self.stopped = self._stop_reason(state, steps)
        if self.stopped:
            return None
        proposal = POLICIES[self.opts.policy](self.graph, self._settings(state.max_steps),
                                              random.Random(f"{self.ctx.seed}:{len(self.graph.nodes)}"))
        return self._grow(proposal, state, steps)

    def _stop_reason(self, state: RunState, steps: dict[int, Step]) -> str:
        if len(self.graph.nodes) >= self.opts.max_nodes:
            return f"reached max_nodes ({self.opts.max_nodes})"
        steps_left = state.max_steps - state.step_index + 1
        if steps_left < self.node_steps + self.finish_steps:
            return f"{steps_left} steps left: only enough to submit the best node"
        llm, (tokens, cost) = self.llm, self.largest_call
        if llm.max_tokens is not None and llm.usage.total_tokens + BUDGET_MARGIN * tokens > llm.max_tokens:
            return (f"{llm.usage.total_tokens} of the {llm.max_tokens} tokens used (--token-limit): not enough "
                    "for another node")
        if llm.max_cost is not None and llm.usage.cost_usd + BUDGET_MARGIN * cost > llm.max_cost:
            return f"${llm.usage.cost_usd:.4f} of ${llm.max_cost:g} spent (--cost-limit): not enough for another node"
        max_calls = llm.max_calls
        if max_calls is not None and llm.usage.calls >= max_calls:
            return f"{llm.usage.calls} of the {max_calls} model calls made (--max-calls): no call left for a node"
        longest = max((steps[n.run_step].duration_s for n in self.graph.nodes
                       if n.run_step is not None and n.run_step in steps), default=0.0)
        if state.seconds_left < 2 * longest + FINISH_TIME_MARGIN_S:
            return f"{state.seconds_left:.0f} s left: only enough to submit the best node"
        return ""

    def _settings(self, max_steps: int) -> Settings:
        """The policy's settings, with the drafts (population) cut to a share of the nodes the steps allow."""
        nodes = max(1, min(self.opts.max_nodes, (max_steps - self.look_steps - self.finish_steps) // self.node_steps))
        share = max(1, math.ceil(DRAFT_SHARE * nodes))
        return Settings(num_drafts=min(self.settings.num_drafts, share),
                        max_debug_depth=self.settings.max_debug_depth,
                        exploration_constant=self.settings.exploration_constant,
                        population_size=min(self.settings.population_size, max(2, share)))

    def _grow(self, proposal: Proposal, state: RunState, steps: dict[int, Step]) -> Action | None:
        """One operator: its model call, and the step that writes (and, with the REPL, runs) the new script."""
        messages = [Message(role="system", content=self._context(steps)),
                    Message(role="user", content=self._ask(proposal, steps))]
        before = (self.llm.usage.total_tokens, self.llm.usage.cost_usd)
        result = ask_until_valid(self.llm, messages, self._parse, prompts.correction, self.opts.max_attempts)
        spent = (self.llm.usage.total_tokens - before[0], self.llm.usage.cost_usd - before[1])
        self.largest_call = (max(self.largest_call[0], spent[0]), max(self.largest_call[1], spent[1]))
        for failure in result.failures:
            self.ctx.log(f"step {state.step_index}: unusable reply to {proposal.operator}, asked again: "
                         f"{failure['problem']}")
        if not result.ok:
            self.stopped = (f"the model gave no usable script for {proposal.operator} in "
                            f"{len(result.failures)} replies (the last: {result.failures[-1]['problem']})")
            return None
        plan, code = result.value
        node = self.graph.add(proposal.operator, list(proposal.parents),
                              f"{SCRIPT_DIR}/node_{len(self.graph.nodes) + 1:03d}.py", state.step_index,
                              prompts.clip(plan, prompts.PLAN_CHARS))
        entries: dict[str, Any] = {"node": node.id, "operator": node.operator, "parents": node.parents,
                                   "plan": plan, "graph": self.graph.table()}
        if result.failures:
            entries["invalid_responses"] = result.failures
        if self.repl:
            node.run_step = state.step_index
            return Action(name=REPL, args={"command": prompts.write_and_run(node.file, code)},
                          entries={**entries, "script": code}, raw_response=result.text)
        return Action(name="Write File", args={"file_name": node.file, "content": code}, entries=entries,
                      raw_response=result.text)

    def _finish(self, state: RunState, steps: dict[int, Step]) -> Action:
        best = self.graph.best()
        starter = self.ctx.starter_script
        entries: dict[str, Any] = {"best": best.id if best else None, "graph": self.graph.table()}
        if self.stage == "finish-write":
            self.stage = "finish-run"
            if best is not None and self.repl:
                self.stage, self.look["submit_run"] = "answer", state.step_index
                return Action(name=REPL, args={"command": prompts.write_and_run(starter, self._code(best, steps))},
                              entries=entries)
            if best is not None:
                self.look["submit_write"] = state.step_index
                return Action(name="Write File", args={"file_name": starter, "content": self._code(best, steps)},
                              entries=entries)
        if self.stage == "finish-run":
            self.stage, self.look["submit_run"] = "answer", state.step_index
            return Action(name="Execute Script", args={"script_name": starter}, entries=entries)
        return Action(name="Final Answer", args={"final_answer": self._summary(best, steps)}, entries=entries)

    # ---- prompts ----------------------------------------------------------------------------------
    def _context(self, steps: dict[int, Step]) -> str:
        validation = (self._validation_inputs(), self._predictions_file(len(self.graph.nodes) + 1)) \
            if self.validate_spec else None
        direction = self.graph.direction if self.direction_known else None
        overview = steps.get(self.look.get("overview", 0))
        if overview is not None:
            return prompts.context(self.task_text, truncate_middle(overview.observation.strip(), OVERVIEW_CHARS),
                                   direction, validation)
        listing = steps.get(self.look.get("listing", 0))
        starter = steps.get(self.look.get("starter", 0))
        shown = prompts.listing_and_starter(
            truncate_middle(listing.observation.strip(), LISTING_CHARS) if listing else "(not listed)",
            self.ctx.starter_script,
            truncate_middle(starter.observation, STARTER_CHARS) if starter and not starter.is_error
            else "(there is none)")
        return prompts.context(self.task_text, shown, direction, validation)

    def _validation_inputs(self) -> str:
        """The file of validation inputs the run's Validate Submission names (its description says "The inputs
        are FILE (...)")."""
        assert self.validate_spec is not None
        found = re.search(r"The inputs are (\S+) \(", self.validate_spec.description)
        return found.group(1) if found else "the validation inputs file"

    @staticmethod
    def _predictions_file(node_id: int) -> str:
        """Where node node_id's script writes its predictions for the validation split: its own file, so a
        script that writes none is never scored on an earlier node's."""
        return f"{SCRIPT_DIR}/node_{node_id:03d}_valid.csv"

    def _ask(self, proposal: Proposal, steps: dict[int, Step]) -> str:
        results = self._results()
        parents = [self.graph.node(i) for i in proposal.parents]
        if proposal.operator == "draft":
            return prompts.draft(results)
        if proposal.operator == "debug":
            node = parents[0]
            problem = "it ran past the time limit" if node.status == "timeout" else f"{node.error}"
            return prompts.debug(self._code(node, steps), self._output(node, steps), problem)
        if proposal.operator == "improve":
            node = parents[0]
            assert node.fitness is not None
            return prompts.improve(self._code(node, steps), self._output(node, steps), node.fitness, results,
                                   prompts.score_name(bool(self.validate_spec)))
        first, second = parents
        assert first.fitness is not None and second.fitness is not None
        return prompts.crossover((self._code(first, steps), first.fitness),
                                 (self._code(second, steps), second.fitness), results,
                                 prompts.score_name(bool(self.validate_spec)))

    def _results(self) -> str:
        lines = []
        best = self.graph.best()
        for n in [n for n in self.graph.nodes if n.evaluated][-RESULT_LINES:]:
            origin = n.operator + (f" of node {' and '.join(map(str, n.parents))}" if n.parents else "")
            score = prompts.score_name(bool(self.validate_spec))
            outcome = f"{score} {n.fitness:g}" if n.status == "ok" else f"{n.status}: {n.error}"
            mark = " (the best so far)" if best is not None and n.id == best.id else ""
            lines.append(f"- node {n.id} ({origin}): {outcome}{mark}. Plan: {n.plan or '(none given)'}")
        return "\n".join(lines) or "(none yet)"

    def _code(self, node: Node, steps: dict[int, Step]) -> str:
        """The node's script, which the trace keeps: the content of its Write File step, or the script its REPL
        step wrote."""
        action = steps[node.write_step].action
        return str(action.entries.get("script") if action.name == REPL else action.args.get("content", ""))

    def _output(self, node: Node, steps: dict[int, Step]) -> str:
        run = steps.get(node.run_step or 0)
        return truncate_middle(run.observation.strip(), self.opts.output_chars) if run else "(no output)"

    def _parse(self, text: str) -> tuple[str, str]:
        """(plan, script) from a reply: the longest fenced code block, which must be valid Python."""
        blocks = _CODE_BLOCK.findall(text)
        if not blocks:
            raise InvalidResponse("the reply has no complete ```python code block holding the whole script")
        code = max(blocks, key=len).strip("\n") + "\n"
        try:
            compile(code, "solution.py", "exec")
        except SyntaxError as exc:
            raise InvalidResponse(f"the script is not valid Python: {exc.msg} (line {exc.lineno})") from None
        except ValueError as exc:  # e.g. a NUL character
            raise InvalidResponse(f"the script is not valid Python: {exc}") from None
        plan = _PLAN_LABEL.sub("", text[: text.find("```")].strip(), count=1).strip()
        return plan, code

    def _summary(self, best: Node | None, steps: dict[int, Step]) -> str:
        ok = len(self.graph.ok())
        failed = sum(n.status in FAILED for n in self.graph.nodes)
        starter = self.ctx.starter_script
        text = (f"{self.opts.policy} search over {len(self.graph.nodes)} solution scripts ({ok} worked, "
                f"{failed} failed); stopped because {self.stopped or 'the search ended'}.")
        if best is None:
            text += f" No script reported a validation score, so the starter script {starter} was run instead."
        else:
            got = "scored" if self.validate_spec else f"reported {METRIC_TAG}"
            text += (f" The best, node {best.id} ({best.operator}), {got} {best.fitness:g}"
                     f"{' on the validation split' if self.validate_spec else ''} ({self.graph.direction} is "
                     f"better). Its plan: {best.plan}")
            write = steps.get(self.look.get("submit_write", 0))
            if write is not None and write.is_error:
                return f"{text} It could not be written over {starter}: {write.observation.strip()[:200]}"
            text += f" It is now {starter}"
        run = steps.get(self.look.get("submit_run", 0))
        outcome = read_outcome(run.observation, run.is_error, need_metric=False) if run is not None else None
        if outcome is not None and outcome.status != "ok":
            return f"{text}; its final run failed: {outcome.error}"
        return f"{text}{'' if best is None else ', and was run again to write the submission.'}"

    # ---- state ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "look": dict(self.look), "stopped": self.stopped,
                "largest_call": list(self.largest_call), "graph": self.graph.state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stage = state.get("stage", "list")
        tokens, cost = state.get("largest_call", (0, 0.0))
        self.largest_call = (int(tokens), float(cost))
        self.look = {k: int(v) for k, v in state.get("look", {}).items()}
        self.stopped = state.get("stopped", "")
        if "graph" in state:
            self.graph = SolutionGraph.from_state(state["graph"])


class AideOptions(SearchOptions):
    policy: Literal["greedy"] = Field("greedy", description="always greedy: aide is search with policy greedy")


class AideAgent(SearchAgent):
    name = "aide"
    description = "AIDE-like greedy tree search over whole solution scripts: the search agent with policy greedy."
    Options = AideOptions
