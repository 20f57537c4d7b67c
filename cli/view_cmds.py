"""`mlab view`: a local web viewer of runs that follows them live."""
from __future__ import annotations

import errno
import threading
import time
from pathlib import Path

import click

DEFAULT_DIR = "runs"
WAIT_POLL_S = 0.5


@click.command()
@click.argument("directory", metavar="[DIR]", required=False, type=click.Path(file_okay=False))
@click.option("--port", default=0, type=click.IntRange(0, 65535), help="Port on 127.0.0.1 (default: a free one).")
def view(directory: str | None, port: int) -> None:
    """Watch runs in a browser: one run, a folder of runs (searched recursively) or a bench (default: runs/).

    Lists the runs with status and scores; for each run its steps (reasoning, action, observation, file
    changes), the score over steps and the model calls with tokens and cost. The page follows runs as they go.
    Serves on 127.0.0.1 until Ctrl-C.
    """
    from mlab.core.view.runs import find_runs
    from mlab.core.view.server import Viewer

    root = Path(directory or DEFAULT_DIR)
    if directory and not root.exists():
        _wait_for(root)
    if not root.is_dir():
        raise click.UsageError(f"{str(root)!r} is not a folder" + (
            "; give the folder of a run, of runs or of a bench" if directory else
            " (the default); give the folder of a run, of runs or of a bench"))
    try:
        viewer = Viewer(root, port)
    except OSError as exc:
        why = "is in use" if exc.errno == errno.EADDRINUSE else f"cannot be used ({exc.strerror or exc})"
        raise click.UsageError(f"port {port} {why}; leave --port out to use a free one") from None
    # read every run's summary now, while the user opens the page, so its first answer comes from memory
    threading.Thread(target=viewer.httpd.catalog.runs, name="mlab-view-warm", daemon=True).start()
    found = len(find_runs(root))
    click.echo(f"mlab view: {found} run(s) under {root}" + ("" if found else "; the page shows runs as they appear"))
    click.echo(f"open {viewer.url} (Ctrl-C stops)", nl=True)
    try:
        viewer.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        viewer.httpd.server_close()


def _wait_for(root: Path) -> None:
    """A folder named before its run made it (`mlab view runs/x` beside `mlab run --run-dir runs/x`): wait, saying
    so, rather than refuse."""
    click.echo(f"mlab view: {str(root)!r} does not exist yet; waiting for it to appear (Ctrl-C stops)")
    try:
        while not root.exists():
            time.sleep(WAIT_POLL_S)
    except KeyboardInterrupt:
        raise SystemExit(130) from None
