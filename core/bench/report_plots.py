"""A bench's plots, ready for a paper: each figure as PDF and SVG (vector, text kept as text) and a 300-dpi PNG,
one paper column wide (two columns for figures with many groups or panels). Needs matplotlib (the `report`
extra)."""
from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import MaxNLocator, PercentFormatter

from mlab.core.bench.metrics import BASELINE_METHOD, Estimate, Profiles
from mlab.core.run.scoring import is_valid
from mlab.core.task import DEFAULT_SUCCESS_MARGIN

if TYPE_CHECKING:
    from mlab.core.bench.report import ReportData

COLUMN_WIDTH_IN = 3.4  # one column of a two-column paper (ACL, ICML, IEEE: 3.25-3.5 in)
TEXT_WIDTH_IN = 7.0  # both columns (a figure* in LaTeX)
PANEL_HEIGHT_IN = 2.4
PNG_DPI = 300
FORMATS = ("pdf", "svg", "png")  # every figure is written in each; the PNG is the one web pages show
FONT_PT = 8.0
# Bars in one figure beyond which it takes the text width: a column holds about a dozen readable bars.
MAX_BARS_IN_A_COLUMN = 12
PANELS_PER_ROW = 3

_STYLE: dict[str, Any] = {
    "font.size": FONT_PT, "axes.titlesize": FONT_PT, "axes.labelsize": FONT_PT, "xtick.labelsize": FONT_PT - 1,
    "ytick.labelsize": FONT_PT - 1, "legend.fontsize": FONT_PT - 1, "figure.titlesize": FONT_PT + 1,
    "svg.fonttype": "none",  # text stays text in the SVG: searchable, and editable in a drawing program
    "pdf.fonttype": 42, "ps.fonttype": 42,  # TrueType in the PDF, as paper submission systems ask
    "axes.spines.top": False, "axes.spines.right": False, "savefig.dpi": PNG_DPI,
}


def direction(higher_is_better: bool) -> str:
    return "higher is better" if higher_is_better else "lower is better"


def _wrap(text: str, width_in: float, size_pt: float = FONT_PT) -> str:
    """Lines that fit width_in at size_pt (an average glyph is about 0.55 em wide), so no title is clipped."""
    chars = max(12, int(width_in * 72 / (size_pt * 0.58)))
    return "\n".join(textwrap.wrap(text, chars)) or text


@contextmanager
def _paper_style() -> Iterator[None]:
    with plt.rc_context(_STYLE):  # type: ignore[arg-type]
        yield


def _figure(width_in: float, height_in: float = PANEL_HEIGHT_IN, rows: int = 1, cols: int = 1) -> tuple[
        Figure, list[Axes]]:
    fig, axes = plt.subplots(rows, cols, figsize=(width_in, height_in), squeeze=False, layout="constrained")
    return fig, [ax for row in axes for ax in row]


_COLUMNS = "mlab_entries"  # a figure legend's (handles, names, columns), kept on the legend


def _fit_texts(fig: Figure, rounds: int = 8) -> Figure:
    """Re-wrap any title or label wider (or, turned, taller) than the figure, and give a legend fewer columns,
    until every one fits: the layout engine moves text but never breaks it, so an estimate of glyph widths alone
    can still clip a title."""
    for _ in range(rounds):
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
        box = fig.bbox
        changed = False
        for text in fig.findobj(Text):
            content = text.get_text()
            if not content or not text.get_visible() or " " not in content:
                continue
            extent = text.get_window_extent(renderer)
            vertical = text.get_rotation() % 180 == 90
            room = (box.height if vertical else box.width) * 0.96
            size = extent.height if vertical else extent.width
            if size <= room and extent.x0 >= box.x0 and extent.x1 <= box.x1 and extent.y0 >= box.y0 \
                    and extent.y1 <= box.y1:
                continue
            longest = max(len(line) for line in content.splitlines())
            chars = max(8, int(longest * min(room / size, 0.9)))
            wrapped = "\n".join(textwrap.wrap(" ".join(content.split()), chars))
            if wrapped != content:
                text.set_text(wrapped)
                changed = True
        for legend in list(fig.legends):
            entries: tuple[list[Artist], list[str], int] | None = getattr(legend, _COLUMNS, None)
            if entries is None:
                continue
            handles, names, ncols = entries
            if ncols > 1 and legend.get_window_extent(renderer).width > box.width * 0.98:
                legend.remove()  # a legend lays out its columns once: a narrower one is a new legend
                _figure_legend(fig, handles, names, ncols - 1)
                changed = True
        if not changed:
            break
    return fig


def _save(fig: Figure, out_dir: Path, stem: str) -> Path:
    """Write the figure in every format; the PNG's path stands for the figure."""
    for fmt in FORMATS:
        fig.savefig(out_dir / f"{stem}.{fmt}", dpi=PNG_DPI, metadata=_metadata(fmt))
    plt.close(fig)
    return out_dir / f"{stem}.png"


def _metadata(fmt: str) -> dict[str, str | None]:
    # No creation date: the same bench gives byte-identical PDFs and SVGs.
    return {"pdf": {"CreationDate": None}, "svg": {"Date": None}}.get(fmt, {})  # type: ignore[return-value]


def files_of(png: Path) -> list[Path]:
    """Every file written for the figure whose PNG is png."""
    return [png.with_suffix(f".{fmt}") for fmt in FORMATS]


def _nonnegative_axis(ax: Axes, values: list[float], axis: Literal["x", "y"]) -> None:
    """Counts and costs start at 0; all of them 0 still gives an axis from 0 to 1, not one around 0. A sliver
    below 0 (too small for a tick) keeps markers at 0 clear of the axis line."""
    top = max(values, default=0.0)
    hi = top * 1.08 if top > 0 else 1.0
    (ax.set_xlim if axis == "x" else ax.set_ylim)(-0.02 * hi, hi)


def _spread_if_constant(ax: Axes, values: list[float]) -> None:
    """A flat curve gets a readable band around its value instead of matplotlib's tiny offset axis."""
    if not values:
        return
    lo, hi = min(values), max(values)
    if hi - lo > 1e-12 * max(1.0, abs(hi)):
        return
    pad = max(abs(hi) * 0.05, 0.05)
    ax.set_ylim(lo - pad, hi + pad)


def _grouped_bars(ax: Axes, tasks: list[str], labels: list[str],
                  value: Callable[[str, str], Estimate | None]) -> None:
    """value(task, label) -> Estimate or None; bars with 95% interval whiskers, grouped by task. Each bar's
    value is also drawn as a line across it, and a bar of height 0 is labelled 0, so it is seen as a 0 and not
    as a bare whisker."""
    width = 0.8 / max(1, len(labels))
    for j, label in enumerate(labels):
        color = f"C{j % 10}"
        xs, ys, err_lo, err_hi = [], [], [], []
        for i, task in enumerate(tasks):
            e = value(task, label)
            if e is None or e.mean is None:
                continue
            xs.append(i + (j - (len(labels) - 1) / 2) * width)
            ys.append(e.mean)
            err_lo.append(max(0.0, e.mean - e.lo) if e.lo is not None else 0)
            err_hi.append(max(0.0, e.hi - e.mean) if e.hi is not None else 0)
        ax.bar(xs, ys, width, color=color, alpha=0.75, label=label)
        ax.hlines(ys, [x - width / 2 for x in xs], [x + width / 2 for x in xs], colors=color, linewidth=1.6)
        ax.errorbar(xs, ys, yerr=[err_lo, err_hi], fmt="none", ecolor="black", elinewidth=0.8, capsize=2)
        for x, y in zip(xs, ys, strict=True):
            if y == 0:  # its line lies on the axis: say the value in words too
                ax.annotate("0", (x, 0), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                            fontsize=FONT_PT - 2, color=color)
    ax.set_xticks(range(len(tasks)), tasks, rotation=20 if len(tasks) > 2 else 0,
                  ha="right" if len(tasks) > 2 else "center")
    ax.grid(axis="y", alpha=0.3)


def _legend_below(fig: Figure, axes: list[Axes], columns: int) -> None:
    """One legend for the figure, under its panels, so it never hides data."""
    seen: dict[str, Artist] = {}
    for ax in axes:
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(name, handle)
    if seen:
        _figure_legend(fig, list(seen.values()), list(seen), max(1, min(columns, len(seen))))


def _figure_legend(fig: Figure, handles: list[Artist], names: list[str], ncols: int) -> None:
    legend = fig.legend(handles, names, loc="outside lower center", ncols=ncols, frameon=False)
    setattr(legend, _COLUMNS, (handles, names, ncols))  # _fit_texts rebuilds a legend wider than the figure


def figures(data: ReportData) -> dict[str, Figure]:
    """Every figure of the bench by file stem, drawn in the paper style; the caller closes them."""
    with _paper_style():
        out = {"success_rate": _success_rate(data), "improvement": _improvement(data)}
        if any(data.step_scores.values()):
            out["score_over_steps"] = _score_over_steps(data)
        out["success_vs_cost"] = _success_vs_cost(data)
        if data.profiles and data.profiles.tasks:
            out["performance_profiles"] = _performance_profiles(data.profiles)
        return {stem: _fit_texts(fig) for stem, fig in out.items()}


def write_plots(data: ReportData, out_dir: Path) -> list[Path]:
    """Write every figure of the bench into out_dir (PDF, SVG, PNG each); returns the PNGs' paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with _paper_style():  # svg.fonttype and pdf.fonttype are read when saving
        return [_save(fig, out_dir, stem) for stem, fig in figures(data).items()]


def _bar_tasks(data: ReportData) -> list[str]:
    return data.tasks + (["average"] if len(data.tasks) > 1 else [])


def _bar_width(data: ReportData) -> float:
    bars = len(_bar_tasks(data)) * max(1, len(data.labels))
    return COLUMN_WIDTH_IN if bars <= MAX_BARS_IN_A_COLUMN else TEXT_WIDTH_IN


def _percent_bars(data: ReportData, group_field: Literal["success_rate", "improvement"],
                  overall_key: Literal["success", "improvement"], ylabel: str, title: str) -> tuple[Figure, Axes]:
    """Bars per task and agent of a group's estimate, in percent, and over tasks (`average`) the agent's overall
    one."""
    groups = {(g.task, g.label): g for g in data.groups if g.runs}

    def value(task: str, label: str) -> Estimate | None:
        if task == "average":
            o = data.overall.get(label)
            return Estimate(**o[overall_key]) if o else None
        g = groups.get((task, label))
        return getattr(g, group_field) if g else None

    width = _bar_width(data)
    fig, (ax,) = _figure(width, PANEL_HEIGHT_IN + 0.4)
    _grouped_bars(ax, _bar_tasks(data), data.labels, value)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_ylabel(_wrap(ylabel, PANEL_HEIGHT_IN))
    ax.set_title(_wrap(title, width))
    _legend_below(fig, [ax], 3)
    return fig, ax


def _success_rate(data: ReportData) -> Figure:
    fig, ax = _percent_bars(data, "success_rate", "success",
                            f"success rate, >{DEFAULT_SUCCESS_MARGIN:.0%} over baseline ({direction(True)})",
                            "Success rate per task and agent (all runs), 95% CI")
    ax.set_ylim(0, 1.05)
    return fig


def _improvement(data: ReportData) -> Figure:
    fig, ax = _percent_bars(data, "improvement", "improvement", f"improvement over baseline ({direction(True)})",
                            "Mean improvement (runs with a valid final submission), 95% CI")
    ax.axhline(0, color="black", linewidth=0.6)
    return fig


def _success_vs_cost(data: ReportData) -> Figure:
    fig, axes = _figure(TEXT_WIDTH_IN, PANEL_HEIGHT_IN + 0.3, cols=2)
    axes[1].sharey(axes[0])
    panels: list[tuple[Axes, Literal["tokens", "cost_usd"], str]] = [
        (axes[0], "tokens", "mean tokens per run"), (axes[1], "cost_usd", "mean cost per run (USD)")]
    for ax, key, name in panels:
        xs, unpriced = [], []
        for j, (label, o) in enumerate(data.overall.items()):
            s, x = o["success"], o[key]["mean"]
            if s["mean"] is not None and x is None and key == "cost_usd":
                unpriced.append(label)
            if s["mean"] is None or x is None:
                continue
            xs.append(x)
            lo, hi = s["lo"], s["hi"]
            err = [[s["mean"] - lo], [hi - s["mean"]]] if lo is not None and hi is not None else None
            ax.errorbar([x], [s["mean"]], yerr=err, fmt="o", markersize=4, capsize=2, color=f"C{j % 10}",
                        label=label)
        _nonnegative_axis(ax, xs, "x")
        # a method missing from the panel must not read as one that cost nothing: named under its axis
        note = "\n" + _wrap(f"not shown, no price: {', '.join(unpriced)}", TEXT_WIDTH_IN / 2) if unpriced else ""
        ax.set_xlabel(f"{name} ({direction(False)}){note}")
        ax.set_ylim(-0.03, 1.03)
        ax.yaxis.set_major_formatter(PercentFormatter(1.0))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(_wrap(f"success rate, mean over tasks ({direction(True)})", PANEL_HEIGHT_IN))
    fig.suptitle("Success against tokens and cost")
    _legend_below(fig, axes, 4)
    return fig


def _performance_profiles(p: Profiles) -> Figure:
    """MLGym's performance profiles: per method, the fraction of tasks within 10^tau of the best score."""
    fig, (ax,) = _figure(COLUMN_WIDTH_IN, PANEL_HEIGHT_IN + 0.6)
    for m in p.methods:
        steps = [x for x in p.log_ratios(m) if x <= p.tau_max]
        xs = [0.0, *steps, p.tau_max]
        ys = [p.rho(m, x) for x in xs]
        ax.step(xs, ys, where="post", linewidth=1.4, label=f"{m} (AUP {p.aup[m]:.3g})",
                linestyle="--" if m == BASELINE_METHOD else "-")
    ax.set_xlim(0, p.tau_max)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("τ (log10 of the performance ratio)")
    ax.set_ylabel(_wrap(f"fraction of tasks with ratio ≤ 10^τ ({direction(True)})", PANEL_HEIGHT_IN))
    ax.set_title(_wrap(f"Performance profiles over {len(p.tasks)} task(s), mean final score", COLUMN_WIDTH_IN))
    ax.grid(alpha=0.3)
    _legend_below(fig, [ax], 2)
    return fig


def _mean_curve(curves: list[dict[int, float | None]]) -> tuple[list[int], list[float]]:
    """Mean score at each step over runs, each run's last valid score carried forward."""
    last_step = max(max(c) for c in curves)
    xs: list[int] = []
    ys: list[float] = []
    carried: list[float | None] = [None] * len(curves)
    for step in range(1, last_step + 1):
        for k, c in enumerate(curves):
            if is_valid(c.get(step)):
                carried[k] = c[step]
        known = [v for v in carried if v is not None]
        if known:
            xs.append(step)
            ys.append(sum(known) / len(known))
    return xs, ys


def _score_over_steps(data: ReportData) -> Figure:
    """Per task: each agent's mean score at each step over its runs, on the task's metric."""
    tasks = data.tasks
    cols = min(len(tasks), PANELS_PER_ROW)
    rows = math.ceil(len(tasks) / cols)
    width = COLUMN_WIDTH_IN if cols == 1 else TEXT_WIDTH_IN
    fig, axes = _figure(width, PANEL_HEIGHT_IN * rows + 0.3, rows=rows, cols=cols)
    for ax in axes[len(tasks):]:
        ax.set_visible(False)
    for ax, task in zip(axes, tasks, strict=False):
        values: list[float] = []
        for j, label in enumerate(data.labels):
            curves = []
            for r in data.records:
                if r.task == task and r.label == label:
                    points = {row["step"]: row["score"] for row in data.step_scores.get(r.key, [])}
                    if points:
                        curves.append(points)
            if not curves:
                continue
            xs, ys = _mean_curve(curves)
            if not xs:  # no run of this agent ever had a valid score: no line, no legend entry
                continue
            values.extend(ys)
            ax.plot(xs, ys, marker=".", markersize=3, linewidth=1.2, color=f"C{j % 10}", label=label)
        base = data.baselines.get(task)
        if base is not None:
            values.append(base)
            ax.axhline(base, color="grey", linestyle="--", linewidth=0.9, label="task baseline")
        metric, higher = data.metric_of(task)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.ticklabel_format(axis="y", useOffset=False, style="plain")
        _spread_if_constant(ax, values)
        ax.set_title(_wrap(task, width / cols))
        ax.set_xlabel("step")
        ax.set_ylabel(_wrap(f"{metric} ({direction(higher)})", PANEL_HEIGHT_IN))
        ax.grid(alpha=0.3)
    fig.suptitle(_wrap("Mean score over steps (a run's last valid score carried forward)", width,
                       FONT_PT + 1))
    _legend_below(fig, axes, 4)
    return fig
