"""Server-sent events split into ``data:`` payloads, fast enough for 1024 streams.

Why not a library: the SSE clients on PyPI (httpx-sse, aiohttp-sse-client) parse one
line per ``await`` and build an event object per chunk; at burst concurrency that
made the client, not the server, the bottleneck (docs/measurement.md; benchmarks/
client_overhead.py measures ours at 3-4x bench_serving). This decoder does only what
the SSE spec says a data-only stream needs: events end at a blank line, lines end in
LF, CRLF or CR, ``data:`` lines are joined with LF, comments (``:``) and other fields
are ignored. An event that grows past ``max_event_bytes`` without ending raises
:class:`EventTooLarge` so one runaway stream fails its request instead of filling
memory or stalling the client.
"""

from __future__ import annotations

MAX_EVENT_BYTES = 8 * 1024 * 1024


class EventTooLarge(ValueError):
    """An SSE event exceeded the size cap before its terminating blank line."""


class SSEDecoder:
    """Feed raw bytes, get the complete events' data payloads (bytes) in order."""

    __slots__ = ("_buf", "max_event_bytes")

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self._buf = b""
        self.max_event_bytes = max_event_bytes

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf + data
        if b"\r" in buf:
            # A CR at the very end may be the first half of a CRLF: keep it for the next read.
            hold = buf.endswith(b"\r")
            if hold:
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if hold:
                buf += b"\r"
        if b"\n\n" not in buf:
            self._buf = buf
            self._check()
            return []
        *events, self._buf = buf.split(b"\n\n")
        self._check()
        out: list[bytes] = []
        for ev in events:
            payload = _data_of(ev)
            if payload is not None:
                out.append(payload)
        return out

    def close(self) -> list[bytes]:
        """Payload of a last event that ended without the blank line (end of stream)."""
        rest, self._buf = self._buf.rstrip(b"\r\n"), b""
        payload = _data_of(rest) if rest else None
        return [payload] if payload is not None else []

    def _check(self) -> None:
        if len(self._buf) > self.max_event_bytes:
            size = len(self._buf)
            self._buf = b""
            raise EventTooLarge(f"one SSE event exceeded {self.max_event_bytes:,} bytes ({size:,} without an end)")


def _data_of(event: bytes) -> bytes | None:
    """The event's data (``data:`` lines joined by LF), or None when it has none."""
    if event.startswith(b"data:") and b"\n" not in event:  # the common one-line event
        return event[5:].removeprefix(b" ")
    parts = [line[5:].removeprefix(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
    return b"\n".join(parts) if parts else None
