"""Showing a run's steps as they happen: a live table on a terminal, one line a step otherwise."""
from __future__ import annotations

from types import TracebackType

from rich.live import Live
from rich.table import Table

from mlab.core.models import Step

from .console import make_console


def _short(text: str, width: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 1] + "…"


class StepView:
    def __init__(self, title: str, max_steps: int):
        self.console = make_console()
        self.title = title
        self.max_steps = max_steps
        self.rows: list[tuple[str, ...]] = []
        self.live = (Live(self._table(), console=self.console, refresh_per_second=4) if self.console.is_terminal
                     else None)

    def _table(self) -> Table:
        table = Table(title=f"{self.title} — {len(self.rows)}/{self.max_steps} steps")
        for column in ("step", "action", "input", "observation", "s"):
            table.add_column(column, overflow="fold")
        for row in self.rows[-15:]:
            table.add_row(*row)
        return table

    def __enter__(self) -> StepView:
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.live:
            self.live.__exit__(exc_type, exc, tb)

    def add(self, step: Step) -> None:
        args = ", ".join(f"{k}={_short(v, 30)}" for k, v in step.action.args.items())
        style = "red" if step.is_error else ""
        row = (str(step.index), step.action.name, _short(args, 60),
               f"[{style}]{_short(step.observation, 80)}[/{style}]" if style else _short(step.observation, 80),
               f"{step.duration_s:.1f}")
        self.rows.append(row)
        if self.live:
            self.live.update(self._table())
        else:
            self.console.print(f"step {row[0]}: {row[1]}({row[2]}) -> {_short(step.observation, 100)}",
                               markup=False, highlight=False)
