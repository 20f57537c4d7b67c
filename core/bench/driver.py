"""Benches: every (task, agent, model, seed) run in its own run directory, many at once, results in SQLite.

The driver (this process) plans the runs, hands each to an engine (core/bench/engines.py), and is the only writer
of the database: what it learns in one tick (runs started, runs ended) is written in one transaction. `local`
forks processes from a pre-loaded helper process, one per run or several runs to one (engines.hosts()); `ray`
submits each run as a Ray task.
Workers report their runs' progress (the latest step of each, a few times a second) to the engine, which the driver
reads in memory, and return a summary of their run. Rerunning a bench skips finished runs, resumes interrupted ones
from their last step, and retries failed ones only when asked.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

from mlab.core.bench.agent_options import bench_agent_options
from mlab.core.bench.bench_sandbox import bench_sandbox
from mlab.core.bench.evaluate import registry_from
from mlab.core.bench.results import DB_FILE, TASK_DATA_META, ResultsDB, Row, judge_runs, task_data_keys
from mlab.core.bench.run_folders import check_bench_dir
from mlab.core.bench.slices import Slices
from mlab.core.errors import MlabError
from mlab.core.models import RunConfig
from mlab.core.run.baseline import known_baseline
from mlab.core.run.harness import Harness
from mlab.core.run.task_lookup import find_task, run_fields
from mlab.core.run.task_params import DATA_KEY, labelled
from mlab.core.run.taskdata import TaskHome
from mlab.core.view.live import LiveState, read_live

if TYPE_CHECKING:
    from mlab.core.bench.engines import JobSpec, LocalEngine, WorkerSettings
    from mlab.core.bench.ray_engine import RayEngine

RUNS_DIR = "runs"
PROGRESS_DIR = ".progress"  # the Ray engine's copy of its runs' progress, for observers
JOBS_DIR = ".jobs"  # workers' results, consumed into results.db
LOGS_DIR = "logs"
ATTEMPTS_DIR = "attempts"
NO_LLM = "-"
CONNECTIONS_DIR = ".connections"  # the slot files of --max-connections
LIVE_READS_PER_TICK = 32  # run folders whose step in progress the driver reads per tick, in turn


@dataclass
class BenchSpec:
    tasks: list[str]
    agents: list[str]
    llms: list[str | None] = field(default_factory=lambda: [None])
    runs: int = 8
    max_steps: int = 50
    max_time_s: float = 5 * 3600
    action_timeout_s: float = 2 * 3600
    sandbox: str = "auto"
    fast_llm: str | None = None
    edit_llm: str | None = None
    agent_options: dict[str, Any] = field(default_factory=dict)
    intermediate: bool = False  # also score step snapshots once a run ends
    labels: dict[str, str] = field(default_factory=dict)  # agent -> its method's name in reports (--label)
    # passed through to each run's RunConfig (budgets, model endpoint and retries), when set
    run_options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Job:
    key: str
    name: str  # folder name of the run below BENCH/runs
    task: str
    agent: str
    llm: str | None
    seed: int
    mode: str  # start | resume | collect
    config: RunConfig


def run_key(task: str, agent: str, llm: str | None, seed: int) -> str:
    """task: the bench's name of the task (task_params.labelled: with the -T values that differ from its defaults),
    so runs of other values are runs of another task while a bench without -T keeps its keys."""
    return f"{task}|{agent}|{llm or NO_LLM}|s{seed}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


def run_name(task: str, agent: str, llm: str | None, seed: int) -> str:
    return f"{_slug(task.replace('/', '__'))}--{_slug(agent)}--{_slug(llm) if llm else 'nollm'}--s{seed}"


# ---- the driver ------------------------------------------------------------------------------------
@dataclass
class RunProgress:
    key: str
    step: int = 0
    max_steps: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    calls: int = 0  # model calls so far, and how many of them had no price (their cost is not in cost_usd)
    unpriced_calls: int = 0
    action: str = ""  # the step in progress's, once the agent has chosen it
    started: float = 0.0
    step_started: float = 0.0  # 0 between steps


@dataclass
class BenchStatus:
    total: int
    done: int = 0
    failed: int = 0
    skipped: int = 0
    pending: int = 0
    running: list[RunProgress] = field(default_factory=list)
    tokens: int = 0
    cost_usd: float = 0.0
    unpriced_runs: int = 0  # ended runs whose cost is unknown (a model without a price): not in cost_usd
    interrupted: bool = False
    interrupted_runs: int = 0  # stopped part-way (Ctrl-C): resumed by the next `mlab bench`
    retried: int = 0  # errored attempts run again (--retry-errors); each kept under BENCH/attempts
    stopped_by: str | None = None  # --fail-fast: the run whose error stopped the bench, and why
    never_started: int = 0  # --fail-fast: runs still queued when it stopped the bench
    last: list[str] = field(default_factory=list)  # one line per run that ended, newest last

    def add_cost(self, cost_usd: float | None) -> None:
        if cost_usd is None:
            self.unpriced_runs += 1
        else:
            self.cost_usd += cost_usd

    def cost_text(self, running: float = 0.0) -> str:
        """"$X", or what is known and how many runs' costs are not."""
        known = f"${self.cost_usd + running:.4f}"
        if self.unpriced_runs and not self.cost_usd + running:  # nothing had a price: no made-up $0
            return f"cost unknown ({self.unpriced_runs} unpriced runs)"
        return known if not self.unpriced_runs else f"{known} + unknown ({self.unpriced_runs} unpriced runs)"


class Bench:
    def __init__(self, bench_dir: Path, spec: BenchSpec, workers: int | None = None, engine: str = "local",
                 retry_failed: bool = False, registry_factory: str | None = None, ray_address: str | None = None,
                 cpus_per_run: float | None = None, max_connections: int | None = None, retry_errors: int = 0,
                 fail_fast: bool = False, gpus_per_run: int | None = None, memory_per_run: int | None = None):
        check_bench_dir(bench_dir)  # never into a run's folder
        self.dir = Path(bench_dir).resolve()
        self.spec = spec
        self.workers = max(1, workers or os.cpu_count() or 1)
        self.engine_name = engine
        self.retry_failed = retry_failed
        self.registry_factory = registry_factory
        self.ray_address = ray_address
        self.cpus_per_run = cpus_per_run
        self.gpus_per_run = gpus_per_run  # GPUs each run holds alone (None: every run sees every GPU)
        self.memory_per_run = memory_per_run
        self.max_connections = max_connections  # model requests in flight at once, over all runs
        self.retry_errors = retry_errors  # times an errored run is run again within this bench
        self.fail_fast = fail_fast  # stop every run at the first one that errored (after its retries)
        if max_connections is not None and max_connections < 1:
            raise MlabError("--max-connections must be at least 1")
        if retry_errors < 0:
            raise MlabError("--retry-errors must be 0 or more")
        if engine not in ("local", "ray"):
            raise MlabError(f"unknown engine {engine!r}; valid: local, ray")
        if spec.runs < 1:
            raise MlabError("--runs must be at least 1")
        self.slices = None if engine == "ray" else Slices(self.workers, cpus_per_run, gpus_per_run, memory_per_run)
        self.registry = registry_from(registry_factory, [os.getcwd()])
        self.sandbox = spec.sandbox  # "auto" until run() settles it once for the whole bench
        self._resolve_names()

    def _resolve_names(self) -> None:
        reg = self.registry
        given = self.spec.run_options.get("task_params")
        # registered tasks or task folders, with the bench's -T values: run.task_lookup's one rule
        self.tasks = [find_task(reg, name, given if isinstance(given, dict) else {}) for name in self.spec.tasks]
        # by the bench's name of each task (labelled); what each run's config records
        self._task_fields = {labelled(task): run_fields(task) for task in self.tasks}
        if self.engine_name == "ray" and any(getattr(t, DATA_KEY, None) not in (None, t.name.replace("/", "__"))
                                             for t in self.tasks):
            raise MlabError("--engine ray ships installed tasks' default data: run task folders and tasks with -T "
                            "values that change their data with --engine local")
        self.agent_classes = [reg.get("agents", name) for name in self.spec.agents]
        self.agent_options = bench_agent_options(self.agent_classes, self.spec.agent_options)
        for name in self.spec.llms:
            if name is not None and self.tasks and self.agent_classes:
                from mlab.core.llm.roles import backend_options, build_roles

                # a bad model string (or a missing key) fails here, not in 8 workers at once; with the runs' own
                # options: a model on a local server (--llm-api-base) needs no provider key
                config = self._config(labelled(self.tasks[0]), self.spec.agents[0], name, 0)
                build_roles(reg, name, config.fast_llm, config.edit_llm, **backend_options(config))
        if any(cls.needs_llm for cls in self.agent_classes) and not any(self.spec.llms):
            needy = ", ".join(cls.name for cls in self.agent_classes if cls.needs_llm)
            raise MlabError(f"agent(s) {needy} need a model: give --llm")

    # planning
    def combos(self) -> list[tuple[str, str, str | None, int]]:
        out: list[tuple[str, str, str | None, int]] = []
        for task in self.tasks:
            for cls in self.agent_classes:
                llms = [m for m in self.spec.llms if m] if cls.needs_llm else [None]
                for llm in dict.fromkeys(llms):
                    out.extend((labelled(task), cls.name, llm, seed) for seed in range(self.spec.runs))
        return out

    def _config(self, task: str, agent: str, llm: str | None, seed: int) -> RunConfig:
        s = self.spec
        return RunConfig(agent=agent, llm=llm, fast_llm=s.fast_llm if llm else None,
                         edit_llm=s.edit_llm if llm else None, max_steps=s.max_steps, max_time_s=s.max_time_s,
                         action_timeout_s=s.action_timeout_s, seed=seed, sandbox=self.sandbox,
                         label=s.labels.get(agent),
                         agent_options=dict(self.agent_options.get(agent, {})),
                         **{**s.run_options, **self._task_fields.get(task, {"task": task})})

    def plan(self, db: ResultsDB) -> tuple[list[Job], BenchStatus]:
        from mlab.core.run.trace import read_trace

        jobs: list[Job] = []
        combos = self.combos()
        status = BenchStatus(total=len(combos))
        for task, agent, llm, seed in combos:
            key, name = run_key(task, agent, llm, seed), run_name(task, agent, llm, seed)
            row = db.run(key) or {}  # {}: not run before
            state = row.get("status")
            if state == "finished" or (state == "failed" and not self.retry_failed):
                status.skipped += 1
                status.done += state == "finished"
                status.failed += state == "failed"
                status.tokens += (row["prompt_tokens"] or 0) + (row["completion_tokens"] or 0)
                status.add_cost(row["cost_usd"])
                continue
            run_dir = self.dir / RUNS_DIR / name
            mode = "start"
            if state == "failed":  # --retry-failed: keep the failed attempt for post-mortems, start afresh
                if run_dir.exists():
                    aside = self.dir / ATTEMPTS_DIR / f"{name}.{row['attempts'] or 0}"
                    shutil.rmtree(aside, ignore_errors=True)
                    aside.parent.mkdir(parents=True, exist_ok=True)
                    os.replace(run_dir, aside)
            elif (run_dir / "trace.json").is_file():
                try:
                    mode = "resume" if read_trace(run_dir).status == "running" else "collect"
                except MlabError:
                    shutil.rmtree(run_dir)
            elif run_dir.exists():
                shutil.rmtree(run_dir)  # stopped before its first trace: nothing to keep
            jobs.append(Job(key, name, task, agent, llm, seed, mode, self._config(task, agent, llm, seed)))
        status.pending = len(jobs)
        return jobs, status

    def _settings(self) -> WorkerSettings:
        """What a worker needs to build the same registry in the same environment as this driver."""
        env = {k: os.environ[k] for k in ("MLAB_HOME", "MLAB_LOAD_PLUGINS", "MLAB_DATA_DIR") if k in os.environ}
        if self.max_connections is not None:
            from mlab.core.llm.connections import slots_env

            env.update(slots_env(self.dir / CONNECTIONS_DIR, self.max_connections))
        return {"registry_factory": self.registry_factory, "sys_path": [os.getcwd()], "env": env}

    def _job_dict(self, job: Job) -> JobSpec:
        return {**self._settings(), "key": job.key, "mode": job.mode, "config": job.config.model_dump(),
                "run_dir": str(self.dir / RUNS_DIR / job.name),
                "result": str(self.dir / JOBS_DIR / f"{job.name}.result.json"),
                "log": str(self.dir / LOGS_DIR / f"{job.name}.log"),
                "intermediate": self.spec.intermediate, "compute": None}  # the engine grants it

    def _prepare_tasks(self, db: ResultsDB) -> None:
        """Prepare each task once, here: workers preparing the same task at once would race."""
        harness = Harness(self.registry)
        for task in self.tasks:
            harness.ensure_prepared(task)
            db.set_baseline(labelled(task), *known_baseline(task, harness.home))  # per -T values, as the runs
        # where each task's data (and the baseline `mlab baseline` records later) lies: by -T values too
        db.set_meta(TASK_DATA_META, {**task_data_keys(db), **{labelled(t): getattr(t, DATA_KEY, None)
                                                               or t.name.replace("/", "__") for t in self.tasks}})

    def _open_results(self) -> ResultsDB:
        """The bench's database, created whole under a temporary name: whoever finds results.db (`mlab report`
        while the bench runs) finds its tables too."""
        path = self.dir / DB_FILE
        if not path.exists():
            fresh = path.with_name(f".{DB_FILE}.{os.getpid()}.new")
            fresh.unlink(missing_ok=True)
            ResultsDB(fresh).close()  # closing the last connection folds the WAL into the file
            os.replace(fresh, path)
        return ResultsDB(path)

    def _engine(self) -> LocalEngine | RayEngine:
        from mlab.core.bench.engines import LocalEngine

        if self.engine_name == "ray":
            from mlab.core.bench.ray_engine import RayEngine

            return RayEngine(self.workers, self.ray_address, self.cpus_per_run, bench_dir=self.dir,
                             gpus_per_run=self.gpus_per_run, memory_per_run=self.memory_per_run)
        return LocalEngine(self.workers, self._settings(), self.dir / LOGS_DIR / "workers.log", self.slices)

    # running
    def run(self, on_update: Callable[[BenchStatus], None] | None = None, tick_s: float = 0.2) -> BenchStatus:
        for scratch in (PROGRESS_DIR, JOBS_DIR):  # an earlier bench's leftovers (its results are in the database)
            shutil.rmtree(self.dir / scratch, ignore_errors=True)
        for sub in (RUNS_DIR, PROGRESS_DIR, JOBS_DIR, LOGS_DIR):
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        db = self._open_results()
        try:
            self._prepare_tasks(db)
            db.set_meta("spec", {**self.spec.__dict__, "llms": self.spec.llms})
            db.set_meta("run_control", {"max_connections": self.max_connections, "retry_errors": self.retry_errors,
                                        "fail_fast": self.fail_fast})
            self.sandbox, mixed = bench_sandbox(self.registry, self.spec.sandbox, db)
            if mixed:
                print(f"mlab: warning: {mixed}", file=sys.stderr)
            jobs, status = self.plan(db)
            if not jobs:
                if on_update:
                    on_update(status)
                return status
            engine = self._engine()
            try:
                self._drive(engine, db, jobs, status, on_update, tick_s)
            finally:
                engine.close()
                judge_runs(db, TaskHome.from_env(), store=True)
            return status
        finally:
            db.close()

    def _drive(self, engine: LocalEngine | RayEngine, db: ResultsDB, jobs: list[Job], status: BenchStatus,
               on_update: Callable[[BenchStatus], None] | None, tick_s: float) -> None:
        queue = deque(jobs)
        running: dict[str, Job] = {}
        by_key = {job.key: job for job in jobs}
        live = _LiveReader(self.dir / RUNS_DIR)
        retries: dict[str, int] = {}  # run key -> times it was run again after an error, in this bench
        try:
            while (queue or running) and status.stopped_by is None:
                starting: list[Job] = []
                while queue and engine.capacity() - len(starting) > 0:
                    starting.append(queue.popleft())
                if starting:
                    with db.transaction():  # marked running before any of them can end
                        for job in starting:
                            self._started(db, job)
                    for job in starting:
                        running[job.key] = job
                    engine.submit([self._job_dict(job) for job in starting])
                ended = engine.poll()
                if ended:
                    with db.transaction():
                        for job_dict, result in ended:
                            job = by_key[job_dict["key"]]
                            running.pop(job.key, None)
                            if self._errored(result) and retries.get(job.key, 0) < self.retry_errors:
                                retries[job.key] = retries.get(job.key, 0) + 1
                                queue.appendleft(self._retry(db, job, result, retries[job.key], status))
                                continue
                            self._ended(db, job, result, status)
                            if self.fail_fast and self._errored(result) and status.stopped_by is None:
                                status.stopped_by = f"{job.key} ({result.get('end_reason')})"
                if status.stopped_by is not None:  # --fail-fast: the others stop as at a Ctrl-C, resumable
                    self._stop_all(engine, db, by_key, status)
                    status.never_started = len(queue)
                    queue.clear()
                status.pending = len(queue)
                if on_update:
                    shown = list(running.values())
                    status.running = [self._progress(job, engine.progress) for job in shown]
                    live.refresh(list(zip(shown, status.running, strict=True)))
                    on_update(status)
                time.sleep(tick_s)
            status.running = []
        except KeyboardInterrupt:
            status.interrupted = True
            stopped = engine.interrupt()
            with db.transaction():
                for job_dict, result in stopped:
                    self._ended(db, by_key[job_dict["key"]], result, status)
            status.running = []
            if on_update:
                on_update(status)
            raise

    def _stop_all(self, engine: LocalEngine | RayEngine, db: ResultsDB, by_key: dict[str, Job],
                  status: BenchStatus) -> None:
        stopped = engine.interrupt()
        with db.transaction():
            for job_dict, result in stopped:
                self._ended(db, by_key[job_dict["key"]], result, status)

    @staticmethod
    def _errored(result: Row | None) -> TypeGuard[Row]:
        """Whether a run ended in an error (of the harness, the agent's code or its model), not just without an
        improvement: only such a run is retried or stops a --fail-fast bench."""
        return result is not None and result.get("status") == "failed"

    def _retry(self, db: ResultsDB, job: Job, result: Row, retry: int, status: BenchStatus) -> Job:
        """Keep the errored attempt's folder under attempts/ and give back the run, to start afresh."""
        row = db.run(job.key) or {}
        run_dir = self.dir / RUNS_DIR / job.name
        kept = f"{ATTEMPTS_DIR}/{job.name}.{row.get('attempts') or 0}"
        if run_dir.exists():
            aside = self.dir / kept
            shutil.rmtree(aside, ignore_errors=True)
            aside.parent.mkdir(parents=True, exist_ok=True)
            os.replace(run_dir, aside)
        (self.dir / JOBS_DIR / f"{job.name}.result.json").unlink(missing_ok=True)  # not taken for the retry's
        reason = result.get("end_reason")
        found = db.conn.execute("SELECT value FROM meta WHERE key = 'retried'").fetchone()
        entry = {"key": job.key, "retry": retry, "of": self.retry_errors, "end_reason": reason, "kept_in": kept}
        db.set_meta("retried", [*(json.loads(found[0]) if found else []), entry])
        status.retried += 1
        status.tokens += (result.get("prompt_tokens") or 0) + (result.get("completion_tokens") or 0)
        status.add_cost(result.get("cost_usd") if "cost_usd" in result else 0.0)
        status.last.append(f"{job.key}: errored ({reason}); retry {retry} of {self.retry_errors}, the errored "
                           f"attempt kept in {kept}")
        return Job(job.key, job.name, job.task, job.agent, job.llm, job.seed, "start", job.config)

    def _started(self, db: ResultsDB, job: Job) -> None:
        row = db.run(job.key)
        db.upsert_run(job.key, task=job.task, agent=job.agent, llm=job.llm, seed=job.seed,
                      run_dir=f"{RUNS_DIR}/{job.name}", status="running",
                      attempts=(row["attempts"] if row else 0) + (job.mode == "start"),
                      config=job.config.model_dump_json(), label=job.config.label)

    def _ended(self, db: ResultsDB, job: Job, result: Row | None, status: BenchStatus) -> None:
        if result is None:
            db.upsert_run(job.key, status="interrupted")
            status.interrupted_runs += 1
            status.last.append(f"{job.key}: interrupted (resumable)")
            return
        versions = result.pop("plugin_versions", {}) or {}
        steps = result.pop("step_scores", []) or []
        result.pop("traceback", None)
        db.upsert_run(job.key, **{k: v for k, v in result.items() if k in _RESULT_FIELDS})
        db.set_plugin_versions(job.key, versions)
        if steps:
            db.set_step_scores(job.key, [tuple(s) for s in steps])
        failed = result["status"] == "failed"
        status.failed += failed
        status.done += not failed
        status.tokens += (result.get("prompt_tokens") or 0) + (result.get("completion_tokens") or 0)
        status.add_cost(result.get("cost_usd"))
        score = result.get("final_score")
        status.last.append(f"{job.key}: {result['status']} ({result.get('end_reason')}); score "
                           f"{'none' if score is None else f'{score:.6g}'}")

    def _progress(self, job: Job, reported: dict[str, dict[str, Any]]) -> RunProgress:
        """The run's last step as its worker reported it (the step in progress is added by _LiveReader)."""
        data = reported.get(job.name) or {}
        return RunProgress(key=job.key, max_steps=job.config.max_steps, step=data.get("step", 0),
                           tokens=data.get("tokens", 0), cost_usd=data.get("cost_usd", 0.0),
                           calls=data.get("calls", 0), unpriced_calls=data.get("unpriced_calls", 0),
                           action=data.get("action", ""), started=data.get("started", 0.0))


class _LiveReader:
    """The step each run is in the middle of (its live.json), for the view: a few run folders read per tick, in
    turn, so a tick's cost does not grow with the number of runs; each run keeps what was last read of it until
    its own turn comes again or its next step is reported."""

    def __init__(self, runs_dir: Path):
        self.runs_dir = runs_dir
        self.seen: dict[str, LiveState] = {}  # run key -> its live state as last read
        self.turn = 0

    def refresh(self, running: list[tuple[Job, RunProgress]]) -> None:
        if running:
            count = min(LIVE_READS_PER_TICK, len(running))
            start = self.turn % len(running)
            for job, _ in (running + running)[start:start + count]:
                found = read_live(self.runs_dir / job.name)  # the step in progress, not the last one done
                if found is None:
                    self.seen.pop(job.key, None)
                else:
                    self.seen[job.key] = found
            self.turn = start + count
        keys = {job.key for job, _ in running}
        for key in [k for k in self.seen if k not in keys]:
            del self.seen[key]
        for job, progress in running:
            live = self.seen.get(job.key)
            if live is None or live["step"] <= progress.step:
                continue  # nothing read yet, or a step that has since been reported done
            progress.step, progress.action, progress.step_started = live["step"], live["action"] or "", live["started"]
            progress.started = progress.started or live["started"]


_RESULT_FIELDS = ("status", "end_reason", "failure", "incidents", "started_at", "time_s", "steps", "prompt_tokens",
                  "completion_tokens", "cost_usd", "final_score", "final_score_error", "metric", "higher_is_better",
                  "config", "llm_calls", "success_margin", "label", "hardware")
