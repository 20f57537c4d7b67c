"""The run loop: the core asks the agent for an action, executes it, snapshots and traces every step."""
from __future__ import annotations

import fcntl
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from mlab.core.agent_context import AgentContext, RunState
from mlab.core.agent_program import ProgramAgent, check_program
from mlab.core.agentkit.options import check_agent_options
from mlab.core.errors import BudgetExceeded, LLMError, MlabError
from mlab.core.fs.atomic import is_disk_full
from mlab.core.hardware import hardware_change, of_run
from mlab.core.llm.client import LLMClient
from mlab.core.llm.connections import run_slots
from mlab.core.llm.roles import backend_options, build_roles, client_options
from mlab.core.models import (
    Action,
    RunConfig,
    RunFinished,
    RunStarted,
    RunStatus,
    Step,
    StepFinished,
    StopRun,
    Trace,
)
from mlab.core.plugins.registry import Registry, load_registry
from mlab.core.run.agent_step import AgentFailed, agent_step
from mlab.core.run.compute import sliced
from mlab.core.run.environment import is_final
from mlab.core.run.harness import Harness
from mlab.core.run.held_out import held_out_files
from mlab.core.run.live import RUN_LOCK_FILE, LiveStep
from mlab.core.run.packages import package_versions
from mlab.core.run.program_agent import ProgramLoop
from mlab.core.run.readonly import ReadOnlyRule, read_only_rule
from mlab.core.run.snapshot import SnapshotStore
from mlab.core.run.task_lookup import task_of_run
from mlab.core.run.taskdata import TaskHome
from mlab.core.run.trace import (
    LLM_LOG_FILE,
    WORKSPACE_DIR,
    append_error,
    json_safe,
    read_trace,
    write_config,
)
from mlab.core.run.trace_log import TraceLog, unresolved
from mlab.core.sandbox.limits import Limits
from mlab.core.sandbox.rootfs import gpu_devices
from mlab.core.task import Task

INITIAL_SNAPSHOT = "step_0000"


def step_snapshot_name(index: int) -> str:
    return f"step_{index:04d}"


def new_run_dir(config: RunConfig, base: Path | None = None) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    short = config.task.split("/")[-1]
    base = base or Path("runs")
    run_dir = base / f"{stamp}-{short}-{config.agent}-s{config.seed}"
    suffix = 1
    while run_dir.exists():
        suffix += 1
        run_dir = base / f"{stamp}-{short}-{config.agent}-s{config.seed}-{suffix}"
    return run_dir


class DiskFull(MlabError):
    """The run directory's disk is full: the run stops with its trace intact, to be resumed later."""


class Runner:
    def __init__(self, run_dir: Path, config: RunConfig, registry: Registry | None = None,
                 on_step: Callable[[Step], None] | None = None, ask_human: Callable[[str], str] | None = None,
                 limits: Limits | None = None, warn: Callable[[str], None] | None = None,
                 home: TaskHome | None = None):
        self.registry = registry or load_registry()
        self.run_dir = Path(run_dir).resolve()
        self.config = config
        self.on_step = on_step
        self.ask_human = ask_human
        self.warn = warn or (lambda text: print(f"mlab: warning: {text}", file=sys.stderr))
        # Limits for agent code; the timeout always comes from config.action_timeout_s.
        self.harness = Harness(self.registry, home, config.sandbox, sliced(limits, config.compute),
                               on_hook_error=self._append_error)
        self.task: Task = task_of_run(self.registry, config)  # a folder's task too, with its parameters
        _ = self.harness.sandbox_cls  # resolved now: an unknown sandbox fails before anything is written
        # the trace names the sandbox that ran, not "auto"
        self.config = config = config.model_copy(update={"sandbox": self.harness.sandbox_name,
                                                        "sandbox_confined": self.harness.sandbox_confined,
                                                        # every parameter, typed, defaults filled in
                                                        "task_params": dict(self.task.param_values)})
        self.agent_cls = self.registry.get("agents", config.agent)
        check_agent_options(self.agent_cls, config.agent_options)  # a bad option fails before anything is written
        check_program(self.agent_cls)  # a program agent whose program is missing: one line, nothing written
        if self.agent_cls.needs_llm and not config.llm:
            raise MlabError(f"agent {config.agent!r} needs a model: give --llm")
        backends = build_roles(self.registry, config.llm, config.fast_llm, config.edit_llm,
                               **backend_options(config))
        self.workspace = self.run_dir / WORKSPACE_DIR
        self.store: SnapshotStore | None = None
        self.llm: LLMClient | None = None
        self._backends = backends
        self._lock_file: TextIO | None = None
        self.trace_log = TraceLog(self.run_dir)
        self.live = LiveStep(self.run_dir)  # the step in progress, for the terminal view and `mlab view`

    # ---- set-up ---------------------------------------------------------------------------------
    def _append_error(self, text: str) -> None:
        append_error(self.run_dir, text)  # best effort: whether it could write changes nothing here

    @property
    def snapshots(self) -> SnapshotStore:
        """The snapshot store, typed without None: _build makes it before any step."""
        if self.store is None:
            raise RuntimeError("the run's snapshot store is used before the run was built")
        return self.store

    @property
    def _skip_read_only(self) -> ReadOnlyRule:
        """What snapshots leave out: the task's read-only paths (one object per patterns, so a store knows a
        later step asks the same)."""
        return read_only_rule(tuple(self.task.read_only_files))

    def _lock(self) -> None:
        """One process per run directory: a second `--resume` while the first is alive would corrupt it."""
        lock = self._lock_file = open(self.run_dir / RUN_LOCK_FILE, "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise MlabError(f"run {str(self.run_dir)!r} is in use by another mlab process") from None

    def _release_lock(self) -> None:
        self.trace_log.close()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def _build(self) -> None:
        self._lock()
        self.store = SnapshotStore(self.run_dir)
        if self._backends is not None:
            self.llm = LLMClient(self._backends, log_path=self.run_dir / LLM_LOG_FILE, run_dir=str(self.run_dir),
                                 on_call=lambda event: self.notify("llm_call_finished", event),
                                 connections=run_slots(self.run_dir, self.config.max_connections),
                                 **client_options(self.config))
        self.sandbox = sandbox = self.harness.new_sandbox()
        self.warnings = [f"sandbox {sandbox.name}: {note}" for note in sandbox.limitations()]
        if self.task.resources.network_at_run_time:
            self.warnings.append(f"task {self.task.name} needs the network at run time, so agent code can reach the "
                                 "host's network (and its loopback services) in this run")
        self.env = self.harness.environment(
            self.task, self.workspace, store=self.store, sandbox_home=self.run_dir / "home",
            timeout_s=self.config.action_timeout_s, sandbox=sandbox, llm=self.llm,
            interactive=self.config.interactive, ask_human=self.ask_human,
            allow_validate=self.config.allow_validate)
        self.env.scripts.on_output = self.live.output
        self.agent = self.agent_cls(AgentContext(
            task_name=self.task.name, research_problem=self.task.research_problem,
            actions=self.env.available_actions(), llm=self.llm, options=dict(self.config.agent_options),
            seed=self.config.seed, starter_script=self.task.starter_script,
            packages=package_versions(self.env.s.python), action_timeout_s=self.config.action_timeout_s,
            log=lambda msg: self._append_error(f"[agent] {msg}")))

    def notify(self, hook: str, event: object) -> None:
        self.harness.notify(hook, event)

    def start(self) -> Trace:
        check_program(self.agent_cls, self.config.agent_options)  # the program the options name: one line
        self.task.check_runnable()
        self.harness.ensure_prepared(self.task)
        if self.run_dir.exists() and any(self.run_dir.iterdir()):
            raise MlabError(f"run directory {str(self.run_dir)!r} is not empty; use --resume to continue it")
        existed = self.run_dir.exists()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            write_config(self.run_dir, self.config, sync=False)  # durable by the trace's first sync, below
            held_out = self.config.allow_validate
            self.harness.new_workspace(self.task, self.workspace, allow_validate=held_out)
            self._build()
            # durable by the trace's first sync too, as each step's snapshot by its commit
            self.snapshots.record(self.workspace, INITIAL_SNAPSHOT, skip=self._skip_read_only, durable=False)
            trace = Trace(run_id=self.run_dir.name, config=self.config, started_at=time.time(),
                          plugin_versions={p.distribution: p.version for p in self.registry.plugins},
                          devices=gpu_devices(self.harness.limits.gpus),  # every sandbox passes these through
                          hardware=of_run(self.config),
                          held_out=sorted(held_out_files(self.task)) if held_out else [])
            self._record_warnings(trace)
            self.trace_log.begin(trace)
        except BaseException as exc:
            # A run that never started leaves nothing a later `run --run-dir` would trip over.
            self._release_lock()
            if existed:
                _empty_folder(self.run_dir)
            else:
                shutil.rmtree(self.run_dir, ignore_errors=True)
            if is_disk_full(exc):
                raise DiskFull(f"cannot start run {str(self.run_dir)!r}: the disk is full "
                               f"({exc.strerror or exc})") from exc
            raise
        self.notify("run_started", RunStarted(run_dir=str(self.run_dir), config=self.config))
        return self._loop(trace)

    def _end_leftovers(self) -> None:
        """Commands of the killed harness still dying in the workspace would write into it after the restore."""
        from mlab.core.sandbox.leftovers import end_leftover_commands

        left = end_leftover_commands(self.workspace)
        if left:
            append_error(self.run_dir, f"resume: ended {len(left)} command(s) of the earlier harness still running "
                                       f"in the workspace (pids {', '.join(map(str, left))})")

    def resume(self) -> Trace:
        self.task.check_runnable()
        trace = read_trace(self.run_dir)
        if trace.status != "running":
            raise MlabError(f"run {str(self.run_dir)!r} already ended ({trace.status}: {trace.end_reason})")
        self._build()
        self._drop_torn_steps(trace)
        self._end_leftovers()
        last = trace.steps[-1] if trace.steps else None
        self.snapshots.restore(last.snapshot if last else INITIAL_SNAPSHOT, self.workspace, skip=self._skip_read_only)
        if last:
            self.agent.load_state_dict(last.agent_state)
            self.env.load_state_dict(last.env_state)
            if self.llm is not None:
                self.llm.load_state_dict(last.llm_state)
        if self.env.s.validator is not None:  # the calls the trace shows: the budget is per run, not per process
            self.env.s.validator.resume(trace.steps)
        if moved := hardware_change(trace.hardware, of_run(self.config)):  # the trace keeps the first record
            self.warnings.append(moved)
        self._record_warnings(trace)
        try:
            self.trace_log.begin(trace)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            self._stop_disk_full(trace, exc)
        self.notify("run_started", RunStarted(run_dir=str(self.run_dir), config=self.config,
                                               resumed_from_step=len(trace.steps)))
        return self._loop(trace)

    def _drop_torn_steps(self, trace: Trace) -> None:
        """A step whose snapshot or stored states a crash tore (objects not yet on disk) is done again from the
        one before."""
        while trace.steps:
            step = trace.steps[-1]
            if torn := self.snapshots.verify(step.snapshot):
                what = f"snapshot {step.snapshot} is damaged ({', '.join(torn[:5])})"
            elif lost := unresolved(step):
                what = f"the stored {', '.join(lost)} of step {step.index} is damaged"
            else:
                break
            trace.steps.pop()
            append_error(self.run_dir, f"{what}: step {step.index} is done again")
        if not trace.steps and self.snapshots.verify(INITIAL_SNAPSHOT):
            raise MlabError(f"the initial snapshot of run {str(self.run_dir)!r} is damaged: start the run again")

    def _record_warnings(self, trace: Trace) -> None:
        """What the sandbox cannot enforce here: said on stderr, and kept in the trace and the error log."""
        for text in self.warnings:
            self._record_warning(trace, text)

    def _record_warning(self, trace: Trace, text: str) -> None:
        self.warn(text)
        if text not in trace.errors:
            trace.errors.append(text)
            append_error(self.run_dir, f"warning: {text}")

    # ---- the loop -------------------------------------------------------------------------------
    def _loop(self, trace: Trace) -> Trace:
        clock_start = time.monotonic()
        time_before = trace.total_time_s
        reason: str | None = None
        status: RunStatus = "finished"
        last = trace.steps[-1] if trace.steps else None
        if last is not None and is_final(last.action) and not last.is_error:
            reason = "final answer"  # stopped after the Final Answer step was saved: only the scoring is left
        try:
            if reason is None and isinstance(self.agent, ProgramAgent):  # it runs its own loop
                reason = ProgramLoop(self, trace, time_before, clock_start).run()
            while reason is None:
                elapsed = time_before + time.monotonic() - clock_start
                index = len(trace.steps) + 1
                if index > self.config.max_steps:
                    reason = f"max steps reached ({self.config.max_steps})"
                    break
                if elapsed >= self.config.max_time_s:
                    reason = f"time limit reached ({self.config.max_time_s:g} s)"
                    break
                state = RunState(step_index=index, history=list(trace.steps), max_steps=self.config.max_steps,
                                 seconds_left=self.config.max_time_s - elapsed)
                started = time.time()
                self.live.begin(index)
                if self.llm is not None:
                    self.llm.step_index = index  # tags the step's calls in the call log
                decision = agent_step(self.agent, state)
                if isinstance(decision, StopRun):
                    reason = f"agent stopped: {decision.reason}"
                    break
                self.live.acting(decision)
                observation, is_error = self.env.execute(decision)
                observation += self.snapshot_step(step_snapshot_name(index), trace)
                step = Step(index=index, action=stored_action(decision), observation=observation,
                            is_error=is_error, started_at=started, duration_s=time.time() - started,
                            snapshot=step_snapshot_name(index), agent_state=self.agent.state_dict(),
                            env_state=self.env.state_dict(),
                            llm_state=self.llm.state_dict() if self.llm else {},
                            usage=self.llm.usage.model_copy() if self.llm else trace.usage)
                trace.steps.append(step)
                trace.usage = step.usage
                trace.total_time_s = time_before + time.monotonic() - clock_start
                try:
                    self.trace_log.append(trace)  # the step is committed once this returns
                except BaseException:
                    trace.steps.pop()  # not on disk: a resume redoes this step
                    raise
                self.notify("step_finished", StepFinished(run_dir=str(self.run_dir), step=step))
                if self.on_step:
                    self.on_step(step)
                if is_final(decision) and not is_error:
                    reason = "final answer"
        except BudgetExceeded as exc:
            reason = f"budget reached: {exc}"
        except AgentFailed as exc:
            reason, status = f"agent error: {exc}", "failed"
            append_error(self.run_dir, traceback.format_exc())
        except OSError as exc:
            if not is_disk_full(exc):
                reason, status = f"harness error: {type(exc).__name__}: {exc}", "failed"
                append_error(self.run_dir, traceback.format_exc())
            else:
                self._stop_disk_full(trace, exc)
        except LLMError as exc:
            reason, status = f"llm error: {exc}", "failed"
            append_error(self.run_dir, traceback.format_exc())
        except Exception as exc:
            reason, status = f"harness error: {type(exc).__name__}: {exc}", "failed"
            append_error(self.run_dir, traceback.format_exc())
        finally:
            self.live.end()
            if self.llm is not None:
                self.llm.close()
            self.env.close()
            self.sandbox.close()
        return self._finish(trace, status, reason, time_before + time.monotonic() - clock_start)

    def snapshot_step(self, name: str, trace: Trace) -> str:
        """Snapshot the workspace after a step; returns a note for the observation. When the disk is too full
        to store the step's files, the step's changes are undone (that frees what it wrote) and stored again."""
        if costly := self.env.scripts.guard.watch_limit_note():  # learnt at the step's first command
            self._record_warning(trace, f"sandbox {self.sandbox.name}: {costly}")
        try:
            self.snapshots.record(self.workspace, name, skip=self._skip_read_only, changes=self.snapshots.changes,
                                  durable=False)  # the step's commit syncs it with the step's line
            if costly := self.snapshots.watch_limit_note():
                self._record_warning(trace, f"snapshots: {costly}")
            if self.snapshots.left_out:
                return (f"\n[The snapshot of the workspace after this step left files out: {self.snapshots.left_out}."
                        " Files left out are not kept, scored or restored.]")
            return ""
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            first = exc
        previous = trace.steps[-1].snapshot if trace.steps else INITIAL_SNAPSHOT
        append_error(self.run_dir, f"disk full while storing snapshot {name} ({first}); the workspace goes back "
                                   f"to {previous}")
        self.snapshots.restore(previous, self.workspace, skip=self._skip_read_only)
        self.snapshots.record(self.workspace, name, skip=self._skip_read_only)  # a second failure stops the run
        return ("\n[The disk is full, so the files this step produced could not be kept: the workspace was put "
                "back as it was before this step. Write smaller files or delete ones you do not need.]")

    def _stop_disk_full(self, trace: Trace, exc: OSError) -> None:
        """Stop without touching the trace on disk (the last complete step's): it can be resumed later."""
        self._release_lock()
        done = len(trace.steps)
        message = (f"the disk of run {str(self.run_dir)!r} is full ({exc.strerror or exc}); the run stopped "
                   f"after step {done}, whose trace and snapshot are intact. Free some space and continue it "
                   f"with --resume")
        append_error(self.run_dir, message)
        raise DiskFull(message) from exc

    def _finish(self, trace: Trace, status: RunStatus, reason: str | None, total: float) -> Trace:
        try:
            return self._finish_writing(trace, status, reason, total)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            self._stop_disk_full(trace, exc)
            raise  # not reached
        finally:
            self._release_lock()  # the run is over: the folder may be opened again (eval, a later resume)

    def _finish_writing(self, trace: Trace, status: RunStatus, reason: str | None, total: float) -> Trace:
        last = trace.steps[-1].snapshot if trace.steps else INITIAL_SNAPSHOT
        self.snapshots.name_again(last, "final", durable=False)  # durable by the trace's last sync
        # the trace in memory changes only once it is on disk; only top-level fields change, so the steps are
        # shared, not copied (a deep copy cost more than the rest of a run's ending)
        final = trace.model_copy()
        final.final_snapshot = "final"
        final.final_score, final.final_score_error = self.harness.score_snapshot(self.task, self.run_dir, "final")
        final.status, final.end_reason, final.total_time_s = status, reason, total
        if self.llm is not None:
            final.usage = self.llm.usage
        self.trace_log.finish(final)
        trace = final
        self.notify("run_finished", RunFinished(
            run_dir=str(self.run_dir), status=status, end_reason=reason, steps=len(trace.steps),
            final_score=trace.final_score, usage=trace.usage, total_time_s=total))
        return trace


def stored_action(action: Action) -> Action:
    """The action as the trace keeps it: what the agent sent may hold anything (lone surrogates, objects,
    megabytes of text), the trace needs valid, bounded JSON."""
    return Action(name=json_safe(action.name if isinstance(action.name, str) else repr(action.name)),
                  args=json_safe(action.args if isinstance(action.args, dict) else {"(input)": action.args}),
                  entries=json_safe(action.entries if isinstance(action.entries, dict) else {}),
                  raw_response=json_safe(action.raw_response) if action.raw_response is not None else None)


def _empty_folder(folder: Path) -> None:
    for entry in folder.iterdir():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink()
