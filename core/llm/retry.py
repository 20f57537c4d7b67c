"""Retrying transient LLM failures, for every backend: exponential backoff with jitter, Retry-After honoured.

Backends classify their failures: LLMError(transient=True) may be retried (rate limits, 5xx, timeouts, dropped
connections, garbled responses); anything else fails at once. A backend may set `retry_after` (seconds) on the
error when the server said how long to wait.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

import tenacity

from mlab.core.errors import LLMError

log = logging.getLogger("mlab.llm")
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 8  # first try included: waits of about 2, 4, 8, 16, 32, 60, 60 s ride out a short outage
    max_total_s: float = 900.0  # no wait is started that would end past this, counted from the first try
    initial_s: float = 2.0  # first backoff; doubles each retry
    max_wait_s: float = 60.0  # cap of one backoff before jitter (a longer Retry-After is still honoured)
    jitter: float = 0.5  # each backoff is multiplied by a random factor in [1, 1 + jitter]

    @classmethod
    def from_dict(cls, values: dict[str, Any] | None) -> RetryPolicy:
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown retry settings {unknown}; valid: {sorted(known)}")
        policy = cls(**{k: type(getattr(cls, k))(v) for k, v in values.items()})
        if policy.max_attempts < 1 or policy.max_total_s < 0 or policy.initial_s < 0 or policy.max_wait_s < 0:
            raise ValueError(f"retry settings must be positive: {asdict(policy)}")
        return policy

    def backoff(self, retry_number: int, rng: random.Random) -> float:
        base = min(self.max_wait_s, self.initial_s * 2.0 ** (retry_number - 1))
        return base * (1 + self.jitter * rng.random())


def retry_after_of(exc: BaseException) -> float | None:
    value = getattr(exc, "retry_after", None)
    try:
        return max(0.0, float(value)) if value is not None else None
    except (TypeError, ValueError):
        return None


def _tries(n: int) -> str:
    return f"{n} try" if n == 1 else f"{n} tries"


def call_with_retries(fn: Callable[[], T], policy: RetryPolicy, describe: str = "LLM call",
                      sleep: Callable[[float], None] = time.sleep,
                      rng: random.Random | None = None) -> tuple[T, list[dict[str, Any]]]:
    """Run fn, retrying transient LLMErrors. Returns (result, retries): one dict per failed try that was retried.

    A final failure is raised as LLMError naming the tries made; its `retries` attribute lists the retried ones.
    """
    started = time.monotonic()
    # The first try outside tenacity: most calls succeed at once, and setting up a Retrying costs more than a
    # fast call's own bookkeeping.
    try:
        return fn(), []
    except LLMError as exc:
        if not exc.transient:
            exc.retries = []
            raise
        first_failure: LLMError | None = exc

    def attempt() -> T:
        nonlocal first_failure
        if first_failure is not None:  # tenacity's first attempt is the try already made
            failure, first_failure = first_failure, None
            raise failure
        return fn()

    rng = rng or random.Random()
    retries: list[dict[str, Any]] = []
    plan: dict[str, Any] = {}

    def should_retry(state: tenacity.RetryCallState) -> bool:
        # Decide here, wait included, so the outcome does not depend on tenacity's order of stop and wait.
        exc = state.outcome.exception() if state.outcome else None
        if not (isinstance(exc, LLMError) and exc.transient):
            return False
        if state.attempt_number >= policy.max_attempts:
            plan["gave_up"] = _tries(state.attempt_number)
            return False
        wait = policy.backoff(state.attempt_number, rng)
        after = retry_after_of(exc)
        if after is not None:
            wait = max(wait, after)
        # Real time covers the waits too; counting them separately keeps an injected sleep honest.
        elapsed = max(time.monotonic() - started, sum(r["wait_s"] for r in retries))
        if elapsed + wait > policy.max_total_s:
            plan["gave_up"] = (f"{_tries(state.attempt_number)}; the next wait of {wait:.1f} s would pass the "
                               f"{policy.max_total_s:g} s retry limit")
            return False
        plan["wait"] = wait
        retries.append({"attempt": state.attempt_number, "error": str(exc), "wait_s": round(wait, 3),
                        "retry_after_s": after, "at_s": round(elapsed, 3)})
        return True

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        log.warning("%s failed (%s); retry %d of %d in %.1f s", describe, exc, state.attempt_number,
                    policy.max_attempts - 1, plan["wait"])

    retrying = tenacity.Retrying(
        retry=should_retry, wait=lambda _state: plan["wait"], stop=tenacity.stop_after_attempt(policy.max_attempts),
        before_sleep=before_sleep, sleep=sleep, reraise=True)
    try:
        return retrying(attempt), retries
    except LLMError as exc:
        if not retries and "gave_up" not in plan:
            exc.retries = retries
            raise
        note = plan.get("gave_up", _tries(len(retries) + 1))
        final = LLMError(f"{exc} (gave up after {note}, {time.monotonic() - started:.1f} s)",
                         transient=exc.transient, context_too_long=exc.context_too_long)
        final.retries = retries
        raise final from exc
