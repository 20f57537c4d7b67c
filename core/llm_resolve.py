"""Turning `--llm` strings into backends for the main, fast and edit roles."""
from __future__ import annotations

from typing import Any

from .errors import MlabError
from .llm import LLM


def build_backend(registry, spec: str, **options: Any) -> LLM:
    """'NAME:MODEL' picks backend NAME; anything else goes to the backend that handles unprefixed models."""
    llms = registry.items["llms"]
    name, _, model = spec.partition(":")
    if name in llms:
        cls = registry.get("llms", name)
    else:
        fallback = [cls for cls in llms.values() if cls.handles_unprefixed]
        if not fallback:
            valid = ", ".join(sorted(llms)) or "(none installed)"
            raise MlabError(f"no LLM backend for {spec!r}; use NAME:MODEL with NAME one of: {valid}")
        cls, model = fallback[0], spec
    try:
        return cls(model, **options)
    except MlabError:
        raise
    except (ValueError, FileNotFoundError) as exc:
        raise MlabError(f"LLM {spec!r}: {exc}")


def build_roles(registry, main: str | None, fast: str | None, edit: str | None, **options: Any) -> dict[str, LLM] | None:
    """Backends by role; fast and edit default to the main model (and share its backend object)."""
    if main is None:
        if fast or edit:
            raise MlabError("--fast-llm and --edit-llm need --llm")
        return None
    main_backend = build_backend(registry, main, **options)
    return {
        "main": main_backend,
        "fast": build_backend(registry, fast, **options) if fast and fast != main else main_backend,
        "edit": build_backend(registry, edit, **options) if edit and edit != main else main_backend,
    }
