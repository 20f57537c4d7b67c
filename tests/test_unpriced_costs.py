"""Model calls without a price show as unpriced in the cost cells and the bench's total, never as a made-up $0."""
from __future__ import annotations


def test_unpriced_model_costs_are_never_a_made_up_zero():
    from mlab.cli.view import cost_cell, running_table
    from mlab.core.bench.driver import BenchStatus, RunProgress

    assert cost_cell(0, 0, 0.0) == "-"  # no model at all
    assert cost_cell(3, 3, 0.0) == "unpriced"
    assert cost_cell(3, 1, 0.25) == "$0.2500 + unpriced"
    assert cost_cell(3, 0, 0.25) == "$0.2500"
    status = BenchStatus(total=2)
    status.add_cost(None)
    assert "$0.0000" not in status.cost_text() and "unknown" in status.cost_text()
    status.running = [RunProgress(key="t/a/m/0", step=2, max_steps=5, calls=2, unpriced_calls=2, started=1.0)]
    cells = [str(cell) for column in running_table(status, now=2.0).columns for cell in column._cells]
    assert "unpriced" in cells and not any(c.startswith("$0.0000") for c in cells)
