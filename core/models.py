"""Pydantic models of runs: actions, steps, the trace and the lifecycle event payloads."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from mlab.core.hardware import Hardware


class Action(BaseModel):
    """What an agent asks the environment to do next."""

    name: str
    args: dict[str, Any] = Field(default_factory=dict)
    # The agent's own parsed response entries (reflection, plan, thought...) kept for the trace.
    entries: dict[str, Any] = Field(default_factory=dict)
    raw_response: str | None = None


class StopRun(BaseModel):
    """Returned by an agent instead of an Action when it gives up (e.g. too many invalid responses)."""

    reason: str


class ToolCall(BaseModel):
    """A tool call a model asked for: its id (which the tool's result names), the tool and its arguments as the
    JSON text the model wrote (kept as written: it may not parse)."""

    id: str
    name: str
    arguments: str = "{}"


class ContentPart(BaseModel):
    """One part of a message's content: text, or an image given by URL (a data: URL holds the bytes)."""

    type: Literal["text", "image"]
    text: str = ""
    image_url: str = ""


class Message(BaseModel):
    """One chat message. `content` is its text (all its text parts joined); `parts`, when set, is the whole
    content in order, images included. An assistant's `tool_calls`; a tool result (role "tool") names the call it
    answers by `tool_call_id`."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    parts: list[ContentPart] = Field(default_factory=list)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None

    def record(self) -> dict[str, Any]:
        """As logged: role and content, then only the fields in use (a text message stays {role, content})."""
        found: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.parts:
            found["parts"] = [p.model_dump(exclude_defaults=True) for p in self.parts]
        if self.tool_calls:
            found["tool_calls"] = [c.model_dump() for c in self.tool_calls]
        if self.tool_call_id is not None:
            found["tool_call_id"] = self.tool_call_id
        return found

    @property
    def is_text(self) -> bool:
        return not (self.parts and any(p.type != "text" for p in self.parts)) and not self.tool_calls \
            and self.role != "tool"


class Completion(BaseModel):
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    model: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: str | None = None  # OpenAI's names: stop, length, tool_calls, content_filter


class Usage(BaseModel):
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0  # of the priced calls only
    unpriced_calls: int = 0  # calls whose price is unknown: their cost is not in cost_usd

    def add(self, completion: Completion) -> None:
        self.calls += 1
        self.prompt_tokens += completion.prompt_tokens
        self.completion_tokens += completion.completion_tokens
        if completion.cost_usd is None:
            self.unpriced_calls += 1
        else:
            self.cost_usd += completion.cost_usd

    @property
    def cost_known(self) -> bool:
        """True when every call had a price, so cost_usd is the whole cost."""
        return self.unpriced_calls == 0

    def cost_text(self) -> str:
        """The cost as shown to people: "unknown" rather than a made-up $0 when prices are missing."""
        if self.unpriced_calls == 0:
            return f"${self.cost_usd:.4f}"
        if self.unpriced_calls >= self.calls:
            return "unknown"
        return f"${self.cost_usd:.4f} + unknown ({self.unpriced_calls} unpriced calls)"

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class TaskParam(BaseModel):
    """A parameter a task takes (`-T NAME=VALUE`): its type, the value when none is given, and a line of help."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    type: Literal["str", "int", "float", "bool"] = "str"
    default: str | int | float | bool
    help: str = ""
    # prepare reads it: each value other than the default has prepared data (and a baseline) of its own
    changes_data: bool = True


class ComputeSlice(BaseModel):
    """The share of the machine a run was granted (mlab run --cpus/--memory, a bench's --cpus-per-run,
    --gpus-per-run, --memory-per-run); what its sandboxed commands were held to. None: not bounded."""

    cpus: float | None = Field(default=None, gt=0)
    cpu_set: list[int] | None = None  # the CPUs its commands ran on
    gpus: list[int] | None = None  # N of /dev/nvidiaN: the GPUs it held alone
    memory_bytes: int | None = Field(default=None, gt=0)


class RunConfig(BaseModel):
    task: str
    # A task run from its folder (`--task ./folder`, not installed): the folder, and a digest of its files, so the
    # run's task is found again (eval, resume) and a folder changed since is noticed.
    task_folder: str | None = None
    task_digest: str | None = None
    task_params: dict[str, Any] = Field(default_factory=dict)  # every declared parameter's value (-T)
    agent: str
    llm: str | None = None
    fast_llm: str | None = None
    edit_llm: str | None = None
    max_steps: int = 50
    max_time_s: float = 5 * 3600
    action_timeout_s: float = 2 * 3600
    seed: int = 0
    label: str | None = None  # the method's name in reports (--label); None: agent (model)
    tags: list[str] = Field(default_factory=list)  # --tag: names to select runs by (mlab runs --tag)
    meta: dict[str, str] = Field(default_factory=dict)  # --meta KEY=VALUE: the user's notes on the run
    sandbox: str = "auto"
    sandbox_confined: bool | None = None  # set by the runner: whether the sandbox that ran it confined agent code
    agent_options: dict[str, Any] = Field(default_factory=dict)
    interactive: bool = False
    allow_validate: bool = False  # the agent may score predictions on the task's validation split
    # LLM settings: backend endpoint and timeout, retry policy overrides (core.llm_retry.RetryPolicy fields),
    # budgets (tokens counted prompt + completion; cost in USD) and the response cache folder.
    llm_api_base: str | None = None
    llm_timeout_s: float | None = None
    llm_retry: dict[str, float] = Field(default_factory=dict)
    max_tokens: int | None = None
    max_cost: float | None = None
    max_calls: int | None = None  # model calls a run may make (--max-calls)
    max_connections: int | None = None  # the run's model requests in flight at once (mlab run --max-connections)
    llm_cache: str | None = None
    # Generation parameters by role (main, fast, edit): temperature, top_p, seed, max_completion_tokens, stop,
    # and whatever else the backend takes (core.llm.generation); prices by role, USD per million tokens
    # [prompt, completion], for models whose backend reports no price.
    llm_params: dict[str, dict[str, Any]] = Field(default_factory=dict)
    llm_price: dict[str, list[float]] = Field(default_factory=dict)
    compute: ComputeSlice | None = None  # the slice of the machine granted to the run


class Step(BaseModel):
    index: int
    action: Action
    observation: str
    is_error: bool = False
    started_at: float
    duration_s: float
    snapshot: str  # name of the workspace manifest after this step
    agent_state: dict[str, Any] = Field(default_factory=dict)
    env_state: dict[str, Any] = Field(default_factory=dict)
    llm_state: dict[str, Any] = Field(default_factory=dict)
    usage: Usage = Field(default_factory=Usage)


RunStatus = Literal["running", "finished", "failed"]


class Trace(BaseModel):
    run_id: str
    config: RunConfig
    status: RunStatus = "running"
    end_reason: str | None = None
    steps: list[Step] = Field(default_factory=list)
    started_at: float
    total_time_s: float = 0.0
    usage: Usage = Field(default_factory=Usage)
    final_snapshot: str | None = None
    final_score: float | None = None
    final_score_error: str | None = None
    errors: list[str] = Field(default_factory=list)
    plugin_versions: dict[str, str] = Field(default_factory=dict)
    devices: list[str] = Field(default_factory=list)  # GPU device nodes agent code could use
    hardware: Hardware | None = None  # what the run had when it started (None: recorded before mlab did)
    held_out: list[str] = Field(default_factory=list)  # training files the run got without the validation rows


class RunStarted(BaseModel):
    run_dir: str
    config: RunConfig
    resumed_from_step: int = 0


class StepFinished(BaseModel):
    run_dir: str
    step: Step


class RunFinished(BaseModel):
    run_dir: str
    status: str
    end_reason: str | None
    steps: int
    final_score: float | None
    usage: Usage
    total_time_s: float


class LLMCallFinished(BaseModel):
    run_dir: str | None
    role: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    latency_s: float
    retries: int = 0
    cached: bool = False
    step: int | None = None
    error: str | None = None  # set when the call failed for good


class TaskPrepared(BaseModel):
    task: str
    home: str  # the task home the data went to
    source_dir: str | None  # the local copy it was prepared from, if any
    seconds: float


class BaselineMeasured(BaseModel):
    task: str
    sandbox: str
    scores: list[float | None]  # one per starter run; None for a run without a valid score
    baseline: float  # the mean of the valid ones, the number improvement is measured against
    recorded: bool  # written to the task home (False for check-task's own runs)


class SubmissionScored(BaseModel):
    task: str
    run_dir: str | None  # None when a workspace outside any run was scored (baseline, check-task)
    snapshot: str | None
    score: float | None
    error: str | None  # why there is no score
