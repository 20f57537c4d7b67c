"""Live views on a terminal: a run's steps (`mlab run`) and a bench's runs (`mlab bench`); one line per step or
per ended run elsewhere (a pipe, a CI log).

Both redraw a few times a second from what the run loop publishes (core/run/live.py), so the current action,
its elapsed time and a running script's last lines show while a step is still going.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from mlab.core.models import Step
from mlab.core.view.live import LiveState

from .console import cut_front, make_console

if TYPE_CHECKING:
    from mlab.core.bench.driver import BenchStatus

REFRESH_PER_SECOND = 4
TAIL_LINES = 6  # of a running script's output, under the table
OTHER_LINES = 10  # what the table leaves room for on the screen: title, header, borders, current step, tail
STEP_COLUMNS = ("step", "action", "input", "observation", "s")
CELL_CHARS = 400  # of an input or observation kept for its cell, however wide the terminal
MIN_FLEXIBLE = 6  # the least input and observation get: a narrower terminal cuts the table at its edge


def _short(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def elapsed(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds // 60:.0f} min {seconds % 60:02.0f} s"
    return f"{seconds // 3600:.0f} h {seconds % 3600 // 60:02.0f} min"


def current_step(state: LiveState, now: float | None = None) -> Text:
    """"step 5: Execute Script (script_name=train.py) — 12 s", or the agent still choosing."""
    args = ", ".join(f"{k}={_short(v, 40)}" for k, v in state["args"].items())
    what = "waiting for the agent" if state["action"] is None else f"{state['action']}" + (f" ({args})" if args
                                                                                             else "")
    line = Text.assemble((f"step {state['step']}: ", "bold"), (_short(what, 120), "cyan"),
                         f" — {elapsed((now or time.time()) - state['started'])}")
    line.no_wrap, line.overflow = True, "ellipsis"  # one line: the table above keeps its room
    return line


def _cell_len(cell: str | Text) -> int:
    return cell.cell_len if isinstance(cell, Text) else Text(cell).cell_len


def step_table(title: str, rows: Sequence[tuple[str | Text, ...]], width: int) -> Table:
    """The steps as a table `width` columns wide: step, action and time keep their whole text, and what is left
    goes to input and observation (2 to 3), each cut with an ellipsis: one line a row, so the room is exact.
    Left to itself rich would narrow every column alike, cutting action names to a letter or two at 80 columns."""
    table = Table(title=title)

    def longest(i: int) -> int:
        return max([len(STEP_COLUMNS[i]), *(_cell_len(row[i]) for row in rows)])

    fixed = {STEP_COLUMNS[i]: longest(i) for i in (0, 1, 4)}
    natural = [longest(2), longest(3)]
    free = width - sum(fixed.values()) - 3 * len(STEP_COLUMNS) - 1  # each column's padding and border
    if sum(natural) <= free:
        flexible = natural
    else:
        share = max(MIN_FLEXIBLE, free * 2 // 5)
        input_width = min(natural[0], max(share, free - natural[1]))
        flexible = [input_width, max(MIN_FLEXIBLE, free - input_width)]
    widths = dict(zip(("input", "observation"), flexible, strict=True))
    widths.update(fixed)
    for name in STEP_COLUMNS:
        table.add_column(name, no_wrap=True, overflow="ellipsis", width=widths[name])
    for row in rows:
        table.add_row(*row)
    return table


class StepView:
    """`mlab run`'s view: a table of the steps so far (the latest that fit, and how many earlier ones are not
    shown), the step in progress with an elapsed ticker, and the last lines of a running script's output."""

    def __init__(self, title: str, max_steps: int):
        self.console = make_console()
        self.title = title
        self.max_steps = max_steps
        self.rows: list[tuple[str | Text, ...]] = []
        self.resumed_after: int | None = None  # the steps a resumed run had done before this process
        self.live_state: Callable[[], LiveState | None] = lambda: None
        self.live = (Live(get_renderable=self._render, console=self.console, refresh_per_second=REFRESH_PER_SECOND)
                     if self.console.is_terminal else None)

    def follow(self, live_state: Callable[[], LiveState | None]) -> None:
        """Show the step in progress as live_state() gives it (the runner's LiveStep.state)."""
        self.live_state = live_state

    def _room(self, tail: int) -> int:
        return max(3, self.console.size.height - OTHER_LINES - tail)

    def _render(self) -> RenderableType:
        state = self.live_state()
        tail = state["output_tail"].splitlines()[-TAIL_LINES:] if state else []
        room = self._room(len(tail))
        hidden = max(0, len(self.rows) - room)
        resumed = "" if self.resumed_after is None else f" (resumed after step {self.resumed_after})"
        table = step_table(f"{self.title} — {len(self.rows)}/{self.max_steps} steps{resumed}", self.rows[hidden:],
                           self.console.width)
        if hidden:  # under the table, as a caption: a row would be cut to the width of the step column
            table.caption = f"{hidden} earlier step(s) not shown"
        parts: list[RenderableType] = [table]
        if state:
            parts.append(current_step(state))
            parts.extend(Text("  " + line, style="dim", no_wrap=True, overflow="ellipsis") for line in tail)
        return Group(*parts)

    def __enter__(self) -> StepView:
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.live:
            self.live_state = lambda: None  # the run is over: no step is in progress any more
            self.live.__exit__(exc_type, exc, tb)

    def resume(self, steps: Sequence[Step]) -> None:
        """A resumed run: the count and the table go on from the steps done before, which the table shows too."""
        self.resumed_after = steps[-1].index if steps else 0
        for step in steps:
            self._append(step)
        if not self.live:
            self.console.print(f"resumed after step {self.resumed_after}", markup=False, highlight=False)

    def _append(self, step: Step) -> None:
        args = ", ".join(f"{k}={_short(v, 60)}" for k, v in step.action.args.items())
        # cells keep more than a terminal shows: the table cuts them to the width there is
        observation = Text(_short(step.observation, CELL_CHARS), style="red" if step.is_error else "")
        # a step done again (a resumed run drops a step a crash tore) takes the place of its earlier row
        self.rows = [row for row in self.rows if int(str(row[0])) < step.index]
        self.rows.append((str(step.index), step.action.name, Text(_short(args, CELL_CHARS)), observation,
                          f"{step.duration_s:.1f}"))

    def add(self, step: Step) -> None:
        self._append(step)
        if self.live:
            self.live.refresh()
        else:
            args = ", ".join(f"{k}={_short(v, 60)}" for k, v in step.action.args.items())
            self.console.print(f"step {step.index}: {step.action.name}({_short(args, 60)}) -> "
                               f"{_short(step.observation, 100)}", markup=False, highlight=False)


class BenchView:
    """`mlab bench`'s view: the counts (finished, running, failed, interrupted, pending), each running run with
    its current action and time, and a line for every run that ends, printed above the live part so all stay in
    the terminal's scrollback. Elsewhere only those lines."""

    def __init__(self, title: str):
        self.console = make_console()
        self.title = title
        self.printed = 0
        self.status: BenchStatus | None = None
        self.live = (Live(get_renderable=self._render, console=self.console, refresh_per_second=REFRESH_PER_SECOND,
                          transient=False) if self.console.is_terminal else None)

    def __enter__(self) -> BenchView:
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.live:
            self.live.__exit__(exc_type, exc, tb)

    def update(self, status: BenchStatus) -> None:
        self.status = status
        for line in status.last[self.printed:]:
            self.console.print(line, markup=False, highlight=False)  # above the live part, when there is one
        self.printed = len(status.last)
        if self.live:
            self.live.refresh()

    def _render(self) -> RenderableType:
        status = self.status
        if status is None:
            return Text(f"{self.title}: starting", style="bold")
        # the lines Live shows below the counts (two at most at a narrow terminal); the rest it would crop
        shown = max(3, self.console.height - 2)
        return Group(counts(self.title, status), running_table(status, width=self.console.width, lines=shown))


def counts(title: str, status: BenchStatus) -> Text:
    running = len(status.running)
    line = Text.assemble(
        (f"{title}: ", "bold"), f"{status.done} finished, ", (f"{running} running", "cyan"), ", ",
        (f"{status.failed} failed", "red" if status.failed else ""), ", ",
        (f"{status.interrupted_runs} interrupted", "yellow" if status.interrupted_runs else ""),
        f", {status.pending} pending (of {status.total}) — "
        f"{status.tokens + sum(r.tokens for r in status.running):,} tokens, "
        f"{status.cost_text(sum(r.cost_usd for r in status.running))}")
    line.no_wrap, line.overflow = False, "fold"  # wrapped between words at the terminal's edge, never cut there
    return line


RUNNING_COLUMNS = ("run", "step", "current action", "for", "tokens", "cost", "run time")
LEFT_OUT_FIRST = ("tokens", "for", "run time", "cost", "current action")  # while the run's key would not fit
RUN_KEY_MIN = 24  # the least the run column gets before other columns are left out


def running_table(status: BenchStatus, now: float | None = None, width: int | None = None,
                  lines: int | None = None) -> Table:
    """The running runs, one line each. At `width` columns the run's key is cut from its front (its seed is at
    the end) and the least needed columns are left out while it would get under RUN_KEY_MIN. With `lines`, no more
    than fit in that many lines (a terminal shows no more): a refresh costs the rows shown, not every run's."""
    now = now or time.time()
    running = status.running
    if lines is not None and len(running) > lines - 2:  # the header and the line saying how many more
        running = running[:max(1, lines - 2)]
    rows = []
    for r in running:
        action = r.action or ("starting" if not r.started else "waiting for the agent")
        rows.append((r.key, f"{r.step}/{r.max_steps}", _short(action, 40),
                     elapsed(now - r.step_started) if r.step_started else "", f"{r.tokens:,}",
                     cost_cell(r.calls, r.unpriced_calls, r.cost_usd),
                     elapsed(now - r.started) if r.started else "starting"))
    kept = list(range(len(RUNNING_COLUMNS)))

    def longest(i: int) -> int:
        return max([len(RUNNING_COLUMNS[i]), *(len(row[i]) for row in rows)])

    room = None
    if width is not None:
        for name in (None, *LEFT_OUT_FIRST):
            if name is not None:
                kept.remove(RUNNING_COLUMNS.index(name))
            room = width - sum(longest(i) + 2 for i in kept[1:])  # a column's padding: two spaces between columns
            if room >= min(RUN_KEY_MIN, longest(0)):
                break
    cut = [[cut_front(row[0], max(8, room)) if room is not None else row[0], *row[1:]] for row in rows]
    table = Table(box=None, pad_edge=False)
    for i in kept:
        table.add_column(RUNNING_COLUMNS[i], no_wrap=True, overflow="ellipsis",
                         min_width=None if room is None else max([len(RUNNING_COLUMNS[i]), *(len(c[i]) for c in cut)]))
    for cells in cut:
        table.add_row(*(cells[i] for i in kept))
    if len(running) < len(status.running):
        table.caption, table.caption_justify = f"... and {len(status.running) - len(running)} more running", "left"
    return table


def cost_cell(calls: int, unpriced_calls: int, cost_usd: float) -> str:
    """A run's cost so far: "-" without model calls, "unpriced" when no call had a price (never a made-up $0)."""
    if calls == 0:
        return "-"
    if unpriced_calls >= calls:
        return "unpriced"
    return f"${cost_usd:.4f}" + (" + unpriced" if unpriced_calls else "")
