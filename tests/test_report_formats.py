"""Paper-ready outputs of `mlab report`: every plot as PDF, SVG and a 300-dpi PNG one paper column wide, with the
metric's name and direction on its axes, and the report's tables as CSV, LaTeX and JSON."""
from __future__ import annotations

import csv
import importlib.util
import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mlab.core.bench.metrics import RunRecord, all_groups, overall, performance_profiles
from mlab.core.bench.report import ReportData

needs_matplotlib = pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                                      reason="plots need the report extra: pip install 'mlab[report]'")
SVG = "{http://www.w3.org/2000/svg}"


def report_data(tmp_path: Path, *, costs: float = 0.0, flat: bool = False, tasks: tuple[str, ...] = ("lite/wine",),
                metric: str = "accuracy", higher: bool = True, agents: tuple[str, ...] = ("good", "zero"),
                baseline: bool = True) -> ReportData:
    """Three seeds of each agent on each task: 'good' beats the baseline of 0.5, 'zero' never does (0% success).
    Every run costs `costs`; with `flat` every step scores the same but for rounding noise (1e-13)."""
    records, rows, steps = [], [], {}
    finals = {"good": 0.8, "zero": 0.5}
    for task in tasks:
        for agent in agents:
            final = finals.get(agent, 0.6)
            for seed in range(3):
                key = f"{task}|{agent}|{seed}"
                score = final if higher else 1 / final
                records.append(RunRecord(key=key, task=task, agent=agent, llm=None, seed=seed, status="finished",
                                         final_score=score, higher_is_better=higher, tokens=0, cost_usd=costs,
                                         time_s=1.0, steps=7))
                rows.append({"key": key, "task": task, "agent": agent, "llm": None, "seed": seed, "metric": metric,
                             "higher_is_better": int(higher), "config": "{}", "status": "finished"})
                steps[key] = [{"step": i, "score": score + i * 1e-13 if flat else score * (0.9 + 0.1 * i / 7)}
                              for i in range(1, 8)]
    baselines: dict[str, float | None] = dict.fromkeys(tasks, (0.5 if higher else 2.0) if baseline else None)
    groups = all_groups(records, baselines)
    return ReportData(bench_dir=tmp_path, rows=rows, records=records, baselines=baselines,
                      baseline_sources=dict.fromkeys(tasks, "fixed"), groups=groups, overall=overall(groups),
                      step_scores=steps, plugin_versions={}, profiles=performance_profiles(groups))


def svg_texts(path: Path, group_id: str | None = None) -> list[str]:
    root = ET.parse(path).getroot()
    scope = root if group_id is None else next(g for g in root.iter(f"{SVG}g") if g.get("id") == group_id)
    return ["".join(t.itertext()).strip() for t in scope.iter(f"{SVG}text")]


def tick_labels(path: Path, axis_group: str) -> list[str]:
    """The tick labels of one axis in a matplotlib SVG (groups xtick_N / ytick_N under matplotlib.axis_N)."""
    root = ET.parse(path).getroot()
    axis = next(g for g in root.iter(f"{SVG}g") if g.get("id") == axis_group)
    ticks = [g for g in axis.iter(f"{SVG}g") if re.fullmatch(r"[xy]tick_\d+", g.get("id", ""))]
    return ["".join(t.itertext()).strip() for g in ticks for t in g.iter(f"{SVG}text")]


def number(label: str) -> float:
    return float(label.replace("−", "-").replace("%", "").replace(",", ""))


@pytest.mark.slow
@needs_matplotlib
def test_every_plot_is_written_as_pdf_svg_and_a_300_dpi_png_a_column_wide(tmp_path):
    from PIL import Image

    from mlab.core.bench.report_plots import COLUMN_WIDTH_IN, PNG_DPI, write_plots

    pngs = write_plots(report_data(tmp_path), tmp_path / "out")
    assert {p.stem for p in pngs} == {"success_rate", "improvement", "score_over_steps", "success_vs_cost",
                                      "performance_profiles"}
    for png in pngs:
        assert png.with_suffix(".pdf").read_bytes().startswith(b"%PDF-")
        assert ET.parse(png.with_suffix(".svg")).getroot().tag == f"{SVG}svg"
        with Image.open(png) as image:
            assert image.format == "PNG"
            assert tuple(round(d) for d in image.info["dpi"]) == (PNG_DPI, PNG_DPI)
            if png.stem != "success_vs_cost":  # two panels side by side take both columns
                assert image.width == round(COLUMN_WIDTH_IN * PNG_DPI), png.name
            # nothing is cut by the figure's edge: the outermost pixels are all background
            pixels = image.convert("L")
            w, h = pixels.size
            edge = [pixels.getpixel((x, y)) for x in range(w) for y in (0, h - 1)] + \
                   [pixels.getpixel((x, y)) for y in range(h) for x in (0, w - 1)]
            assert min(edge) == 255, f"{png.name} draws on its own edge: something is clipped"


@needs_matplotlib
@pytest.mark.slow
def test_score_axis_names_the_metric_and_its_direction_with_integer_step_ticks(tmp_path, monkeypatch):
    from mlab.core.bench import report_plots
    from mlab.core.bench.report_plots import write_plots

    # The SVGs are what this reads: the 300 dpi PNGs and the PDFs cost seconds (the slow case above checks them).
    monkeypatch.setattr(report_plots, "FORMATS", ("svg",))
    write_plots(report_data(tmp_path, metric="RMSE", higher=False, tasks=("lite/diabetes",)), tmp_path)
    svg = tmp_path / "score_over_steps.svg"
    texts = svg_texts(svg)
    assert "RMSE (lower is better)" in texts and "score" not in texts
    steps = tick_labels(svg, "matplotlib.axis_1")
    assert steps and all(re.fullmatch(r"\d+", s) for s in steps), steps
    assert "success rate, >10% over baseline (higher is better)" in " ".join(svg_texts(tmp_path / "success_rate.svg"))


@needs_matplotlib
@pytest.mark.parametrize("tasks, agents", [
    (tuple(f"pack/task-with-a-long-name-{i}" for i in range(5)), ("good", "zero")),
    (("lite/wine",), ("good", "zero", "an-agent-with-a-long-name", "another-long-agent-name")),  # a wide legend
])
@pytest.mark.slow
def test_titles_labels_and_legends_stay_inside_every_figure(tmp_path, tasks, agents):
    import matplotlib.pyplot as plt

    from mlab.core.bench.report_plots import figures

    for stem, fig in figures(report_data(tmp_path, tasks=tasks, agents=agents)).items():
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        box, drawn = fig.bbox, fig.get_tightbbox(renderer).transformed(fig.dpi_scale_trans)
        assert box.x0 - 0.5 <= drawn.x0 and drawn.x1 <= box.x1 + 0.5, stem
        assert box.y0 - 0.5 <= drawn.y0 and drawn.y1 <= box.y1 + 0.5, stem
        titles = [fig._suptitle] + [t for ax in fig.axes for t in (ax.title, ax.xaxis.label, ax.yaxis.label)]
        for text in titles:
            if text is not None and text.get_text():
                extent = text.get_window_extent(renderer)
                assert box.x0 - 0.5 <= extent.x0 and extent.x1 <= box.x1 + 0.5, (stem, text.get_text())
                assert box.y0 - 0.5 <= extent.y0 and extent.y1 <= box.y1 + 0.5, (stem, text.get_text())
        plt.close(fig)


@pytest.mark.slow
@needs_matplotlib
def test_costs_that_are_all_zero_get_an_axis_from_zero(tmp_path):
    from mlab.core.bench.report_plots import write_plots

    write_plots(report_data(tmp_path, costs=0.0), tmp_path)
    svg = tmp_path / "success_vs_cost.svg"
    for axis in ("matplotlib.axis_1", "matplotlib.axis_3"):  # the x axes of the tokens and the cost panels
        values = [number(t) for t in tick_labels(svg, axis)]
        assert values and min(values) == 0 and max(values) > 0, values
    assert "mean cost per run (USD) (lower is better)" in svg_texts(svg)


@pytest.mark.slow
@needs_matplotlib
def test_a_constant_curve_gets_a_plain_readable_axis(tmp_path):
    from mlab.core.bench.report_plots import write_plots

    write_plots(report_data(tmp_path, flat=True, agents=("good",), baseline=False), tmp_path)
    svg = tmp_path / "score_over_steps.svg"
    values = [number(t) for t in tick_labels(svg, "matplotlib.axis_2")]
    assert len(values) >= 3 and min(values) < 0.8 < max(values) and max(values) - min(values) > 0.01, values
    ticks = tick_labels(svg, "matplotlib.axis_2")
    assert all(re.fullmatch(r"\d\.\d+", t) for t in ticks), ticks
    # nothing but the ticks and the label: no offset text such as "1e-13+8e-1" beside the axis
    assert set(svg_texts(svg, "matplotlib.axis_2")) == {*ticks, "accuracy (higher is better)"}


@pytest.mark.slow  # over 2 s on two cores
@needs_matplotlib
def test_a_zero_bar_is_drawn_as_a_zero(tmp_path):
    import matplotlib.pyplot as plt

    from mlab.core.bench.report_plots import figures

    figs = figures(report_data(tmp_path))
    ax = figs["success_rate"].axes[0]
    zero_bars = [p for p in ax.patches if p.get_height() == 0]
    assert zero_bars, "the 'zero' agent has a 0% success rate"
    segments = [seg for coll in ax.collections for seg in getattr(coll, "get_segments", list)()]
    for bar in zero_bars:
        # a visible line across the bar at 0, not only a whisker above it
        assert any(abs(s[0][1]) < 1e-9 and abs(s[1][1]) < 1e-9 and s[0][0] <= bar.get_x() + 1e-9
                   and s[1][0] >= bar.get_x() + bar.get_width() - 1e-9 for s in segments)
        # and labelled 0 at its middle
        middle = bar.get_x() + bar.get_width() / 2
        assert any(t.get_text() == "0" and abs(t.xy[0] - middle) < 1e-9 for t in ax.texts)
    for fig in figs.values():
        plt.close(fig)


# ---- tables as CSV, LaTeX and JSON -----------------------------------------------------------------------------

def tables_of(tmp_path: Path):
    from mlab.core.bench.metrics import paired
    from mlab.core.bench.report import report_tables

    data = report_data(tmp_path, tasks=("lite/wine", "lite/digits"))
    data.comparisons = [paired(data.groups, "good", "zero")]
    data.records[0].failure = "timeout"  # one run of 'good' timed out: the failure taxonomy has a row
    return data, report_tables(data)


def test_every_terminal_table_is_in_every_format(tmp_path):
    from mlab.core.bench.report_formats import to_csv, to_json, to_latex, to_rich

    _data, tables = tables_of(tmp_path)
    assert [t.key for t in tables] == ["per_task", "thresholds", "overall", "profiles", "failures",
                                       "comparison_good_vs_zero"]
    as_json = json.loads(to_json(tables))
    assert list(as_json) == [t.key for t in tables]
    for table in tables:
        rows = list(csv.DictReader(io.StringIO(to_csv(table))))
        assert len(rows) == len(table.rows) == to_rich(table).row_count == len(as_json[table.key]["rows"])
        for part in to_latex(table).split(r"\end{table}")[:-1]:  # a wide table is split to fit a paper column
            head, body = part.split(r"\midrule")[0], part.split(r"\midrule")[1].split(r"\bottomrule")[0]
            width = len(head.split(r"\toprule")[1].split(" & "))
            assert len(body.strip().splitlines()) == len(table.rows) and width <= 6
            assert all(line.count(" & ") == width - 1 and line.endswith(r"\\") for line in body.strip().splitlines())


def test_csv_and_json_hold_numbers_with_their_intervals(tmp_path):
    from mlab.core.bench.report_formats import to_csv, to_json

    data, tables = tables_of(tmp_path)
    per_task = next(t for t in tables if t.key == "per_task")
    rows = {(r["task"], r["agent"]): r for r in csv.DictReader(io.StringIO(to_csv(per_task)))}
    group = next(g for g in data.groups if (g.task, g.label) == ("lite/digits", "good"))
    row = rows[("lite/digits", "good")]
    assert float(row["success_all_runs"]) == group.success_rate.mean == 1.0  # a fraction, not "100%"
    assert float(row["success_all_runs_lo"]) == pytest.approx(group.success_rate.lo)
    assert float(row["improvement"]) == pytest.approx(group.improvement.mean) and row["runs"] == "3"
    failures = json.loads(to_json(tables))["failures"]
    assert failures["rows"] == [{"agent": "good", "timeout": 1}]
    assert {"key": "timeout", "header": "timeout", "kind": "int"} in failures["columns"]


def test_latex_is_escaped_for_a_paper(tmp_path):
    from mlab.core.bench.report_formats import latex_escape, to_latex

    _data, tables = tables_of(tmp_path)
    text = "\n".join(to_latex(t) for t in tables)
    assert text.count(r"\begin{table}") == text.count(r"\end{tabular}") > len(tables)  # wide ones split
    assert r"\toprule" in text and r"\label{tab:mlab-per-task-1}" in text
    assert not re.search(r"(?<!\\)%", text)  # every percent sign escaped
    assert not re.search(r"(?<!\$)[<>](?!\$)", text)  # < and > only in math mode
    assert "100\\% (44--100)" in text  # an interval's range as an en dash
    assert latex_escape("a_b & 50% $x #1 {y} ~^\\") == \
        r"a\_b \& 50\% \$x \#1 \{y\} \textasciitilde{}\textasciicircum{}\textbackslash{}"
