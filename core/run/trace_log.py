"""The append-only trace: steps.jsonl, the states it names, and trace.json kept current in place.

A run's trace is written as it happens, at a cost that does not grow with the run:

- `steps.jsonl` holds one JSON line per record, appended and synced by one syncfs, which makes the step's
  unsynced snapshot durable with it: a `run` record (the trace without its steps, and how many steps it keeps)
  when a run starts, resumes or ends, and a `step` record per step (its syncfs runs while the run goes on to its
  next model call, and ends before the next line is written). A step is committed when its line is; a torn last
  line (a kill while appending) is ignored and cut off before the next append, and that step is done again.
- Agent, environment and LLM states are content-addressed JSON objects (named by the sha256 of their
  compact JSON), each the changes from the previous step's state (`base` names it): an unchanged state is the
  same name and costs nothing, a grown list stores only its new items, a dict only its changed keys. An object
  is a `state` record of the log, appended in the same write as the first step line naming it (so one
  sync makes both durable); a step names its states as {"$state": "<sha256>"}. A state whose object is
  missing or does not match its name stays a reference when loaded, and a resume does that step again.
- `trace.json` stays the readable whole, current after every step for whatever reads it while a run goes on:
  one step a line, states as references. Each step rewrites it only from the previous step on (a write of
  about one step, whatever the size of the states), in place and not fsynced (steps.jsonl is what survives a
  crash); it is rewritten whole, atomically (after the log's sync, itself unsynced), with the last step's
  states inline, when a run starts, resumes or ends.

load_trace() reads trace.json, adds committed steps the log holds beyond it (a kill between the two writes)
and resolves every state; a trace.json that does not parse (torn by a kill mid-write, lost in a power cut) is
rebuilt from the log. Runs written before the log existed (trace.json only, states inline) load as before.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlab.core.errors import MlabError
from mlab.core.fs.atomic import write_atomic
from mlab.core.fs.dirfd import NotRegular, pwrite_all, read_regular_at
from mlab.core.fs.durable import Flushing, flush_later, sync_filesystem
from mlab.core.models import Step, Trace

TRACE_FILE = "trace.json"
STEPS_FILE = "steps.jsonl"
MAX_STORED_CHARS = 200_000  # longer strings an agent sent are shortened in the trace (read whole by viewers)
STATE_REF = "$state"  # {"$state": digest} stands for a state stored as an object of the log
STATE_FIELDS = ("agent_state", "env_state", "llm_state")
# Fields of trace.json written after the steps: they change every step, the header before the steps does not.
TAIL_FIELDS = ("status", "end_reason", "total_time_s", "usage", "final_snapshot", "final_score",
               "final_score_error")


def json_safe(value: Any, limit: int | None = MAX_STORED_CHARS, depth: int = 0) -> Any:
    """value as plain JSON data: valid UTF-8 strings (shortened past limit), finite numbers, str keys;
    anything else becomes its repr."""
    if isinstance(value, str):
        text = value.encode("utf-8", "backslashreplace").decode("utf-8")
        if limit is not None and len(text) > limit:
            text = text[:limit] + f"[... {len(text) - limit} characters left out of the trace]"
        return text
    if value is None or isinstance(value, bool) or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth > 50:
        return "[... nested too deeply]"
    if isinstance(value, dict):
        return {json_safe(k if isinstance(k, str) else repr(k), limit): json_safe(v, limit, depth + 1)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v, limit, depth + 1) for v in value]
    return json_safe(repr(value)[:1000], limit)


class RefusedFile(MlabError):
    """A run file that is a symlink or not a regular file: a run folder is untrusted, so it is never read."""


def read_run_file(run_dir: Path, name: str, limit: int | None = None) -> bytes | None:
    """A file of the run folder, never through a symlink (core.fs.dirfd.read_regular_at, as `mlab view` reads):
    None when it is missing, RefusedFile when it is a link or no regular file, MlabError when it is unreadable."""
    path = Path(run_dir) / name
    try:
        return read_regular_at(run_dir, name, limit)
    except NotRegular:
        raise RefusedFile(f"{path} is a symlink or not a regular file, so it was not read") from None
    except OSError as exc:
        raise MlabError(f"cannot read {path}: {exc.strerror or exc}") from None


def state_ref(digest: str) -> dict[str, str]:
    return {STATE_REF: digest}


def ref_of(value: Any) -> str | None:
    """The digest a stored step names instead of a state, or None for a state given inline."""
    digest = value.get(STATE_REF) if isinstance(value, dict) and len(value) == 1 else None
    return digest if isinstance(digest, str) else None


def _dumps(value: Any) -> str:
    """Compact ASCII JSON (it round-trips byte for byte, so an object's digest can be checked after parsing);
    what plain JSON cannot hold (NaN, odd keys, objects) is stored as text."""
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return json.dumps(json_safe(value, limit=None), separators=(",", ":"))


class StateObjects:
    """Content-addressed JSON objects kept in the log itself: a `state` record {"digest", "data"} written in
    the same append as the first step line naming it, so one sync makes both durable."""

    def __init__(self, stored: dict[str, Any] | None = None):
        self.stored = stored if stored is not None else {}  # digest -> data, as parsed from the log
        self._checked: set[str] = set()
        self.pending: list[bytes] = []  # records of objects not yet appended

    def put(self, data: str) -> str:
        digest = hashlib.sha256(data.encode()).hexdigest()
        if digest not in self.stored:
            self.stored[digest] = None  # known; read back from the log when needed
            self.pending.append(f'{{"kind":"state","digest":"{digest}","data":{data}}}\n'.encode())
        return digest

    def take_pending(self) -> bytes:
        records, self.pending = b"".join(self.pending), []
        return records

    def forget(self, records: bytes) -> None:
        """Objects whose records did not reach the log (their append failed) are not known after all."""
        for record in records.splitlines():
            self.stored.pop(json.loads(record)["digest"], None)

    def get(self, digest: str) -> dict[str, Any] | None:
        """The object as parsed JSON, or None when the log has no intact object of that name."""
        data = self.stored.get(digest)
        if not isinstance(data, dict):
            return None
        if digest not in self._checked:
            if hashlib.sha256(_dumps(data).encode()).hexdigest() != digest:
                return None  # edited or damaged since it was written
            self._checked.add(digest)
        return data


# ---- states as chains of changes --------------------------------------------------------------------

def _changes(old: dict[str, Any], new: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """What turns `old` into `new`, key by key: a grown list by its new items, a dict by its changed keys."""
    changes: dict[str, Any] = {}
    for key, value in new.items():
        before: Any = old.get(key)
        if _grown(before, value):  # checked first: a grown list is compared once, not twice
            changes[key] = {"append": value[len(before):]}
        elif key in old and before == value:
            continue
        elif isinstance(value, dict) and isinstance(before, dict):
            changes[key] = _dict_changes(before, value)
        else:
            changes[key] = {"set": value}
    return changes, [key for key in old if key not in new]


def _grown(before: Any, value: Any) -> bool:
    return (isinstance(value, list) and isinstance(before, list) and len(value) > len(before)
            and value[:len(before)] == before)


def _dict_changes(before: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    """A dict's changed keys; a value that is a list grown at its end (an undo history's versions of one file) by
    its new items, so a list extended every step is not stored whole every step."""
    update: dict[str, Any] = {}
    extend: dict[str, list[Any]] = {}
    for k, v in value.items():
        if k not in before:
            update[k] = v
        elif _grown(before[k], v):
            extend[k] = v[len(before[k]):]
        elif before[k] != v:
            update[k] = v
    change: dict[str, Any] = {"update": update, "remove": [k for k in before if k not in value]}
    if extend:
        change["extend"] = extend
    return change


def _apply(base: dict[str, Any], record: dict[str, Any]) -> dict[str, Any]:
    state = dict(base)
    for key in record.get("removed", []):
        state.pop(key, None)
    for key, change in record.get("changes", {}).items():
        if "append" in change:
            state[key] = list(state.get(key, [])) + change["append"]
        elif "update" in change:
            merged = {k: v for k, v in state.get(key, {}).items() if k not in change.get("remove", [])}
            merged.update(change["update"])
            for k, items in change.get("extend", {}).items():
                merged[k] = list(merged.get(k, [])) + items
            state[key] = merged
        else:
            state[key] = change.get("set")
    return state


class StateChain:
    """One kind of state (the agent's, say) step after step: each changed state is stored as its changes from
    the one before; the chain keeps the last state as stored (a private, JSON-plain copy) to compare with."""

    def __init__(self, objects: StateObjects):
        self.objects = objects
        self.ref: str | None = None
        self.value: dict[str, Any] = {}

    def store(self, state: dict[str, Any]) -> str:
        base = self.value if self.ref is not None else {}
        changes, removed = _changes(base, state)
        if self.ref is not None and not changes and not removed:
            return self.ref  # unchanged: costs nothing
        data = _dumps({"base": self.ref, "changes": changes, "removed": removed})
        self.ref = self.objects.put(data)
        self.value = _apply(base, json.loads(data))
        return self.ref


class StateReader:
    """Resolves stored states, each object read and checked once."""

    def __init__(self, objects: StateObjects):
        self.objects = objects
        self._resolved: dict[str, dict[str, Any] | None] = {}

    def resolve(self, digest: str) -> dict[str, Any] | None:
        """The state `digest` names, or None when an object of its chain is missing or torn."""
        chain: list[tuple[str, dict[str, Any]]] = []
        at: str | None = digest
        while at is not None and at not in self._resolved:
            record = _parse_record(self.objects.get(at))
            if record is None:
                for name, _ in chain:
                    self._resolved[name] = None
                self._resolved[at] = None
                return None
            chain.append((at, record))
            at = record.get("base")
        state = self._resolved.get(at) if at is not None else {}
        for name, record in reversed(chain):
            state = None if state is None else _apply(state, record)
            self._resolved[name] = state
        return state


def _parse_record(record: dict[str, Any] | None) -> dict[str, Any] | None:
    if record is None:
        return None
    base = record.get("base", 0)
    changes, removed = record.get("changes"), record.get("removed")
    valid = (base is None or isinstance(base, str)) and isinstance(changes, dict) and isinstance(removed, list)
    return record if valid else None


# ---- reading --------------------------------------------------------------------------------------

@dataclass
class LogContents:
    header: dict[str, Any] | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    objects: dict[str, Any] = field(default_factory=dict)  # state objects by digest
    committed_bytes: int = 0  # up to the end of the last whole line


def read_log(run_dir: Path) -> LogContents | None:
    """The committed records of steps.jsonl (None when the run has none): a step record replaces any step at
    or after its index (a step done again), a run record sets the trace's fields and how many steps it keeps."""
    path = Path(run_dir) / STEPS_FILE
    data = read_run_file(run_dir, STEPS_FILE)
    if data is None:
        return None
    contents = LogContents()
    lines = data.split(b"\n")
    offset = 0
    for number, line in enumerate(lines[:-1], 1):  # what follows the last newline is a torn line
        try:
            _take_record(contents, json.loads(line))
        except (ValueError, KeyError, TypeError, AttributeError):
            if number == len(lines) - 1:
                break  # a torn last line: that step was not committed
            raise MlabError(f"{path} is damaged at line {number}") from None
        offset += len(line) + 1
        contents.committed_bytes = offset
    return contents


def _take_record(contents: LogContents, record: dict[str, Any]) -> None:
    kind = record["kind"]
    if kind == "step":
        step = record["step"]
        index = int(step["index"])
        contents.steps = [s for s in contents.steps if s["index"] < index] + [step]
        if contents.header is not None:
            contents.header.update(record.get("trace", {}))
    elif kind == "state":
        contents.objects[str(record["digest"])] = record["data"]
    elif kind == "run":
        contents.header = dict(record["trace"])
        del contents.steps[int(record.get("steps", len(contents.steps))):]
    else:
        raise ValueError(f"unknown record {kind!r}")


def read_trace_json(run_dir: Path) -> dict[str, Any] | None:
    """trace.json as parsed JSON, or None when it is missing, unreadable or does not parse; RefusedFile when it is a
    symlink or not a regular file."""
    try:
        data = json.loads(read_run_file(run_dir, TRACE_FILE) or b"")
    except RefusedFile:
        raise
    except (MlabError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def load_raw(run_dir: Path, log: LogContents | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The trace's fields and its steps as stored (states by reference or inline): trace.json plus the
    committed steps the log (as read_log gave it) holds beyond it, or the log alone when trace.json does not
    parse."""
    path = Path(run_dir) / TRACE_FILE
    document = read_trace_json(run_dir)
    if document is None:
        if log is None or log.header is None:
            data = read_run_file(run_dir, TRACE_FILE)
            if data is None:
                raise MlabError(f"{str(run_dir)!r} is not a run directory (no {TRACE_FILE})")
            try:
                json.loads(data)
            except ValueError as exc:
                raise MlabError(f"{path} is not a valid trace: {str(exc).splitlines()[0]}") from exc
            raise MlabError(f"{path} is not a valid trace: not a JSON object")
        return dict(log.header), list(log.steps)
    header = {k: v for k, v in document.items() if k != "steps"}
    steps = document.get("steps")
    steps = list(steps) if isinstance(steps, list) else []
    if log is not None and log.header is not None:
        last = steps[-1].get("index", 0) if steps and isinstance(steps[-1], dict) else 0
        ahead = [s for s in log.steps if isinstance(last, int) and s["index"] > last]
        if ahead:  # killed after the line was committed, before trace.json was updated
            steps += ahead
            header.update({k: log.header[k] for k in ("usage", "total_time_s") if k in log.header})
    return header, steps


def resolve_states(steps: list[dict[str, Any]], reader: StateReader) -> list[dict[str, Any]]:
    """Steps with every state given inline; a state whose objects are missing or torn stays a reference."""
    out = []
    for step in steps:
        if isinstance(step, dict) and any(ref_of(step.get(k)) for k in STATE_FIELDS):
            step = dict(step)
            for key in STATE_FIELDS:
                digest = ref_of(step.get(key))
                if digest is not None:
                    state = reader.resolve(digest)
                    if state is not None:
                        step[key] = state
        out.append(step)
    return out


def unresolved(step: Step) -> list[str]:
    """The states of a loaded step that could not be read (missing or torn objects)."""
    return [key for key in STATE_FIELDS if ref_of(getattr(step, key)) is not None]


def load_trace(run_dir: Path) -> Trace:
    """The run's whole trace, every state inline (see the module doc for where each part comes from)."""
    try:
        log = read_log(run_dir)
    except RefusedFile:
        raise  # a link is no damage to work around: it may hold another run's steps, and a resume would write there
    except MlabError:
        if read_trace_json(run_dir) is None:
            raise
        log = None  # a damaged log: trace.json alone still reads (a resume says what is wrong)
    header, steps = load_raw(run_dir, log)
    steps = resolve_states(steps, StateReader(StateObjects(log.objects if log else {})))
    try:
        return Trace.model_validate({**header, "steps": steps})
    except ValueError as exc:
        raise MlabError(f"{Path(run_dir) / TRACE_FILE} is not a valid trace: {str(exc).splitlines()[0]}") from exc


# ---- writing --------------------------------------------------------------------------------------

def _step_text(step: Step) -> str:
    try:
        return step.model_dump_json()
    except ValueError:  # something unserializable got in: store it as text
        return _dumps(json_safe(step.model_dump(), limit=None))


def _trace_fields(trace: Trace, names: tuple[str, ...] | None = None, exclude: tuple[str, ...] = ()) -> str:
    include = set(names) if names is not None else None
    try:
        return trace.model_dump_json(include=include, exclude={"steps", *exclude})
    except ValueError:
        return _dumps(json_safe(trace.model_dump(include=include, exclude={"steps", *exclude}), limit=None))


class TraceLog:
    """Writes a run's trace as it goes: begin() when a run starts or resumes, append() per step (the step is
    committed when it returns), finish() when it ends."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.objects = StateObjects()
        self.chains = {key: StateChain(self.objects) for key in STATE_FIELDS}
        self._log_fd: int | None = None
        self._log_size = 0
        self._flushing: Flushing | None = None  # the last step's flush, still running
        self._texts: list[str] = []  # each step as trace.json keeps it, states by reference
        self._json_fd: int | None = None
        self._last_at = 0  # where trace.json's last step begins
        self._suffix = b""  # trace.json from there to its end, as on disk

    # ---- set-up ---------------------------------------------------------------------------------
    def begin(self, trace: Trace) -> None:
        """Open the log for a new run or a resumed one: cuts a torn last line, records in the log any of the
        trace's steps it lacks (a run from before the log), then rewrites trace.json whole."""
        self.close()
        log = read_log(self.run_dir) or LogContents()
        self.objects.stored = log.objects
        path = self.run_dir / STEPS_FILE
        self._log_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        os.ftruncate(self._log_fd, log.committed_bytes)
        self._log_size = log.committed_bytes
        logged = {s["index"]: s for s in log.steps}
        _header, stored = load_raw(self.run_dir, log) if trace.steps else ({}, [])
        in_json = {s.get("index"): s for s in stored if isinstance(s, dict)}
        self._texts = []
        missing: list[str] = []
        for number, step in enumerate(trace.steps, 1):
            if number == len(trace.steps):
                # The last step's states as loaded (maybe inline from trace.json, its objects torn) start new
                # chains: later steps never build on an object that was not read back whole.
                for chain in self.chains.values():
                    chain.ref, chain.value = None, {}
                known = None
            else:
                known = _stored_text(step, (logged.get(step.index), in_json.get(step.index)))
            # None: the last step, or one from before the log with its states inline: store them now
            text = known if known is not None else _step_text(self._by_reference(step))
            self._texts.append(text)
            if missing or step.index not in logged or _dumps(logged[step.index]) != text:
                missing.append(text)  # a step record replaces the log's steps from its index on
        self._point_chains_at(trace)
        records = [f'{{"kind":"step","step":{text}}}\n' for text in missing]
        records.append(self._run_record(trace))
        self._append(self.objects.take_pending() + "".join(records).encode())  # and the initial snapshot
        self._rewrite(trace)

    def _point_chains_at(self, trace: Trace) -> None:
        """The next step's states are stored as changes from the last step's."""
        last = json.loads(self._texts[-1]) if self._texts else {}
        for key, chain in self.chains.items():
            digest = ref_of(last.get(key))
            chain.ref = digest
            chain.value = json.loads(_dumps(getattr(trace.steps[-1], key))) if digest else {}

    def _by_reference(self, step: Step) -> Step:
        return step.model_copy(update={key: state_ref(self.chains[key].store(getattr(step, key)))
                                       for key in STATE_FIELDS})

    def _run_record(self, trace: Trace) -> str:
        return f'{{"kind":"run","steps":{len(trace.steps)},"trace":{_trace_fields(trace)}}}\n'

    # ---- a step ---------------------------------------------------------------------------------
    def append(self, trace: Trace) -> None:
        """Commit trace's last step: its states stored, its line appended and synced, then trace.json updated.
        On an error (a full disk) nothing of it stays: the log and trace.json are as before."""
        step = trace.steps[-1]
        text = _step_text(self._by_reference(step))
        moving = f"{self._texts[-1]},\n".encode() if self._texts else b""
        tail = _trace_fields(trace, TAIL_FIELDS)
        line = f'{{"kind":"step","step":{text},"trace":{tail}}}\n'.encode()
        before = self._log_size
        objects = self.objects.take_pending()  # new states go in the same write, before the line naming them
        try:
            self._append(objects + line, wait=False)
            self._update_json(moving, text.encode(), tail)
        except BaseException:
            self._truncate_log(before)
            self.objects.forget(objects)
            for chain in self.chains.values():  # the next step's states are stored whole, built on nothing lost
                chain.ref, chain.value = None, {}
            raise
        self._texts.append(text)

    def _append(self, data: bytes, wait: bool = True) -> None:
        """Append to the log and flush: the line and what the run wrote unsynced before it (the step's snapshot
        and its objects) made durable by one syncfs. A crash before it ends may keep any part of them; a resume
        finds a torn line, state or snapshot and does that step again. wait=False (a step): the flush runs in
        the background while the run goes on to its next model call, and the next append waits for it first, so
        a step's line never reaches the disk before the step before it is whole."""
        fd = self._log_fd
        if fd is None:
            raise RuntimeError("the trace log is used before begin()")
        self.settle()
        before = self._log_size
        try:
            pwrite_all(fd, data, before)
            if wait:
                sync_filesystem(fd)
            else:
                self._flushing = flush_later(fd)
        except BaseException:
            self._truncate_log(before)
            raise
        self._log_size = before + len(data)

    def settle(self) -> None:
        """Wait for the last step's flush (raising its error: that step may not be durable)."""
        flushing, self._flushing = self._flushing, None
        if flushing is not None:
            flushing.wait()

    def _truncate_log(self, size: int) -> None:
        if self._log_fd is not None:
            with suppress(OSError):  # left torn: the next begin() cuts it
                os.ftruncate(self._log_fd, size)
            self._log_size = size

    def _update_json(self, moving: bytes, last: bytes, tail: str) -> None:
        """Rewrite trace.json from the previous step on, both steps' states by reference (inline, they grow with
        the run and so would each step's write), then the fields after the steps. Padded with spaces so no
        truncation (and no moment of a torn file) is needed."""
        fd = self._json_fd
        if fd is None:
            raise RuntimeError("trace.json is updated before begin()")
        new = moving + last + _closing(tail)
        if len(new) < len(self._suffix):
            new = new[:-1] + b" " * (len(self._suffix) - len(new)) + b"\n"
        try:
            pwrite_all(fd, new, self._last_at)
        except BaseException:
            with suppress(OSError):  # the bytes there were written before, so putting them back needs no new space
                pwrite_all(fd, self._suffix, self._last_at)
                os.ftruncate(fd, self._last_at + len(self._suffix))
            raise
        self._last_at += len(moving)
        self._suffix = new[len(moving):]

    # ---- whole rewrites -------------------------------------------------------------------------
    def _rewrite(self, trace: Trace) -> None:
        """trace.json whole, atomically: the header, one step a line (the last inline), the tail fields."""
        head = _trace_fields(trace, exclude=TAIL_FIELDS)[:-1].encode() + b',"steps":[\n'
        body = b"".join(f"{text},\n".encode() for text in self._texts[:-1])
        last = _step_text(trace.steps[-1]).encode() if trace.steps else b""
        suffix = last + _closing(_trace_fields(trace, TAIL_FIELDS))
        path = self.run_dir / TRACE_FILE
        # Not synced: written after the log's flush, and rebuilt from the log when a crash tore it.
        write_atomic(path, head + body + suffix, sync=False)
        if self._json_fd is not None:
            os.close(self._json_fd)
        self._json_fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        self._last_at = len(head) + len(body)
        self._suffix = suffix

    def finish(self, trace: Trace) -> None:
        """The run ended: its end recorded in the log, trace.json rewritten whole and made durable."""
        self._append(self._run_record(trace).encode())
        self._rewrite(trace)

    def close(self) -> None:
        with suppress(OSError, RuntimeError):  # a run that stopped before its next commit: it is resumable
            self.settle()
        for fd in (self._log_fd, self._json_fd):
            if fd is not None:
                os.close(fd)
        self._log_fd = self._json_fd = None


def _stored_text(step: Step, candidates: tuple[dict[str, Any] | None, ...]) -> str | None:
    """The first stored form of `step` whose states are all references and whose other fields are the step's
    (so an edit made to trace.json by hand is kept), as text; None when there is none."""
    plain: dict[str, Any] | None = None
    for raw in candidates:
        if raw is None or not all(ref_of(raw.get(k)) for k in STATE_FIELDS):
            continue
        if plain is None:
            plain = {k: v for k, v in json.loads(_step_text(step)).items() if k not in STATE_FIELDS}
        if {k: v for k, v in raw.items() if k not in STATE_FIELDS} == plain:
            return _dumps(raw)
    return None


def _closing(tail: str) -> bytes:
    """The end of trace.json after its last step: the tail fields, with the object's opening brace dropped."""
    return b"\n]," + tail[1:].encode() + b"\n"


