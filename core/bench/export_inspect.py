"""Runs as Inspect AI eval logs (`mlab export --format inspect`), written with inspect_ai's own log API.

One log per (task, agent, model); each run is a sample of it, its seed an epoch. The sample's messages are the
first prompt and then, per step, the agent's reply (with the step's action as a tool call) and the observation
(as the tool's answer); every model call is a model event with its whole prompt, every action a tool event. A
model's own tool calls, the results sent back and the tools offered are Inspect's tool calls, tool messages and
tool infos. The
scores are the run's verdict as `mlab report` judges it (verdict.RunJudge, or judge_runs for a bench, which
reads its results.db as the report does), never worked out here; usage is the model call log's, per model.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from mlab.core.bench.export_chat import Warn, exported_calls, quiet
from mlab.core.bench.results import ResultsDB, judge_runs
from mlab.core.bench.run_folders import is_bench, runs_in
from mlab.core.bench.verdict import Judged, RunJudge, spent, success_text
from mlab.core.errors import MlabError
from mlab.core.run.task_lookup import task_of_run
from mlab.core.run.task_params import labelled
from mlab.core.run.taskdata import TaskHome
from mlab.core.run.trace import read_trace

if TYPE_CHECKING:
    from inspect_ai.log import EvalLog, EvalSample
    from inspect_ai.model import ChatMessage, ModelUsage
    from inspect_ai.tool import ToolCall, ToolInfo

    from mlab.core.models import Trace
    from mlab.core.plugins.registry import Registry

NEEDS = "the Inspect export needs inspect-ai: pip install 'mlab[inspect]'"
SCORER = "mlab"
SCORE_NAMES = ("final_score", "improvement", "success", "valid")
NO_MODEL = "none"  # the model of runs whose agent used none (the baseline agent)


@dataclass
class ExportedRun:
    run_dir: Path
    trace: Trace
    score: float | None
    score_error: str | None
    judged: Judged
    problem: str  # the task's research problem: the sample's input
    task: str  # as reports name it (task_params.labelled): runs of other -T values are another task's


def gather(path: Path, registry: Registry | None = None) -> list[ExportedRun]:
    """The runs PATH stands for, each with its verdict: a bench's as its results.db judges them (the report's
    numbers), any other run's by verdict.RunJudge."""
    from mlab.core.plugins.registry import load_registry

    registry = registry or load_registry()
    home = TaskHome.from_env()
    path = Path(path)
    runs: list[ExportedRun] = []
    if is_bench(path):
        with ResultsDB.open_existing(path, read_only=True) as db:
            rows, judged = db.runs(), judge_runs(db, home)
        for row in sorted(rows, key=lambda r: str(r["key"])):
            run_dir = path / str(row["run_dir"])
            if not os.path.lexists(run_dir / "trace.json"):
                continue  # never started: nothing to show (a link there is refused by read_trace)
            trace = read_trace(run_dir)
            runs.append(ExportedRun(run_dir, trace, row["final_score"], row["final_score_error"],
                                    judged[row["key"]], _problem(registry, trace, str(row["task"])), str(row["task"])))
        return runs
    judge = RunJudge(home)
    for run_dir in runs_in(path):
        trace = read_trace(run_dir)
        try:
            task = task_of_run(registry, trace.config)
        except Exception:  # a task not installed here: its baseline and rule cannot be known
            raise MlabError(f"{run_dir}: task {trace.config.task!r} is not installed, so its runs cannot be "
                            "judged") from None
        runs.append(ExportedRun(run_dir, trace, trace.final_score, trace.final_score_error,
                                judge.judge(run_dir, task, trace.final_score), task.research_problem,
                                labelled(task)))
    return runs


def _problem(registry: Registry, trace: Trace, task_name: str) -> str:
    """The research problem of the task the run ran: its folder's or the registered one, with its -T values."""
    try:
        return str(task_of_run(registry, trace.config).research_problem)
    except Exception:  # a bench run with a registry of its own (--registry), a folder gone: the name says what
        return f"mlab task {task_name}"


def export(path: Path, out_dir: Path, registry: Registry | None = None, warn: Warn = quiet) -> list[Path]:
    """Write PATH's runs as Inspect logs in out_dir, one per (task, agent, model); returns the files written. warn
    gets a line per run file not read."""
    try:
        from inspect_ai.log import write_eval_log
    except ImportError:
        raise MlabError(NEEDS) from None
    groups: dict[tuple[str, str, str], list[ExportedRun]] = defaultdict(list)
    for run in gather(path, registry):
        config = run.trace.config
        groups[(run.task, config.agent, config.llm or NO_MODEL)].append(run)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for (task, agent, model), runs in sorted(groups.items()):
        log = eval_log(task, agent, model, sorted(runs, key=lambda r: (r.trace.config.seed, str(r.run_dir))), warn)
        target = out_dir / log_name(log.eval.created, task, agent, model)
        write_eval_log(log, target)
        written.append(target)
    return written


def log_name(created: str, task: str, agent: str, model: str) -> str:
    """Inspect's own pattern, TIME_TASK_ID.eval, with the agent and model in the task part; the id is the log's
    task_id, which `inspect view` groups retries by, so each agent and model is a task of its own there."""
    stamp = created.replace(":", "-")
    shown = model.rstrip("/").rsplit("/", 1)[-1] or model  # a model served from a path: its name, not the path
    slug = re.sub(r"[^A-Za-z0-9.-]+", "-", f"{task}-{agent}-{shown}").strip("-")[:120]
    return f"{stamp}_{slug}_{_id(task, agent, model)}.eval"


def _id(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:22]


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat(timespec="seconds")


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def eval_log(task: str, agent: str, model: str, runs: list[ExportedRun], warn: Warn = quiet) -> EvalLog:
    """The Inspect log of one (task, agent, model): each run a sample, its seed the epoch."""
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalLog,
        EvalMetric,
        EvalPlan,
        EvalPlanStep,
        EvalResults,
        EvalScore,
        EvalSpec,
        EvalStats,
    )

    samples = [sample(run, epoch, warn) for epoch, run in enumerate(runs, start=1)]
    first = runs[0].trace
    started = min(r.trace.started_at for r in runs)
    ended = max(r.trace.started_at + r.trace.total_time_s for r in runs)
    created = _iso(started)
    scores = []
    for name in SCORE_NAMES:
        values = [s.scores[name].value for s in samples if s.scores and name in s.scores]
        numbers = [float(v) for v in values if isinstance(v, (int, float))]
        metrics = {"mean": EvalMetric(name="mean", value=sum(numbers) / len(numbers))} if numbers else {}
        scores.append(EvalScore(name=name, scorer=SCORER, scored_samples=len(values),
                                unscored_samples=len(samples) - len(values), metrics=metrics))
    spec = EvalSpec(
        eval_id=_id(task, agent, model, *(r.trace.run_id for r in runs)), run_id=_id("mlab-export", created),
        created=created, task=task, task_id=_id(task, agent, model), task_version=0,
        tags=sorted({tag for r in runs for tag in r.trace.config.tags}),  # the runs' --tag; the agent is the solver
        dataset=EvalDataset(name=task, samples=1, sample_ids=[task]),
        solver=agent, solver_args=dict(first.config.agent_options), model=model,
        config=EvalConfig(epochs=len(runs), message_limit=None),
        packages={k: v for k, v in first.plugin_versions.items() if isinstance(v, str)},
        metadata={"source": "mlab export", "agent": agent, "llm": first.config.llm, "sandbox": first.config.sandbox,
                  "max_steps": first.config.max_steps},
    )
    usage = _sum_usage([s.model_usage for s in samples])
    errors = sum(1 for s in samples if s.error is not None)
    return EvalLog(
        status=_log_status([r.trace.status for r in runs], [s.error for s in samples]), eval=spec,
        plan=EvalPlan(name=agent, steps=[EvalPlanStep(solver=agent, params=dict(first.config.agent_options))]),
        results=EvalResults(total_samples=len(samples), completed_samples=len(samples) - errors, scores=scores),
        stats=EvalStats(started_at=created, completed_at=_iso(ended), model_usage=usage),
        samples=samples,
    )


def sample(run: ExportedRun, epoch: int, warn: Warn = quiet) -> EvalSample:
    """One run as an Inspect sample: messages, model and tool events, scores, usage."""
    from inspect_ai.log import EvalError, EvalSample
    from inspect_ai.model import ModelOutput
    from inspect_ai.scorer import Score

    trace, verdict = run.trace, run.judged.verdict
    calls = exported_calls(run.run_dir, warn)
    messages = conversation(run, calls)
    events = [event for _key, event in sorted(model_events(trace, calls) + tool_events(trace, calls),
                                               key=lambda pair: pair[0])]
    figures: dict[str, Any] = {"final_score": run.score, "improvement": verdict.improvement,
                               "success": verdict.success, "valid": verdict.valid}
    explanation = success_text(run.judged) + (f"; no score: {run.score_error}" if run.score_error else "")
    scores = {name: Score(value=value, explanation=explanation, metadata=run.judged.fields())
              for name, value in figures.items() if value is not None}
    last = next((m for m in reversed(messages) if m.role == "assistant"), None)
    model = trace.config.llm or NO_MODEL
    failed = trace.status != "finished"
    return EvalSample(
        id=run.task, epoch=epoch, input=run.problem, target="",
        messages=messages, output=ModelOutput.from_content(model, last.text if last else ""),
        scores=scores, events=events, model_usage=usage_by_model(calls),
        metadata={"run_dir": str(run.run_dir), "run_id": trace.run_id, "seed": trace.config.seed,
                  "status": trace.status, "end_reason": trace.end_reason, "score": run.score,
                  "score_error": run.score_error, **run.judged.fields(), **spent(trace)},
        started_at=_iso(trace.started_at), completed_at=_iso(trace.started_at + trace.total_time_s),
        total_time=round(trace.total_time_s, 3), working_time=round(trace.total_time_s, 3),
        error=EvalError(message=_failure(run), traceback="", traceback_ansi="") if failed else None,
    )


INTERRUPTED = "interrupted: its process ended before the run did (mlab run --resume continues it)"
GOING = "still running"


def _failure(run: ExportedRun) -> str:
    """Why a run that did not finish has no result: its end reason, or whether its process is gone."""
    from mlab.core.view.live import run_in_progress

    trace = run.trace
    if trace.status != "running":
        return trace.end_reason or trace.status
    return GOING if run_in_progress(run.run_dir) else INTERRUPTED


def _log_status(statuses: list[str], errors: list[Any]) -> Literal["started", "success", "cancelled"]:
    """Inspect's status of a log: started while a run goes on, cancelled when one was interrupted (killed), else
    success (a run that failed is a sample with an error, as in Inspect)."""
    messages = [e.message for status, e in zip(statuses, errors, strict=True) if status == "running" and e]
    if GOING in messages:
        return "started"
    return "cancelled" if messages else "success"


def chat(raw: dict[str, Any], names: dict[str, str] | None = None) -> ChatMessage:
    """A logged message (Message.record()) as Inspect's; names: the tool of each call id seen so far, which a tool
    result is named by (and which an assistant's calls add to)."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageSystem, ChatMessageTool, ChatMessageUser

    names = {} if names is None else names
    role, content = str(raw.get("role", "user")), _content(raw)
    if role == "system":
        return ChatMessageSystem(content=content)
    if role == "assistant":
        calls = tool_calls(raw.get("tool_calls"))
        names.update({c.id: c.function for c in calls})
        return ChatMessageAssistant(content=content, tool_calls=calls or None)
    if role == "tool":
        call_id = str(raw.get("tool_call_id") or "")
        return ChatMessageTool(content=content, tool_call_id=call_id, function=names.get(call_id))
    return ChatMessageUser(content=content)


def chats(raws: Any) -> list[ChatMessage]:
    names: dict[str, str] = {}
    return [chat(m, names) for m in raws or [] if isinstance(m, dict)]


def _content(raw: dict[str, Any]) -> Any:
    """The text, or with image parts the parts in order as Inspect's content."""
    from inspect_ai.model import ContentImage, ContentText

    parts = raw.get("parts")
    if isinstance(parts, list) and any(isinstance(p, dict) and p.get("type") == "image" for p in parts):
        return [ContentImage(image=str(p.get("image_url", ""))) if p.get("type") == "image"
                else ContentText(text=str(p.get("text", ""))) for p in parts if isinstance(p, dict)]
    return str(raw.get("content", ""))


def tool_calls(raws: Any) -> list[ToolCall]:
    """Logged tool calls ({id, name, arguments as JSON text}) as Inspect's, whose arguments are a dict: text that is
    no JSON object gives {} and a parse_error quoting it."""
    from inspect_ai.tool import ToolCall

    calls = []
    for raw in raws or []:
        if not isinstance(raw, dict):
            continue
        text = str(raw.get("arguments") or "{}")
        try:
            arguments = json.loads(text)
            error = None if isinstance(arguments, dict) else "the arguments are no JSON object"
        except ValueError as exc:
            arguments, error = None, str(exc)
        calls.append(ToolCall(id=str(raw.get("id", "")), function=str(raw.get("name", "")),
                              arguments=arguments if error is None else {},
                              parse_error=f"{error}: {text}" if error else None))
    return calls


def tool_infos(params: dict[str, Any]) -> list[ToolInfo]:
    """The tools a call offered (OpenAI's function shape); parameters Inspect's model cannot hold are left out
    (the call's params keep them)."""
    from inspect_ai.tool import ToolInfo, ToolParams
    from pydantic import ValidationError

    infos = []
    for tool in params.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not function.get("name"):
            continue
        try:
            parameters = ToolParams.model_validate(function.get("parameters") or {})
        except ValidationError:
            parameters = ToolParams()
        infos.append(ToolInfo(name=str(function["name"]), description=str(function.get("description") or ""),
                              parameters=parameters))
    return infos


def _tool_choice(params: dict[str, Any]) -> Any:
    """OpenAI's tool_choice as Inspect's: none without tools (a text call), auto when unsaid."""
    from inspect_ai.tool import ToolFunction

    if not params.get("tools"):
        return "none"
    choice = params.get("tool_choice") or "auto"
    if isinstance(choice, dict):
        return ToolFunction(name=str((choice.get("function") or {}).get("name", "")))
    if choice == "required":
        return "any"
    return choice if choice in ("auto", "none") else "auto"


STOP_REASONS: dict[str, Literal["tool_calls", "max_tokens", "content_filter"]] = {
    "tool_calls": "tool_calls", "length": "max_tokens", "content_filter": "content_filter"}


def conversation(run: ExportedRun, calls: list[dict[str, Any]]) -> list[ChatMessage]:
    """The run as one conversation: the first main prompt (else the task's problem), then per step the agent's
    reply with its action as a tool call and the observation as the tool's answer."""
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall, ToolCallError

    first = next((c for c in calls if c.get("role") == "main" and c.get("messages")), None)
    messages: list[ChatMessage] = chats(first["messages"]) if first else [ChatMessageUser(content=run.problem)]
    model = run.trace.config.llm
    names: dict[str, str] = {}
    for step in run.trace.steps:
        call_id = f"step-{step.index}"
        action = step.action
        # a model call's step (program agents): the tool results sent back, then the model's own tool calls
        sent = action.args.get("messages")
        sent = sent if isinstance(sent, list) else []
        messages += [chat(m, names) for m in sent if isinstance(m, dict) and m.get("role") == "tool"]
        asked = tool_calls(action.args.get("tool_calls"))
        names.update({c.id: c.function for c in asked})
        messages.append(ChatMessageAssistant(
            content=action.raw_response or "", model=model,
            tool_calls=[*asked, ToolCall(id=call_id, function=action.name, arguments=dict(action.args))],
            metadata={"step": step.index, "entries": action.entries} if action.entries else {"step": step.index}))
        messages.append(ChatMessageTool(
            content=step.observation, tool_call_id=call_id, function=action.name,
            error=ToolCallError(type="unknown", message=step.observation[:500]) if step.is_error else None))
    return messages


def _step_of(trace: Trace, call: dict[str, Any]) -> int:
    """The step a call was made for: its own tag, else the last step begun before it (0: before any)."""
    if isinstance(call.get("step"), int):
        return int(call["step"])
    begun = [s.index for s in trace.steps if s.started_at <= float(call.get("time") or 0.0)]
    return begun[-1] if begun else 0


def model_events(trace: Trace, calls: list[dict[str, Any]]) -> list[tuple[tuple[int, float], Any]]:
    """Every model call, whatever its role (main, fast, edit), as a model event with its whole prompt, keyed by
    (step, start) so that a step's calls come before the action they chose."""
    from inspect_ai.event import ModelEvent
    from inspect_ai.model import GenerateConfig, ModelOutput, ModelUsage

    events = []
    for call in calls:
        model = str(call.get("model") or NO_MODEL)
        latency = float(call.get("latency_s") or 0.0)
        ended = float(call.get("time") or 0.0)
        error = str(call["error"]) if call.get("error") else None
        params: dict[str, Any] = call["params"] if isinstance(call.get("params"), dict) else {}
        output = ModelOutput.from_content(model, str(call.get("completion") or ""), error=error,
                                          stop_reason=STOP_REASONS.get(str(call.get("finish_reason")), "stop"))
        output.choices[0].message.tool_calls = tool_calls(call.get("tool_calls")) or None
        output.usage = _usage(call) if _answered(call) else ModelUsage()
        event = ModelEvent(
            model=model, role=str(call.get("role") or "main"), input=chats(call.get("messages")),
            tools=tool_infos(params), tool_choice=_tool_choice(params), config=GenerateConfig(), output=output,
            error=error,
            cache="read" if call.get("cached") else None, retries=len(call.get("retries") or []) or None,
            timestamp=_at(ended - latency), completed=_at(ended), working_time=latency,
            metadata={"step": call.get("step"), "params": call.get("params") or {}})
        events.append(((_step_of(trace, call), ended - latency), event))
    return events


def tool_events(trace: Trace, calls: list[dict[str, Any]]) -> list[tuple[tuple[int, float], Any]]:
    """Every step's action and observation as a tool event, begun when the step's last main call ended (the
    step's own start covers the agent's thinking too)."""
    from inspect_ai.event import ToolEvent
    from inspect_ai.tool import ToolCallError

    chose: dict[int, float] = {}
    for call in calls:
        if call.get("role") == "main" and isinstance(call.get("step"), int):
            chose[call["step"]] = max(chose.get(call["step"], 0.0), float(call.get("time") or 0.0))
    events = []
    for s in trace.steps:
        ended = s.started_at + s.duration_s
        begun = min(max(s.started_at, chose.get(s.index, 0.0)), ended)
        event = ToolEvent(id=f"step-{s.index}", function=s.action.name, arguments=dict(s.action.args),
                          result=s.observation,
                          error=ToolCallError(type="unknown", message=s.observation[:500]) if s.is_error else None,
                          timestamp=_at(begun), completed=_at(ended), working_time=ended - begun,
                          metadata={"step": s.index, "snapshot": s.snapshot})
        events.append(((s.index, begun), event))
    return events


def _answered(call: dict[str, Any]) -> bool:
    return call.get("error") is None and call.get("completion") is not None


def _usage(call: dict[str, Any]) -> ModelUsage:
    from inspect_ai.model import ModelUsage

    prompt, completion = int(call.get("prompt_tokens") or 0), int(call.get("completion_tokens") or 0)
    cost = call.get("cost_usd")
    return ModelUsage(input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion,
                      total_cost=float(cost) if cost is not None else None)


def usage_by_model(calls: list[dict[str, Any]]) -> dict[str, ModelUsage]:
    """Tokens and cost per model of the calls that answered (as the run's own usage counts them)."""
    per: dict[str, list[ModelUsage]] = defaultdict(list)
    for call in calls:
        if _answered(call):
            per[str(call.get("model") or NO_MODEL)].append(_usage(call))
    return {model: _total(us) for model, us in per.items()}


def _total(usages: list[ModelUsage]) -> ModelUsage:
    """Summed usage; the cost unknown when any call's was (as mlab's own usage shows it), not the priced part's."""
    from inspect_ai.model import ModelUsage

    costs = [u.total_cost for u in usages]
    return ModelUsage(input_tokens=sum(u.input_tokens for u in usages),
                      output_tokens=sum(u.output_tokens for u in usages),
                      total_tokens=sum(u.total_tokens for u in usages),
                      total_cost=None if any(c is None for c in costs) else sum(c for c in costs if c is not None))


def _sum_usage(per_sample: list[dict[str, ModelUsage]]) -> dict[str, ModelUsage]:
    per: dict[str, list[ModelUsage]] = defaultdict(list)
    for usage in per_sample:
        for model, u in usage.items():
            per[model].append(u)
    return {model: _total(us) for model, us in per.items()}
