"""Incremental Kafka framing: bytes in, complete size-prefixed frames out.

Sans-IO in the h11 sense: the reader never touches a socket. The proxy feeds it whatever
``data_received`` delivered and gets back the frames that are now complete. Each frame is
returned *with* its 4-byte size prefix, so that forwarding an unchanged frame is a plain
write of the slice it came in.

Frames that arrive whole inside one chunk are returned as ``memoryview`` slices of that
chunk (no copy). Only a frame that straddles chunks is assembled, once, when its last
byte arrives.
"""

from __future__ import annotations

from struct import Struct
from typing import Final

_SIZE: Final = Struct(">i")

DEFAULT_MAX_FRAME_BYTES: Final = 100 * 1024 * 1024


class FramingError(ValueError):
    """The peer sent a size prefix kgate refuses; the connection cannot be resynchronised."""


class FrameReader:
    """Splits a byte stream into frames; keeps the partial tail between calls.

    After a size error the reader is poisoned: ``error`` is set, the frames completed before
    the bad prefix are still returned, and every later ``feed`` returns nothing. The caller
    is expected to forward what it got and close the connection.
    """

    __slots__ = ("_chunks", "_need", "buffered", "error", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._chunks: list[bytes | bytearray | memoryview] = []  # partial frame (or partial size prefix) so far
        #: bytes of an incomplete frame held back (in _chunks); a plain attribute, not a property:
        #: the data path reads it on every read, where a property is a whole Python call
        #: (docs/performance.md, "Figures moved out of code comments")
        self.buffered = 0
        self._need = 0  # total bytes of the frame being assembled, 0 while its size is unknown
        self.error: FramingError | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        """Return every frame completed by ``data``, in order."""
        if self.error is not None:
            return []
        if self.buffered:
            return self._feed_pending(data)
        return self._split(data)

    def discard(self) -> None:
        """Drop a partial frame: the connection is gone and its bytes would only hold memory."""
        self._chunks = []
        self.buffered = 0
        self._need = 0

    def _check(self, size: int) -> bool:
        if size < 0:
            self.error = FramingError(f"negative frame size {size}")
        elif size > self.max_frame_bytes:
            self.error = FramingError(f"frame size {size} exceeds the limit of {self.max_frame_bytes} bytes")
        else:
            return True
        return False

    def split(self, data: bytes | memoryview) -> tuple[list[memoryview], int]:
        """Complete frames of ``data`` and the offset of its incomplete tail, which is NOT kept.

        For a caller that may stream the tail on instead of buffering it (cut-through); it must
        ``feed`` the tail itself if it does not. Only valid while nothing is buffered.
        """
        assert self.buffered == 0, "split() while a partial frame is buffered"
        return self._frames(data)

    def _frames(self, data: bytes | bytearray | memoryview) -> tuple[list[memoryview], int]:
        frames: list[memoryview] = []
        view = memoryview(data)
        end = len(data)
        pos = 0
        unpack = _SIZE.unpack_from
        while end - pos >= 4:
            size = unpack(data, pos)[0]
            if not self._check(size):
                return frames, end
            stop = pos + 4 + size
            if stop > end:
                break
            frames.append(view[pos:stop])
            pos = stop
        return frames, pos

    def _split(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        frames, pos = self._frames(data)
        view = memoryview(data)
        end = len(data)
        unpack = _SIZE.unpack_from
        if pos < end and self.error is None:
            tail = bytes(view[pos:])
            self._chunks.append(tail)
            self.buffered = len(tail)
            self._need = 4 + unpack(tail, 0)[0] if len(tail) >= 4 else 0
        return frames

    def _feed_pending(self, data: bytes | bytearray | memoryview) -> list[memoryview]:
        self._chunks.append(data)
        self.buffered += len(data)
        if self._need == 0:
            if self.buffered < 4:
                return []
            head = b"".join(self._chunks)
            self._chunks = [head]
            size = _SIZE.unpack_from(head, 0)[0]
            if not self._check(size):
                self._chunks.clear()
                self.buffered = 0
                return []
            self._need = 4 + size
        if self.buffered < self._need:
            return []
        joined = b"".join(self._chunks)
        self._chunks = []
        self.buffered = 0
        self._need = 0
        return self._split(joined)
