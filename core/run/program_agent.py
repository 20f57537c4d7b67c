"""Running a program agent (mlab.core.agent_program): the program runs once in the run's sandbox, and each model
call it makes through the endpoint becomes a step of the trace.

Step N is model call N and what followed it: the request's newest messages, the completion (its tool calls
included), then the workspace changes and the program's output up to call N+1 (or the program's end); its snapshot
is the workspace when call N+1 arrives, taken with the program frozen. Several calls may be answered at once; their
steps follow the order the calls arrived in. The step limit, the time limit and the budgets end the program: the
call that crosses one is refused (HTTP 429, not to be retried), the program has GRACE_S to finish, then its tree is
killed; the run is scored as any other. What the program did after its last answered call is one more step
(PROGRAM_ENDED).
"""
from __future__ import annotations

import contextlib
import json
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlab.core.agent_program import ProgramAgent, ProgramLaunch, ProgramSpec
from mlab.core.agentkit.problem import without_research_log
from mlab.core.errors import BudgetExceeded, LLMError, MlabError
from mlab.core.fs.atomic import write_atomic
from mlab.core.llm.endpoint import ModelEndpoint, forwarder_source
from mlab.core.llm.protocols import ChatRequest, EndpointError
from mlab.core.models import Action, Completion, Step, StepFinished
from mlab.core.run.agent_folder import AgentFolder
from mlab.core.sandbox.output import OutputPump
from mlab.core.sandbox.supervise import supervise

if TYPE_CHECKING:
    from mlab.core.models import Trace
    from mlab.core.run.runner import Runner

MODEL_CALL = "Model Call"  # the action name of a recorded call
PROGRAM_ENDED = "Program Ended"  # the one step of a program that made no call
GRACE_S = 10.0  # how long a program told to stop may take to exit by itself
OUTPUT_KEPT = 20_000  # characters of a step's program output kept in the trace (head and tail)
MESSAGE_KEPT = 8_000  # characters of each shown message
PROGRAM_FILES = "program_files.json"  # in the run folder: ProgramSpec.files of the first session


@dataclass
class _Pending:
    index: int  # the call's arrival number
    messages: list[dict[str, Any]]
    completion: Completion
    started: float


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} characters not shown ...]\n{text[-half:]}"


def _new_messages(request: ChatRequest) -> list[dict[str, Any]]:
    """The messages after the last assistant message (what the program added since its last answer)."""
    messages = request.messages
    last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    shown = messages[last + 1:] or messages[-1:]
    return [{**m.record(), "content": _cut(m.content, MESSAGE_KEPT)} for m in shown]


def _safe_name(name: str) -> bool:
    parts = name.split("/")
    return bool(name) and all(part not in ("", ".", "..") for part in parts)


def _kept_files(run_dir: Path) -> dict[str, str]:
    """The program files the first session wrote (kept in the run folder, which the program never sees)."""
    try:
        kept = json.loads((run_dir / PROGRAM_FILES).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in kept.items() if isinstance(k, str) and isinstance(v, str) and _safe_name(k)}


def _budget_env(config: Any, llm: Any) -> dict[str, str]:
    """The model budgets the program runs under and what is left of them, for the program to plan by."""
    used = llm.usage if llm is not None else None
    env = {}
    if config.max_tokens is not None:
        env["MLAB_TOKEN_LIMIT"] = str(config.max_tokens)
        env["MLAB_TOKENS_LEFT"] = str(max(0, config.max_tokens - (used.total_tokens if used else 0)))
    if config.max_calls is not None:
        env["MLAB_MAX_CALLS"] = str(config.max_calls)
        env["MLAB_CALLS_LEFT"] = str(max(0, config.max_calls - (used.calls if used else 0)))
    if config.max_cost is not None:
        env["MLAB_COST_LIMIT_USD"] = f"{config.max_cost:g}"
        env["MLAB_COST_LEFT_USD"] = f"{max(0.0, config.max_cost - (used.cost_usd if used else 0.0)):.6f}"
    return env


def _changes(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    lines = [f"+ {rel}" for rel in sorted(after) if rel not in before]
    lines += [f"~ {rel}" for rel in sorted(after) if rel in before and before[rel] != after[rel]]
    lines += [f"- {rel}" for rel in sorted(before) if rel not in after]
    return lines


class ProgramLoop:
    """One session of the program (a run's start, or a resume), inside the runner's loop."""

    def __init__(self, runner: Runner, trace: Trace, time_before: float, clock_start: float):
        self.r = runner
        self.trace = trace
        self.time_before = time_before
        self.clock_start = clock_start
        self.agent: ProgramAgent = runner.agent
        self._lock = threading.Lock()
        self._pending: list[_Pending] = []  # answered calls not yet steps
        self._in_flight: set[int] = set()  # the arrival numbers of the calls being answered
        self._settled = threading.Condition(self._lock)  # notified when a call being answered ends
        self._arrivals = 0
        self._output = bytearray()
        self._output_lock = threading.Lock()
        self._stop: str | None = None  # why the program is told to end (a limit)
        self._stopped = threading.Event()
        self._failure: BaseException | None = None  # raised in the runner's loop once the program is gone
        self._proc: Any = None
        self._pump: OutputPump | None = None  # the program's output, drained at each step
        self._grace_until: float | None = None  # when a program told to stop is killed

    # ---- time -----------------------------------------------------------------------------------
    def _elapsed(self) -> float:
        return self.time_before + time.monotonic() - self.clock_start

    def _end(self, reason: str) -> None:
        if self._stop is None:
            self._stop = reason
        self._stopped.set()

    # ---- the run ----------------------------------------------------------------------------------
    def run(self) -> str:
        """Run the program to its end; returns why the run ends. Raises what the runner's loop handles."""
        r, config = self.r, self.r.config
        seconds_left = config.max_time_s - self._elapsed()
        steps_left = config.max_steps - len(self.trace.steps)
        if steps_left <= 0:
            return f"max steps reached ({config.max_steps})"
        if seconds_left <= 0:
            return f"time limit reached ({config.max_time_s:g} s)"
        home = Path(r.env.s.sandbox_home or r.run_dir / "home")
        home.mkdir(parents=True, exist_ok=True)
        with AgentFolder(home) as folder:
            return self._session(folder, seconds_left, steps_left)

    def _session(self, folder: AgentFolder, seconds_left: float, steps_left: int) -> str:
        r = self.r
        resumed = bool(self.trace.steps)
        problem = without_research_log(r.task.research_problem)  # a program has no action that writes the log
        if resumed:
            problem += (f"\n\n[This run was interrupted and resumed: the workspace holds the files as they were "
                        f"after model call {len(self.trace.steps)}. Earlier conversation is not kept.]")
        task_file = folder.write("task.md", problem)
        earlier = _kept_files(r.run_dir)
        for name, text in earlier.items():  # the program's files of the first session, for an agent resumed elsewhere
            folder.write(name, text)
        python = r.env.s.python
        agent_dir = folder.path
        spec = self.agent.program(ProgramLaunch(
            research_problem=problem, task_file=task_file, agent_dir=agent_dir, workspace=r.workspace,
            python=python, max_steps=steps_left, seconds_left=seconds_left, resumed=resumed))
        for name in spec.files:
            if not _safe_name(name):
                raise MlabError(f"agent {self.agent.name!r} names a file {name!r} outside its folder")
        for name, text in spec.files.items():
            folder.write(name, text)
        if not earlier and spec.files:
            write_atomic(r.run_dir / PROGRAM_FILES, json.dumps(spec.files).encode("utf-8"))
        folder.write("endpoint_forwarder.py", forwarder_source())
        # the socket lives in a folder of the run's own, shown read-only: the program can neither replace nor
        # remove it, and the harness binds and removes it where nothing of the program's can be in the way
        socket_folder = Path(tempfile.mkdtemp(prefix=".endpoint-", dir=r.run_dir))
        try:
            with ModelEndpoint(self._serve, socket_folder) as endpoint:
                return self._program(endpoint, spec, folder, task_file, problem, seconds_left, steps_left, resumed)
        finally:
            with contextlib.suppress(OSError):
                socket_folder.rmdir()

    def _program(self, endpoint: ModelEndpoint, spec: ProgramSpec, folder: AgentFolder, task_file: Path, problem: str,
                 seconds_left: float, steps_left: int, resumed: bool) -> str:
        r, scripts, agent_dir, python = self.r, self.r.env.scripts, folder.path, self.r.env.s.python
        forwarder = agent_dir / "endpoint_forwarder.py"
        before = scripts.guard.survey()
        exec_spec = scripts.exec_spec(timeout_s=seconds_left, survey=before)
        exec_spec.shown_paths += [*spec.shown, endpoint.folder]
        exec_spec.env.update({
            "OPENAI_BASE_URL": "{base_url}", "OPENAI_API_BASE": "{base_url}", "MLAB_LLM_BASE_URL": "{base_url}",
            "OPENAI_API_KEY": "mlab-endpoint-no-key", "MLAB_MODEL": "mlab",
            "ANTHROPIC_BASE_URL": "{origin}", "ANTHROPIC_API_KEY": "mlab-endpoint-no-key",
            "MLAB_TASK_FILE": str(task_file), "MLAB_RESEARCH_PROBLEM": problem,
            "MLAB_MAX_STEPS": str(steps_left), "MLAB_TIME_LIMIT_S": f"{seconds_left:.0f}",
            "MLAB_RESUMED": "1" if resumed else "0", "MLAB_AGENT_DIR": str(agent_dir),
            "MLAB_ACTION_TIMEOUT_S": f"{r.config.action_timeout_s:g}", **_budget_env(r.config, r.llm), **spec.env})
        argv = [python, "-u", str(forwarder), str(endpoint.socket_path), "--", *spec.argv]
        changes = r.snapshots.changes
        changes.ran_agent_code()
        try:
            exit_code = self._watch(argv, exec_spec)
        finally:
            r.workspace.mkdir(exist_ok=True)
            outcome = scripts.guard.restore(before)
            changes.code_ended(outcome.intact)
        self._wait_for_calls()
        with self._lock:
            if self._failure is not None:
                raise self._failure
            self._flush(final=True, exit_code=exit_code)
        if self._failure is not None:
            raise self._failure
        if self._stop is not None:
            return self._stop
        return f"agent program exited (code {exit_code})"

    def _watch(self, argv: list[str], spec: Any) -> int | None:
        """Run the program under the sandbox's supervisor (mlab.core.sandbox.supervise); its exit code."""
        self._proc = self.r.sandbox.popen(argv, spec)
        self._pump = OutputPump(self._proc.stdout, spec.limits.output_bytes, self._output_chunk)  # a pipe
        result = supervise(self.r.sandbox, self._proc, spec, None, self._grace_over, self._ending(), self._pump)
        if result.limit_hit == "timeout":
            self._end(f"time limit reached ({self.r.config.max_time_s:g} s)")
        elif result.limit_hit not in (None, "output"):  # output past the cap is kept in part, not a limit broken
            self._end(f"agent program stopped by its {result.limit_hit} limit")
        return result.exit_code

    def _grace_over(self) -> bool:
        """Whether the program, told to stop, has used up its GRACE_S (asked by the supervisor while it runs)."""
        if self._stopped.is_set() and self._grace_until is None:
            self._grace_until = time.monotonic() + GRACE_S
        return self._grace_until is not None and time.monotonic() >= self._grace_until

    @contextlib.contextmanager
    def _ending(self) -> Iterator[None]:
        """Held while the program's tree is killed: later calls are refused, and no step freezes it meanwhile."""
        with self._lock:
            self._stopped.set()
            yield

    def _output_chunk(self, chunk: bytes) -> None:
        with self._output_lock:
            self._output += chunk
            if len(self._output) > 4 * OUTPUT_KEPT:  # keep the head and the tail
                del self._output[OUTPUT_KEPT:len(self._output) - OUTPUT_KEPT]
        self.r.live.output(chunk)

    def _take_output(self) -> str:
        with self._output_lock:
            data, self._output = bytes(self._output), bytearray()
        return self.r.env.scripts.relative_paths(_cut(data.decode("utf-8", "replace"), OUTPUT_KEPT))

    # ---- model calls ------------------------------------------------------------------------------
    def _serve(self, request: ChatRequest) -> Completion:
        """Answer one call; several may be answered at once (the budgets are held by the client before each call
        goes upstream). Each answered call becomes a step, in the order the calls arrived."""
        config = self.r.config
        with self._lock:
            if self._failure is not None or self._stopped.is_set():
                raise EndpointError(429, "run_ended", f"the run is ending ({self._stop or 'stopped'}): no more "
                                                       "model calls; save your work and exit")
            try:
                self._flush(final=False)
            except BaseException as exc:
                self._failure = exc
                self._stopped.set()
                raise EndpointError(500, "harness_error", "the harness failed; the run ends") from None
            step = len(self.trace.steps) + len(self._pending) + len(self._in_flight) + 1  # as the calls stand now
            if step > config.max_steps:
                self._end(f"max steps reached ({config.max_steps})")
                raise EndpointError(429, "max_steps", f"the run's step limit ({config.max_steps} model calls) "
                                                      "is reached: save your work and exit")
            if self._elapsed() >= config.max_time_s:
                self._end(f"time limit reached ({config.max_time_s:g} s)")
                raise EndpointError(429, "time_limit", "the run's time limit is reached: save your work and exit")
            self._arrivals += 1
            index = self._arrivals
            self._in_flight.add(index)
            self.r.live.begin(step)
        llm = self.r.llm
        assert llm is not None  # a program agent needs a model
        started = time.time()
        try:
            completion = llm.complete(request.messages, hold_budget=True, step=step, **request.params)
        except BudgetExceeded as exc:
            self._end(f"budget reached: {exc}")
            raise EndpointError(429, "budget_exceeded", f"the run's budget is spent ({exc}): save your work "
                                                        "and exit") from None
        except LLMError as exc:
            with self._lock:
                self._failure = self._failure or exc
                self._stopped.set()
            raise EndpointError(502, "upstream_error", f"the model failed: {exc}") from None
        except ValueError as exc:  # a parameter the run's client refuses
            raise EndpointError(400, "invalid_request_error", str(exc)) from None
        finally:
            with self._lock:
                self._in_flight.discard(index)
                self._settled.notify_all()
        with self._lock:
            self._pending.append(_Pending(index, _new_messages(request), completion, started))
        return completion.model_copy(update={"model": llm.model_name()})

    def _wait_for_calls(self) -> None:
        """Let the calls being answered finish (they are paid for and logged) before the last steps are taken."""
        with self._settled:
            while self._in_flight:
                self._settled.wait()

    def _flush(self, final: bool, exit_code: int | None = None) -> None:
        """Record the answered calls as steps, in the order they arrived (those before every call still being
        answered; all at the end), each with a snapshot of the workspace now (the program frozen unless it has
        ended). At the end with no call left to record, what the program did last is a step of its own."""
        waiting = min(self._in_flight, default=None)
        ready = sorted((p for p in self._pending if final or waiting is None or p.index < waiting),
                       key=lambda p: p.index)
        for pending in ready:
            self._pending.remove(pending)
            self._record(pending, final and pending is ready[-1], exit_code)
        if final and not ready:  # what the program did after its last answered call is a step of its own
            self._record(None, True, exit_code)

    def _record(self, pending: _Pending | None, final: bool, exit_code: int | None) -> None:
        r, trace = self.r, self.trace
        index = len(trace.steps) + 1
        name = f"step_{index:04d}"
        previous = trace.steps[-1].snapshot if trace.steps else "step_0000"
        proc = self._proc
        frozen = not final and proc is not None and proc.poll() is None
        if frozen:
            r.sandbox.freeze(proc)
        try:
            r.snapshots.changes.ran_agent_code()  # the program lives on: a full look, not the change events
            note = r.snapshot_step(name, trace)
            if self._pump is not None:  # what it printed before this call may not have been read yet
                self._pump.drain()
        finally:
            if frozen:
                r.sandbox.thaw(proc)
        changed = _changes(r.snapshots.manifest(previous), r.snapshots.manifest(name))
        output = self._take_output()
        observation = "Workspace changes since this call:\n" + ("\n".join(changed) or "(none)")
        observation += "\n\nProgram output:\n" + (output or "(none)") + note
        if final:
            observation += f"\n\n[The program ended (exit code {exit_code}).]"
        if pending is not None:
            args: dict[str, Any] = {"messages": pending.messages}
            if pending.completion.tool_calls:
                args["tool_calls"] = [c.model_dump() for c in pending.completion.tool_calls]
            action = Action(name=MODEL_CALL, args=args, raw_response=pending.completion.text)
            started = pending.started
        else:
            action = Action(name=PROGRAM_ENDED, args={"exit_code": str(exit_code)})
            started = time.time()
        llm = r.llm
        step = Step(index=index, action=action, observation=observation, is_error=bool(final and exit_code),
                    started_at=started, duration_s=time.time() - started, snapshot=name,
                    agent_state={"calls": sum(s.action.name == MODEL_CALL for s in trace.steps) + bool(pending)},
                    env_state=r.env.state_dict(), llm_state=llm.state_dict() if llm else {},
                    usage=llm.usage.model_copy() if llm else trace.usage)
        trace.steps.append(step)
        trace.usage = step.usage
        trace.total_time_s = self._elapsed()
        try:
            r.trace_log.append(trace)
        except BaseException:
            trace.steps.pop()
            raise
        r.notify("step_finished", StepFinished(run_dir=str(r.run_dir), step=step))
        if r.on_step:
            r.on_step(step)
