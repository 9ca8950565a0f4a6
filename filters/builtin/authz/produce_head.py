"""The start of a Produce request body, read for the authorizer's screen: its transactional id and
its one topic's name.

The authorizer decides a Produce from these two alone, and kgate may hand its screen only the
first bytes of a large request (the records stream on). ``kgate.codec.peek.produce_prefix`` reads
the same fields for the core's peek; this reads them as the screen needs them, with nothing built
for the fields it does not use (acks and the timeout are skipped), and gives up (None) on every
shape the peek or the decoded hook handle instead: not exactly one topic, a length of 127 or more
in a flexible version, fewer bytes than the fields need. ``tests/filters/test_authz_screens.py``
holds it to the codec's decode.
"""

from __future__ import annotations

from typing import Final

_ONE: Final = b"\x00\x00\x00\x01"  # a non-flexible array of one element


def produce_head(body: bytes | memoryview, version: int) -> tuple[str | None, str, int] | None:
    """(transactional id, topic name, where the name ends) of a Produce v3-v12 body that names
    exactly one topic; None for any other shape or when ``body`` ends before the topic's name does."""
    n = len(body)
    if n < 2:
        return None
    txn: str | None = None
    if version >= 9:  # flexible: compact strings and arrays, lengths + 1 as unsigned varints
        size = body[0]
        if size & 0x80:
            return None
        pos = 1
        if size:
            pos = size  # size - 1 bytes after the length byte
            if pos > n:
                return None
            txn = str(body[1:pos], "utf-8")
        pos += 6  # acks, timeout_ms
        if pos + 2 > n or body[pos] != 2:  # one topic
            return None
        size = body[pos + 1]
        if size & 0x80 or not size:
            return None
        start, end = pos + 2, pos + 1 + size
    else:
        size = body[0] << 8 | body[1]
        pos = 2
        if not size & 0x8000:  # not null
            pos += size
            if pos > n:
                return None
            txn = str(body[2:pos], "utf-8")
        pos += 6  # acks, timeout_ms
        if pos + 6 > n or body[pos : pos + 4] != _ONE:
            return None
        size = body[pos + 4] << 8 | body[pos + 5]
        if size & 0x8000:
            return None
        start = pos + 6
        end = start + size
    if end > n:
        return None
    return txn, str(body[start:end], "utf-8"), end
