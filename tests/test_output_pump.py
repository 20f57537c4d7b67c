"""A command's output pump (mlab.core.sandbox.output.OutputPump): a caller that has frozen a command, or seen it
end, gets every byte the command wrote by draining, however late the reading thread runs. Stress run 3 of session
11: a program agent's step lacked the line its program printed just before its next call (the reader thread had
not read it yet)."""
from __future__ import annotations

import os
import sys
import threading

from mlab.core.sandbox import supervise as supervise_module
from mlab.core.sandbox.output import OutputPump
from mlab.core.sandbox.spec import ExecSpec
from tests.fixtures.sandboxes import make_sandbox

WAIT_S = 60  # a deadline for events that come at once on a quiet machine


def _pipe():
    read_end, write_end = os.pipe()
    return os.fdopen(read_end, "rb", buffering=0), write_end


def test_a_drain_delivers_what_the_pipe_holds_when_the_reader_has_not_run():
    stream, write_end = _pipe()
    chunks: list[bytes] = []
    pump = OutputPump(stream, 1 << 20, chunks.append)
    os.write(write_end, b"PROBE NOTHING\n")
    pump.drain()
    assert chunks == [b"PROBE NOTHING\n"]
    assert pump.output.text() == "PROBE NOTHING\n"
    os.close(write_end)
    stream.close()


def test_a_drain_waits_for_the_chunk_being_delivered_and_keeps_the_order():
    stream, write_end = _pipe()
    chunks: list[bytes] = []
    delivering, release = threading.Event(), threading.Event()

    def slow_observer(chunk: bytes) -> None:
        chunks.append(chunk)
        delivering.set()
        assert release.wait(WAIT_S)

    pump = OutputPump(stream, 1 << 20, slow_observer)
    reader = threading.Thread(target=pump.run, daemon=True)
    reader.start()
    os.write(write_end, b"one\n")
    assert delivering.wait(WAIT_S)
    os.write(write_end, b"two\n")
    drained = threading.Event()
    drainer = threading.Thread(target=lambda: (pump.drain(), drained.set()), daemon=True)
    drainer.start()
    assert not drained.wait(0.2), "the drain returned while the reader still held a chunk"
    release.set()
    assert drained.wait(WAIT_S)
    assert b"".join(chunks) == b"one\ntwo\n"
    os.close(write_end)
    reader.join(WAIT_S)
    assert not reader.is_alive()
    stream.close()


def test_a_drain_ends_while_the_writer_keeps_writing():
    stream, write_end = _pipe()
    chunks: list[bytes] = []
    pump = OutputPump(stream, 1 << 16, chunks.append)
    stop, wrote = threading.Event(), threading.Event()

    def write_forever() -> None:
        while not stop.is_set():
            try:
                os.write(write_end, b"x" * 4096)
            except OSError:
                return
            wrote.set()

    writer = threading.Thread(target=write_forever, daemon=True)
    writer.start()
    assert wrote.wait(WAIT_S)
    try:
        for _ in range(20):
            pump.drain()  # each returns: it reads what was queued when it began, not what came meanwhile
    finally:
        stop.set()
        pump.drain()  # room in the pipe for the writer's last write
        writer.join(WAIT_S)
        os.close(write_end)
        stream.close()
    assert chunks


def test_a_command_that_ends_keeps_the_output_a_slow_reader_had_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(supervise_module, "DRAIN_GRACE_S", 0.01)
    sandbox = make_sandbox("local")
    spec = ExecSpec(cwd=tmp_path)
    seen = tmp_path / "seen"

    def slow_observer(chunk: bytes) -> None:
        if not seen.exists():
            seen.touch()  # the command writes its last line only now: two chunks, the second while the reader lags
            threading.Event().wait(1.0)  # the reader lags behind the command

    code = ("import os, time\nprint('first', flush=True)\ndeadline = time.monotonic() + 60\n"
            f"while not os.path.exists({str(seen)!r}) and time.monotonic() < deadline:\n    time.sleep(0.01)\n"
            "print('last', flush=True)\n")
    try:
        result = supervise_module.run_to_end(sandbox, [sys.executable, "-c", code], spec, slow_observer)
    finally:
        sandbox.close()
    assert result.exit_code == 0
    assert result.output == "first\nlast\n", result
