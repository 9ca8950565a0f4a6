"""Walk a Metadata request or response body without decoding it: where each topic is, and its keys.

A policy that hides topics from Metadata answers needs, per topic, only its error code, name and
id (and, from v8, its ``topic_authorized_operations`` bits); the partitions, which are nearly all of
a listing's bytes, it never reads. Decoding the whole answer into objects and encoding it again
costs a policy filter several times what the proxy pays for the round trip otherwise
(docs/performance.md, "the authorizer's Metadata fast path"). These functions read
only the topic keys and the byte span of each topic, so that an answer whose topics are all
allowed goes on as it came, and one with denied topics in a listing loses their spans
(``MetadataAnswer.without``).

Every Metadata version the codec knows (0-13) is read, flexible ones (v9+) with their tagged
fields skipped by length; a body that does not have the structure its version says raises
``CodecError``. The tests compare each walk with the generated codec's full decode.
"""

from __future__ import annotations

import struct
from uuid import UUID

from kgate.codec.errors import CodecError
from kgate.codec.primitives import read_uvarint, skip_tagged, uvarint_bytes

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ZERO = UUID(int=0)
_ZERO_BYTES = bytes(16)
#: ``topic_authorized_operations`` / ``cluster_authorized_operations`` when the client did not ask
NOT_REQUESTED = -2147483648


class TopicSpan:
    """One topic of a Metadata answer: its keys and where its bytes are in the body."""

    __slots__ = ("_id", "end", "error_code", "name", "operations", "start")

    def __init__(
        self, start: int, end: int, error_code: int, name: str | None, topic_id: bytes, operations: int
    ) -> None:
        self.start, self.end = start, end
        self.error_code = error_code
        self.name = name
        self._id = topic_id  # 16 bytes from v10, else empty
        self.operations = operations  # topic_authorized_operations (NOT_REQUESTED below v8)

    @property
    def topic_id(self) -> UUID:
        """The topic's id; the zero UUID below v10 (the codec's default). Made when asked for."""
        raw = self._id
        return UUID(bytes=raw) if raw and raw != _ZERO_BYTES else _ZERO


class MetadataAnswer:
    """The topics of a Metadata response body, and what surrounds their array."""

    __slots__ = ("body", "cluster_operations", "count_at", "topics", "topics_at", "topics_end", "version")

    def __init__(self, body: bytes | memoryview, version: int) -> None:
        self.body = body
        self.version = version
        self.topics: list[TopicSpan] = []
        self.count_at = 0  # where the topics array's count starts
        self.topics_at = 0  # where its first topic starts
        self.topics_end = 0  # where the byte after its last topic is
        self.cluster_operations = NOT_REQUESTED  # v8-10

    def without(self, drop: set[int]) -> bytes:
        """The body with the topics at these indexes left out (the array's count follows)."""
        body = self.body
        kept = [t for i, t in enumerate(self.topics) if i not in drop]
        n = len(kept)
        count = uvarint_bytes(n + 1) if self.version >= 9 else _I32.pack(n)
        parts = [body[: self.count_at], count]
        # consecutive kept topics go as one slice
        run_start = -1
        run_end = -1
        for t in kept:
            if t.start == run_end:
                run_end = t.end
                continue
            if run_start >= 0:
                parts.append(body[run_start:run_end])
            run_start, run_end = t.start, t.end
        if run_start >= 0:
            parts.append(body[run_start:run_end])
        parts.append(body[self.topics_end :])
        return b"".join(parts)


def _string(buf: bytes | memoryview, pos: int, flexible: bool) -> tuple[str | None, int]:
    if flexible:
        n, pos = read_uvarint(buf, pos)
        n -= 1
    else:
        n = _I16.unpack_from(buf, pos)[0]
        pos += 2
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise CodecError("string runs past the end of the body")
    return str(buf[pos:end], "utf-8"), end


def _skip_string(buf: bytes | memoryview, pos: int, flexible: bool) -> int:
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return pos + max(n - 1, 0)
    n = _I16.unpack_from(buf, pos)[0]
    return pos + 2 + max(n, 0)


def _count(buf: bytes | memoryview, pos: int, flexible: bool) -> tuple[int, int]:
    """An array's length (-1: null) and where its first element starts."""
    if flexible:
        n, pos = read_uvarint(buf, pos)
        return n - 1, pos
    return _I32.unpack_from(buf, pos)[0], pos + 4


def _skip_int32s(buf: bytes | memoryview, pos: int, flexible: bool) -> int:
    n, pos = _count(buf, pos, flexible)
    return pos + 4 * max(n, 0)


#: answers and requests walked last, by (version, body bytes): a client that polls Metadata gets the
#: same answer again and again (the correlation id is in the header, not the body), and the walk of
#: an answer is a pure function of its bytes; small bodies only (a copy and a compare per call)
_ANSWERS: dict[tuple[int, bytes], MetadataAnswer] = {}
_ASKS: dict[tuple[int, bytes], MetadataAsk] = {}
_REMEMBER_MAX = 16 * 1024  # bytes of a body kept
_REMEMBERED = 16  # walks kept (the oldest goes first): at most 256 KiB of bodies per cache


def _remember(cache: dict, key: tuple[int, bytes], value: object) -> None:
    if len(cache) >= _REMEMBERED:
        del cache[next(iter(cache))]
    cache[key] = value


def metadata_answer(body: bytes | memoryview, version: int) -> MetadataAnswer:
    """Walk a Metadata response body (after the response header) of ``version`` (0-13).

    A small body walked before is not walked again (``_ANSWERS``): kgate walks an answer to learn
    its topic names and each filter's screen asks for the same walk. The answer is read-only.
    """
    small = len(body) <= _REMEMBER_MAX
    if small:
        key = (version, bytes(body))
        found = _ANSWERS.get(key)
        if found is not None:
            return found
    try:
        answer = _answer(key[1] if small else body, version)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise CodecError(f"Metadata v{version} response does not walk: {exc}") from exc
    if small:
        _remember(_ANSWERS, key, answer)
    return answer


def _answer(buf: bytes | memoryview, version: int) -> MetadataAnswer:  # noqa: C901 - one straight walk, reads inline
    # Inline reads per partition: with a helper call per field the walk cost more than the codec's
    # generated decoder; inline about the same (docs/performance.md, "the authorizer's Metadata fast
    # path"): the saving is in what is then not built, hooked or encoded, and in walking once.
    flexible = version >= 9
    answer = MetadataAnswer(buf, version)
    size = len(buf)
    pos = 4 if version >= 3 else 0  # throttle_time_ms
    n, pos = _count(buf, pos, flexible)
    for _ in range(max(n, 0)):  # brokers
        pos = _skip_string(buf, pos + 4, flexible) + 4  # node_id, host, port
        if version >= 1:
            pos = _skip_string(buf, pos, flexible)  # rack
        if flexible:
            pos = skip_tagged(buf, pos)
    if version >= 2:
        pos = _skip_string(buf, pos, flexible)  # cluster_id
    if version >= 1:
        pos += 4  # controller_id
    answer.count_at = pos
    n, pos = _count(buf, pos, flexible)
    answer.topics_at = pos
    topics = answer.topics
    fixed = 14 if version >= 7 else 10  # a partition's error_code, index, leader (and leader_epoch)
    arrays = 3 if version >= 5 else 2  # replica_nodes, isr_nodes (and offline_replicas)
    unpack16, unpack32 = _I16.unpack_from, _I32.unpack_from
    for _ in range(max(n, 0)):
        start = pos
        code = unpack16(buf, pos)[0]
        name, pos = _string(buf, pos + 2, flexible)
        raw = b""
        if version >= 10:
            raw = bytes(buf[pos : pos + 16])
            pos += 16
        if version >= 1:
            pos += 1  # is_internal
        if flexible:
            parts = buf[pos]
            if parts < 0x80:
                pos += 1
            else:
                parts, pos = read_uvarint(buf, pos)
            parts -= 1
            for _ in range(parts):
                pos += fixed
                for _ in range(arrays):
                    k = buf[pos]
                    if k < 0x80:
                        pos += 1
                    else:
                        k, pos = read_uvarint(buf, pos)
                    if k > 1:
                        pos += 4 * (k - 1)
                if buf[pos] == 0:
                    pos += 1
                else:
                    pos = skip_tagged(buf, pos)
        else:
            parts = unpack32(buf, pos)[0]
            pos += 4
            for _ in range(parts):
                pos += fixed
                for _ in range(arrays):
                    k = unpack32(buf, pos)[0]
                    pos += 4
                    if k > 0:
                        pos += 4 * k
        operations = NOT_REQUESTED
        if version >= 8:
            operations = unpack32(buf, pos)[0]
            pos += 4
        if flexible:
            if buf[pos] == 0:
                pos += 1
            else:
                pos = skip_tagged(buf, pos)
        if pos > size or len(raw) != (16 if version >= 10 else 0):
            raise CodecError("topic runs past the end of the body")
        topics.append(TopicSpan(start, pos, code, name, raw, operations))
    answer.topics_end = pos
    if 8 <= version <= 10:
        answer.cluster_operations = unpack32(buf, pos)[0]
        pos += 4
    if version >= 13:
        pos += 2  # error_code
    if flexible:
        pos = skip_tagged(buf, pos)
    if pos > size:
        raise CodecError("Metadata response runs past the end of the body")
    return answer


class MetadataAsk:
    """What a Metadata request asks: its topics (None: every topic) and its flags."""

    __slots__ = ("allow_auto_topic_creation", "include_cluster_operations", "include_topic_operations", "topics")

    def __init__(self) -> None:
        #: (name, topic id) per topic asked for; None asks for every topic (v1+)
        self.topics: list[tuple[str | None, UUID]] | None = None
        self.allow_auto_topic_creation = True  # below v4 the broker decides (the codec's default)
        self.include_cluster_operations = False
        self.include_topic_operations = False


def metadata_ask(body: bytes | memoryview, version: int) -> MetadataAsk:
    """Walk a Metadata request body (after the request header) of ``version`` (0-13); read-only.

    A small body walked before is not walked again (a client asks the same again and again)."""
    small = len(body) <= _REMEMBER_MAX
    if small:
        key = (version, bytes(body))
        found = _ASKS.get(key)
        if found is not None:
            return found
    try:
        ask = _ask(body, version)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise CodecError(f"Metadata v{version} request does not walk: {exc}") from exc
    if small:
        _remember(_ASKS, key, ask)
    return ask


def _ask(buf: bytes | memoryview, version: int) -> MetadataAsk:
    flexible = version >= 9
    ask = MetadataAsk()
    n, pos = _count(buf, 0, flexible)
    if n >= 0 or version == 0:
        topics: list[tuple[str | None, UUID]] = []
        for _ in range(max(n, 0)):
            topic_id = _ZERO
            if version >= 10:
                raw = bytes(buf[pos : pos + 16])
                if len(raw) != 16:
                    raise CodecError("topic id runs past the end of the body")
                if raw != b"\x00" * 16:
                    topic_id = UUID(bytes=raw)
                pos += 16
            name, pos = _string(buf, pos, flexible)
            if flexible:
                pos = skip_tagged(buf, pos)
            topics.append((name, topic_id))
        ask.topics = topics
    if version >= 4:
        ask.allow_auto_topic_creation = buf[pos] != 0
        pos += 1
    if 8 <= version <= 10:
        ask.include_cluster_operations = buf[pos] != 0
        pos += 1
    if version >= 8:
        ask.include_topic_operations = buf[pos] != 0
        pos += 1
    if flexible:
        pos = skip_tagged(buf, pos)
    if pos > len(buf):
        raise CodecError("Metadata request runs past the end of the body")
    return ask
