"""Watching runs: the live state of a step in progress (live.py), what the web viewer shows of run folders
(runs.py) and the local web server of `mlab view` (server.py, page.html, page.js)."""
