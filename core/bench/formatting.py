"""Estimates as short strings, shared by the terminal tables and the HTML report."""
from __future__ import annotations

from mlab.core.bench.metrics import Estimate


def pct(e: Estimate) -> str:
    """A proportion and its interval, compactly: 62% (31-86)."""
    if e.mean is None:
        return "-"
    ci = f" ({100 * e.lo:.0f}-{100 * e.hi:.0f})" if e.lo is not None and e.hi is not None else ""
    return f"{e.mean:.0%}{ci}"


def signed_pct(e: Estimate) -> str:
    """A mean relative change and the half-width of its interval: +12.3% ±4.5."""
    if e.mean is None:
        return "-"
    ci = f" ±{100 * (e.hi - e.mean):.1f}" if e.lo is not None and e.hi is not None else ""
    return f"{e.mean:+.1%}{ci}"


def num(e: Estimate, fmt: str = ",.0f", prefix: str = "") -> str:
    if e.mean is None:
        return "-"
    ci = f" ±{(e.hi - e.mean):{fmt}}" if e.lo is not None and e.hi is not None and e.hi != e.mean else ""
    return f"{prefix}{e.mean:{fmt}}{ci}"
