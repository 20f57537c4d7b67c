"""Turning `--llm` strings into backends for the main, fast and edit roles.

Each role gets exactly the model it was given; fast and edit default to the main model, never to anything else.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from mlab.core.errors import MlabError
from mlab.core.llm.backend import LLM
from mlab.core.llm.retry import RetryPolicy

if TYPE_CHECKING:
    from mlab.core.models import RunConfig
    from mlab.core.plugins.registry import Registry


def backend_class(registry: Registry, spec: str) -> tuple[type[LLM], str]:
    """The backend class and MODEL of a `--llm` string: 'NAME:MODEL' picks backend NAME; anything else goes to
    the backend that handles unprefixed models."""
    llms = registry.items["llms"]
    name, _, model = spec.partition(":")
    if name in llms:
        return registry.get("llms", name), model
    fallback = sorted((cls for cls in llms.values() if cls.handles_unprefixed), key=lambda c: c.name)
    if not fallback:
        hint = " (install the litellm backend for provider/model names)" if "/" in spec else ""
        valid = ", ".join(sorted(llms)) or "(none installed)"
        raise MlabError(f"no LLM backend for {spec!r}; use NAME:MODEL with NAME one of: {valid}{hint}")
    if len(fallback) > 1:  # picking one silently could send the run to a vendor nobody chose
        names = ", ".join(f"{c.name}:{spec}" for c in fallback)
        raise MlabError(f"several backends take unprefixed model names; say which: {names}")
    return fallback[0], spec


def build_backend(registry: Registry, spec: str, **options: Any) -> LLM:
    """The backend of a `--llm` string (see backend_class), built with options."""
    llms = registry.items["llms"]
    valid = ", ".join(sorted(llms)) or "(none installed)"
    guessed = spec.partition(":")[0] not in llms
    cls, model = backend_class(registry, spec)
    try:
        return cls(model, **options)
    except MlabError:
        raise
    except LookupError as exc:  # the backend does not know this model
        if guessed:
            raise MlabError(
                f"no LLM backend for {spec!r} ({exc}); or use NAME:MODEL with NAME one of: {valid}") from exc
        raise MlabError(f"LLM {spec!r}: {exc}") from exc
    except (ValueError, FileNotFoundError, OSError) as exc:
        raise MlabError(f"LLM {spec!r}: {exc}") from exc


def build_roles(registry: Registry, main: str | None, fast: str | None, edit: str | None,
                **options: Any) -> dict[str, LLM] | None:
    """Backends by role; fast and edit default to the main model (and share its backend object).

    Each backend gets a `roles` attribute naming the roles it serves (a replay uses it to pick its calls).
    An `api_base` option goes to the roles whose model has the main model's provider prefix (`openai/…`) only,
    or to every role when the main model is not served by a provider (replay:, scripted:, human).
    """
    if main is None:
        if fast or edit:
            raise MlabError("--fast-llm and --edit-llm need --llm")
        return None

    def build(spec: str) -> LLM:
        own = dict(options)
        main_provider = _provider(registry, main)
        if "api_base" in own and main_provider is not None and _provider(registry, spec) != main_provider:
            del own["api_base"]  # --llm-api-base is the main model's server, not another provider's
        return build_backend(registry, spec, **own)

    main_backend = build(main)
    roles = {
        "main": main_backend,
        "fast": build(fast) if fast and fast != main else main_backend,
        "edit": main_backend,
    }
    if edit and edit != main:
        roles["edit"] = roles["fast"] if edit == fast else build(edit)
    for backend in {id(b): b for b in roles.values()}.values():
        backend.roles = tuple(role for role, b in roles.items() if b is backend)
    return roles


def _provider(registry: Registry, spec: str) -> str | None:
    """The provider of a model served by the backend of provider/model names: 'openai/x' and
    'litellm:openai/x' -> 'openai', 'gpt-4o' -> ''; None for other backends (scripted:, replay:, human)."""
    llms = registry.items["llms"]
    name, sep, model = spec.partition(":")
    if sep and name in llms:
        if not llms[name].handles_unprefixed:
            return None
        spec = model
    elif name in llms and not llms[name].handles_unprefixed:
        return None
    return spec.split("/", 1)[0] if "/" in spec else ""


def backend_options(config: RunConfig) -> dict[str, Any]:
    """Options every backend is built with, from a RunConfig (only those that were set)."""
    options: dict[str, Any] = {}
    if config.llm_api_base:
        options["api_base"] = config.llm_api_base
    if config.llm_timeout_s:
        options["timeout"] = float(config.llm_timeout_s)
    return options


def client_options(config: RunConfig) -> dict[str, Any]:
    """LLMClient keyword arguments from a RunConfig: retry policy, budgets, cache folder, generation parameters
    and prices by role."""
    try:
        retry = RetryPolicy.from_dict(config.llm_retry)
    except (TypeError, ValueError) as exc:
        raise MlabError(f"llm_retry: {exc}") from exc
    cache = config.llm_cache
    return {"retry": retry, "max_tokens": config.max_tokens, "max_cost": config.max_cost, "max_calls": config.max_calls,
            "cache_dir": Path(cache) if cache else None, "params": config.llm_params, "prices": config.llm_price}
