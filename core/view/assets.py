"""The run viewer's browser files, one codebase for both pages that show runs: `mlab view` serves them beside its
page, and the static report of `mlab report` copies them beside index.html.

Both pages load only these files (no inline script or style), so each can forbid everything else by its
Content-Security-Policy: text from a run or bench folder cannot become script or style even if it reached the
page as markup, and viewer.js never inserts it as markup.
"""
from __future__ import annotations

from importlib import resources

SCRIPT = "viewer.js"
STYLE = "viewer.css"
TYPES = {SCRIPT: "text/javascript; charset=utf-8", STYLE: "text/css; charset=utf-8"}
# The policy of both pages: their own files only; the static report adds nothing it would need to fetch.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'none'")


def read(name: str) -> bytes:
    """One of the viewer's files (SCRIPT, STYLE) or a page of this package."""
    return resources.files(__package__).joinpath(name).read_bytes()
