"""`mlab export`: runs in another tool's format (Inspect AI's eval logs, for `inspect view` and its analysis)."""
from __future__ import annotations

import json
from pathlib import Path

import click


@click.command()
@click.argument("path", metavar="RUN|FOLDER|BENCH", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["inspect", "chat-jsonl"]), required=True,
              help="inspect: Inspect AI eval logs, one per task, agent and model; each run a sample, its seed an "
                   "epoch. chat-jsonl: each model call as a chat record with its run's score (chat.jsonl).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the logs (default: PATH/inspect, or PATH/chat for chat-jsonl).")
@click.option("--json", "as_json", is_flag=True, help="Print the files written as JSON.")
def export(path: Path, fmt: str, out_dir: Path | None, as_json: bool) -> None:
    """Write a run, a folder of runs or a bench as Inspect AI eval logs, one per task, agent and model.

    `inspect view` opens them and inspect_ai.log.read_eval_log reads them; their scores are those `mlab report`
    shows."""
    from mlab.core.bench.export_inspect import export as export_inspect
    from mlab.core.bench.run_folders import runs_in

    runs_in(path)  # a clear error for a path that holds no runs, before anything is written

    def warn(line: str) -> None:  # a run file not read (a symlink in an untrusted run folder): one line each
        click.echo(f"warning: {line}", err=True)

    if fmt == "chat-jsonl":
        from mlab.core.bench.export_chat import export as export_chat

        written_file = export_chat(path, out_dir or Path(path) / "chat", warn)
        click.echo(json.dumps({"format": fmt, "out": str(written_file)}, indent=2) if as_json
                   else f"chat records: {written_file}")
        return
    out = out_dir or Path(path) / "inspect"
    written = export_inspect(path, out, warn=warn)
    if as_json:
        click.echo(json.dumps({"format": fmt, "out": str(out), "logs": [str(p) for p in written]}, indent=2))
        return
    for log in written:
        click.echo(f"log: {log}")
    click.echo(f"{len(written)} Inspect log(s) in {out}; see: inspect view --log-dir {out}")
