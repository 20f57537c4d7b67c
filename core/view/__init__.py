"""Watching runs: the live state of a step in progress (live.py), what the web viewer shows of run folders
(runs.py), the viewer's browser code shared by `mlab view` and the static report (assets.py, viewer.js,
viewer.css) and the local web server of `mlab view` (server.py, page.html)."""
