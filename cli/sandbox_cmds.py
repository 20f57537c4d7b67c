"""`mlab check-sandbox NAME`: the sandbox conformance suite (mlab.core.sandbox.self_check) against an installed
sandbox; what a sandbox's author runs instead of editing mlab's tests."""
from __future__ import annotations

import json
import sys

import click

from mlab.core.errors import MlabError
from mlab.core.plugins.registry import load_registry
from mlab.core.sandbox.self_check import CONFINEMENT, CONTRACT, check_sandbox

FAILED_EXIT = 1  # beyond 0 (every case passed) and 2 (bad input: an unknown or unavailable sandbox)
CASES = [case.__name__ for case in (*CONTRACT, *CONFINEMENT)]


@click.command("check-sandbox", short_help="Run the sandbox contract's cases (and, if it confines, the hostile "
                                          "ones) against sandbox NAME.")
@click.argument("name")
@click.option("--case", "cases", multiple=True, type=click.Choice(CASES), help="Run only this case (repeatable).")
@click.option("--json", "as_json", is_flag=True)
def check_sandbox_cmd(name: str, cases: tuple[str, ...], as_json: bool) -> None:
    """Run the sandbox contract's cases (commands, exit codes, output cap, time limit, killing and freezing the
    process tree, cleanup) and, for a sandbox that confines, the hostile ones (hidden files, read-only files,
    network) against the installed sandbox NAME."""
    cls = load_registry().get("sandboxes", name)
    ok, why = cls.available()
    if not ok:
        raise MlabError(f"sandbox {name!r} is not available here: {why}")
    outcomes = check_sandbox(cls, only=lambda case: not cases or case in cases)
    if as_json:
        click.echo(json.dumps([vars(outcome) for outcome in outcomes], indent=2))
    else:
        for outcome in outcomes:
            click.echo(f"{outcome.status.upper():4}  {outcome.case}" + (f": {outcome.detail}" if outcome.detail
                                                                          else ""))
        failed = sum(outcome.status == "fail" for outcome in outcomes)
        click.echo(f"sandbox {name}: {len(outcomes) - failed} of {len(outcomes)} cases pass or do not apply"
                   + (f", {failed} failed" if failed else ""))
    if any(outcome.status == "fail" for outcome in outcomes):
        sys.exit(FAILED_EXIT)
