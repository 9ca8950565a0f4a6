"""Request validation at the proxy: malformed requests never reach a broker.

Mutated request frames sent through kgate crashed or wedged the test broker in every fuzz run
(one broker tried to allocate 106 GB from a forged array count; another left 1,353 of 2,500
connections unanswered) while kgate itself stayed up (issue 7, item 10). A proxy in front of
brokers is their shield: with ``proxy.validate_requests`` (off by default, for its cost) every request of an
api key and version kgate's codec knows is decoded before it is forwarded, which checks every
length and count against the bytes that are really there, and a Produce's record batches are
walked (each batch's length must fit and its magic must be 2). A request that fails is refused:
a log line naming the client, the api and the problem, and the connection closes (requests
before it still went; nothing after it is read).

What is not checked: api keys or versions kgate's codec does not know (forwarded as they are;
the broker answers what it does not support), the records inside a batch (the broker checks
their CRC), and bytes after the end of a body (librdkafka sends three extra bytes after some
Metadata v12 bodies, and Kafka accepts them).

Cost (docs/performance.md, "Request validation"): the decode itself is cheap, but a validating
kgate also holds each request whole before forwarding it instead of passing its bytes on as they
arrive, and a Produce is no longer streamed under a peeking filter, so large produce under a
policy loses much of its throughput and produce costs more proxy CPU per MB and per request;
Metadata and consume are unchanged. Hence off by default: turn it on in front of brokers that
must not see malformed input (or during an incident).
"""

from __future__ import annotations

from typing import Any

from kgate.codec import api
from kgate.codec.generated.api_keys import PRODUCE
from kgate.codec.headers import HeaderError, parse_request_header

_BATCH_HEADER = 61  # a v2 record batch header: offset, length, epoch, magic, crc, ... record count
_MIN_BATCH_LENGTH = _BATCH_HEADER - 12  # batch_length counts from after its own field


def check_request(frame: memoryview, api_key: int, version: int) -> tuple[str | None, Any]:
    """(problem, decoded request): problem is None for a request that may go to the broker.

    The decoded request is returned so that a caller that needs it does not decode twice.
    """
    info = api.API_INFO.get(api_key)
    if info is None or not info.min_version <= version <= info.max_version:
        return None, None
    try:
        header = parse_request_header(frame, api.request_header_version(api_key, version))
        msg = api.decode_request(api_key, version, frame[header.body_offset :])
    except (HeaderError, api.CodecError, ValueError, UnicodeDecodeError) as exc:
        return f"does not decode: {exc}", None
    if api_key == PRODUCE:
        problem = check_produce_records(msg)
        if problem is not None:
            return problem, msg
    return None, msg


def check_produce_records(msg: Any) -> str | None:
    """Walk every partition's record batches: each must fit and be a magic-2 batch."""
    for topic in msg.topic_data:
        for part in topic.partition_data:
            records = part.records
            if records is None:
                continue
            problem = check_batches(records)
            if problem is not None:
                return f"partition {part.index}: {problem}"
    return None


def check_batches(records: memoryview | bytes) -> str | None:
    """The first problem in a run of v2 record batches, or None."""
    size = len(records)
    pos = 0
    while pos < size:
        if size - pos < _BATCH_HEADER:
            return f"truncated record batch header at byte {pos} ({size - pos} bytes left)"
        length = int.from_bytes(records[pos + 8 : pos + 12], "big", signed=True)
        if length < _MIN_BATCH_LENGTH or length > size - pos - 12:
            return f"record batch length {length} at byte {pos} does not fit ({size - pos - 12} bytes left)"
        magic = records[pos + 16]
        if magic != 2:
            return f"record batch magic {magic} at byte {pos} (Produce v3+ requires 2)"
        pos += 12 + length
    return None
