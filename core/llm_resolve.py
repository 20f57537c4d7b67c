"""Turning `--llm` strings into backends for the main, fast and edit roles.

Each role gets exactly the model it was given; fast and edit default to the main model, never to anything else.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import MlabError
from .llm import LLM
from .llm_retry import RetryPolicy


def build_backend(registry, spec: str, **options: Any) -> LLM:
    """'NAME:MODEL' picks backend NAME; anything else goes to the backend that handles unprefixed models."""
    llms = registry.items["llms"]
    name, _, model = spec.partition(":")
    if name in llms:
        cls = registry.get("llms", name)
    else:
        fallback = sorted((cls for cls in llms.values() if cls.handles_unprefixed), key=lambda c: c.name)
        if not fallback:
            valid = ", ".join(sorted(llms)) or "(none installed)"
            hint = " (install the litellm backend for provider/model names)" if "/" in spec else ""
            raise MlabError(f"no LLM backend for {spec!r}; use NAME:MODEL with NAME one of: {valid}{hint}")
        if len(fallback) > 1:  # picking one silently could send the run to a vendor nobody chose
            names = ", ".join(f"{c.name}:{spec}" for c in fallback)
            raise MlabError(f"several backends take unprefixed model names; say which: {names}")
        cls, model = fallback[0], spec
    try:
        return cls(model, **options)
    except MlabError:
        raise
    except (ValueError, FileNotFoundError, OSError) as exc:
        raise MlabError(f"LLM {spec!r}: {exc}")


def build_roles(registry, main: str | None, fast: str | None, edit: str | None, **options: Any) -> dict[str, LLM] | None:
    """Backends by role; fast and edit default to the main model (and share its backend object).

    Each backend gets a `roles` attribute naming the roles it serves (a replay uses it to pick its calls).
    """
    if main is None:
        if fast or edit:
            raise MlabError("--fast-llm and --edit-llm need --llm")
        return None
    main_backend = build_backend(registry, main, **options)
    roles = {
        "main": main_backend,
        "fast": build_backend(registry, fast, **options) if fast and fast != main else main_backend,
        "edit": main_backend,
    }
    if edit and edit != main:
        roles["edit"] = roles["fast"] if edit == fast else build_backend(registry, edit, **options)
    for backend in {id(b): b for b in roles.values()}.values():
        backend.roles = tuple(role for role, b in roles.items() if b is backend)
    return roles


def backend_options(config) -> dict[str, Any]:
    """Options every backend is built with, from a RunConfig (only those that were set)."""
    options: dict[str, Any] = {}
    if getattr(config, "llm_api_base", None):
        options["api_base"] = config.llm_api_base
    if getattr(config, "llm_timeout_s", None):
        options["timeout"] = float(config.llm_timeout_s)
    return options


def client_options(config) -> dict[str, Any]:
    """LLMClient keyword arguments from a RunConfig: retry policy, budgets, cache folder."""
    try:
        retry = RetryPolicy.from_dict(getattr(config, "llm_retry", None))
    except (TypeError, ValueError) as exc:
        raise MlabError(f"llm_retry: {exc}")
    cache = getattr(config, "llm_cache", None)
    return {"retry": retry, "max_tokens": getattr(config, "max_tokens", None),
            "max_cost": getattr(config, "max_cost", None), "cache_dir": Path(cache) if cache else None}
