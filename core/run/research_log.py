"""The research log: a workspace file the agent appends summaries to and Reflection and Retrieval read."""
from __future__ import annotations

import os

from mlab.core.run.edit_history import EditHistory
from mlab.core.run.workspace import MAX_READ_BYTES, MAX_WRITE_BYTES, Workspace

RESEARCH_LOG = "research_log.log"
MAX_LOG_BYTES = MAX_READ_BYTES  # Reflection and Retrieval read at most the last this many bytes of the log


class ResearchLog:
    def __init__(self, workspace: Workspace, history: EditHistory):
        self.workspace = workspace
        self.history = history

    def read(self) -> str:
        """The log's text, or its newest part when it is long; empty when there is no log yet."""
        path = self.workspace.path(RESEARCH_LOG)
        if not os.path.lexists(path):
            return ""
        fd, st = self.workspace.open_regular(RESEARCH_LOG)
        with os.fdopen(fd, "rb") as f:
            if st.st_size > MAX_LOG_BYTES:
                f.seek(st.st_size - MAX_LOG_BYTES)
                return "[... earlier entries left out ...]\n" + f.read(MAX_LOG_BYTES).decode("utf-8", "replace")
            return f.read(MAX_LOG_BYTES).decode("utf-8", "replace")

    def append_summary(self, content: str) -> str:
        path = self.workspace.writable(RESEARCH_LOG)
        old = self.workspace.read_bytes(RESEARCH_LOG, MAX_WRITE_BYTES) if os.path.lexists(path) else b""
        # The log only grows, so it keeps no versions for Undo Edit Script.
        self.history.save(path, old + (content.rstrip("\n") + "\n\n").encode("utf-8"), RESEARCH_LOG,
                          keep_backup=False)
        return f"Added to {RESEARCH_LOG}."
