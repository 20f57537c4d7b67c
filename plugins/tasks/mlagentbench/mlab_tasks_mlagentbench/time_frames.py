"""Length-prefixed frames over a pipe, between time_pair.py and its worker (time_forward.py, time_generation.py):
each is a standalone script in the scoring stage, so this module is copied there beside them."""
import os
import struct


def send(fd, payload):
    data = struct.pack("<Q", len(payload)) + payload
    while data:
        data = data[os.write(fd, data):]


def receive(fd):
    """One frame, or None at the end of the pipe."""
    def exactly(count):
        chunks = b""
        while len(chunks) < count:
            chunk = os.read(fd, min(count - len(chunks), 1 << 20))
            if not chunk:
                return None
            chunks += chunk
        return chunks

    head = exactly(8)
    return None if head is None else exactly(struct.unpack("<Q", head)[0])
