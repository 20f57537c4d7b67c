"""Generation parameters of model calls, per role: what `--temperature`, `--top-p`, `--seed`,
`--max-completion-tokens`, `-M KEY=VALUE`, `--model-config FILE` and `--price IN,OUT` set.

Every flag takes `VALUE` (all roles) or `ROLE:VALUE` (one role: main, fast or edit); a role's own value wins
over the all-roles one, and within each, a named flag wins over `-M`, which wins over the file. The resolved
parameters go into RunConfig.llm_params (role -> parameters) and reach the backend with every call of the role.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from mlab.core.errors import MlabError

ROLES = ("main", "fast", "edit")
# The parameters with flags of their own, and the flags (--seed is the run's own seed, so the model's is --llm-seed).
NAMED = {"temperature": "--temperature", "top_p": "--top-p", "seed": "--llm-seed",
         "max_completion_tokens": "--max-completion-tokens"}
# Parameters that would send a call to another model, server or account than the one chosen for its role.
FORBIDDEN_PARAMS = frozenset({"model", "api_base", "base_url", "api_key", "custom_llm_provider", "fallbacks",
                              "model_list", "deployment_id"})
# Parameters the backend owns: answers are read whole and once, timeouts and retries are the core's.
BACKEND_PARAMS = frozenset({"messages", "stream", "n", "timeout", "max_retries", "num_retries"})
TOKENS_PER_PRICE_UNIT = 1_000_000  # --price is in USD per million tokens


def check_param(key: str, value: Any, where: str) -> Any:
    """The value of one generation parameter, checked; MlabError naming `where` (the flag or file) if bad."""
    if not key or not key.replace("_", "").isalnum():
        raise MlabError(f"{where}: {key!r} is not a parameter name")
    if key in FORBIDDEN_PARAMS:
        raise MlabError(f"{where}: {key} cannot be set here: each role calls exactly the model it was given "
                        "(use --llm, --fast-llm, --edit-llm, --llm-api-base)")
    if key in BACKEND_PARAMS:
        raise MlabError(f"{where}: {key} is set by mlab itself (--llm-timeout, --llm-retries)")
    if key in ("temperature", "top_p"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise MlabError(f"{where}: {key} must be a number, not {value!r}")
        if key == "temperature" and value < 0:
            raise MlabError(f"{where}: temperature must be at least 0, not {value!r}")
        if key == "top_p" and not 0 < value <= 1:
            raise MlabError(f"{where}: top_p must be above 0 and at most 1, not {value!r}")
        return float(value)
    if key in ("seed", "max_completion_tokens"):
        if isinstance(value, bool) or not isinstance(value, int):
            raise MlabError(f"{where}: {key} must be a whole number, not {value!r}")
        if key == "max_completion_tokens" and value < 1:
            raise MlabError(f"{where}: max_completion_tokens must be at least 1, not {value!r}")
        return value
    if key == "stop":
        stops = [value] if isinstance(value, str) else value
        if not isinstance(stops, list) or not stops or not all(isinstance(s, str) and s for s in stops):
            raise MlabError(f"{where}: stop must be a non-empty string or a list of them, not {value!r}")
        return stops
    return value


def parse_value(text: str) -> Any:
    """A flag's VALUE: JSON when it parses (numbers, true, lists), else the text itself."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def split_role(text: str, flag: str) -> tuple[str | None, str]:
    """'fast:0.2' -> ('fast', '0.2'); '0.2' -> (None, '0.2')."""
    head, sep, rest = text.partition(":")
    if sep and head in ROLES:
        return head, rest
    if sep and head.isidentifier() and head not in ROLES and "=" not in head:
        raise MlabError(f"{flag} {text!r}: {head!r} is not a role; roles: {', '.join(ROLES)}")
    return None, text


class RoleParams:
    """Generation parameters being gathered from flags: for all roles and for each role."""

    def __init__(self) -> None:
        self.shared: dict[str, Any] = {}
        self.own: dict[str, dict[str, Any]] = {role: {} for role in ROLES}

    def set(self, role: str | None, key: str, value: Any, where: str) -> None:
        target = self.shared if role is None else self.own[role]
        target[key] = check_param(key, value, where)

    def add_file(self, path: str) -> None:
        """`--model-config FILE`: a YAML or JSON mapping of parameters; a key main, fast or edit holding a
        mapping gives that role's own."""
        where = f"--model-config {path}"
        data = _read_mapping(Path(path), where)
        for key, value in data.items():
            if key in ROLES:
                if not isinstance(value, dict):
                    raise MlabError(f"{where}: {key} must map parameter names to values")
                for inner, inner_value in value.items():
                    self.set(key, str(inner), inner_value, where)
            else:
                self.set(None, str(key), value, where)

    def add_pairs(self, pairs: tuple[str, ...]) -> None:
        """`-M KEY=VALUE` or `-M ROLE:KEY=VALUE`."""
        for pair in pairs:
            role, rest = split_role(pair, "-M")
            key, sep, value = rest.partition("=")
            if not sep or not key:
                raise MlabError(f"-M takes KEY=VALUE or ROLE:KEY=VALUE, got {pair!r}")
            self.set(role, key.strip(), parse_value(value), f"-M {pair}")

    def add_flag(self, key: str, values: tuple[str, ...]) -> None:
        """A named flag (--temperature 0.2, --temperature fast:0): the value must be a number."""
        flag = NAMED[key]
        for text in values:
            role, value = split_role(text, flag)
            try:
                number = json.loads(value)
            except json.JSONDecodeError:
                raise MlabError(f"{flag} takes a number or ROLE:NUMBER, not {text!r}") from None
            self.set(role, key, number, f"{flag} {text}")

    def resolved(self) -> dict[str, dict[str, Any]]:
        """Role -> parameters, each role's own over the shared ones; roles without any are left out."""
        result = {role: {**self.shared, **self.own[role]} for role in ROLES}
        return {role: params for role, params in result.items() if params}


def gather(named: dict[str, tuple[str, ...]], pairs: tuple[str, ...], config_file: str | None
           ) -> dict[str, dict[str, Any]]:
    """RunConfig.llm_params from the flags: the file first, then -M, then the named flags."""
    params = RoleParams()
    if config_file:
        params.add_file(config_file)
    params.add_pairs(pairs)
    for key in NAMED:
        params.add_flag(key, named.get(key, ()))
    return params.resolved()


def parse_prices(values: tuple[str, ...]) -> dict[str, list[float]]:
    """`--price IN,OUT` (all roles) or `--price ROLE:IN,OUT`, in USD per million tokens -> role -> [in, out]."""
    shared: list[float] | None = None
    own: dict[str, list[float]] = {}
    for text in values:
        role, rest = split_role(text, "--price")
        parts = rest.split(",")
        try:
            price = [float(p) for p in parts]
        except ValueError:
            price = []
        if len(price) != 2 or not all(math.isfinite(p) and p >= 0 for p in price):
            raise MlabError(f"--price takes IN,OUT in USD per million tokens (e.g. 0.15,0.60), "
                            f"optionally ROLE:IN,OUT; got {text!r}")
        if role is None:
            shared = price
        else:
            own[role] = price
    result = {role: own.get(role, shared) for role in ROLES}
    return {role: price for role, price in result.items() if price is not None}


def call_cost(price: list[float] | tuple[float, float], prompt_tokens: int, completion_tokens: int) -> float:
    """USD of one call at a price in USD per million prompt and completion tokens."""
    return (prompt_tokens * price[0] + completion_tokens * price[1]) / TOKENS_PER_PRICE_UNIT


def merge_params(configured: dict[str, Any], per_call: dict[str, Any]) -> dict[str, Any]:
    """A call's parameters: what the user set for the run over the agent's own defaults, except stop
    sequences, which add up (an agent's format needs its stops whatever the user set)."""
    merged = {**per_call, **configured}
    if "stop" in configured and "stop" in per_call:
        stops = [*_as_list(configured["stop"]), *_as_list(per_call["stop"])]
        merged["stop"] = list(dict.fromkeys(stops))
    elif "stop" in merged:
        merged["stop"] = _as_list(merged["stop"])
    return merged


def cut_at_stop(text: str, stops: Any) -> str:
    """The text up to the first stop sequence: servers stop there, backends that only replay text do not."""
    cut = len(text)
    for stop in _as_list(stops):
        at = text.find(stop) if stop else -1
        if at != -1:
            cut = min(cut, at)
    return text[:cut]


def _as_list(stops: Any) -> list[str]:
    if stops is None:
        return []
    return [stops] if isinstance(stops, str) else [str(s) for s in stops]


def _read_mapping(path: Path, where: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise MlabError(f"{where}: cannot read it ({exc.strerror or exc})") from exc
    except UnicodeDecodeError:
        raise MlabError(f"{where}: not a text file") from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise MlabError(f"{where}: not valid JSON ({exc})") from exc
    else:
        import yaml  # type: ignore[import-untyped]  # only when a file is given; YAML is a superset of JSON

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            problem = " ".join(str(exc).split())
            raise MlabError(f"{where}: not valid YAML ({problem})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise MlabError(f"{where}: must hold a mapping of parameter names to values")
    return data
