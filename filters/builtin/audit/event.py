"""Building one audit event (schema v1, docs/audit-log.md) from a finished exchange.

Runs on the audit writer thread: the event loop only queued references to the exchange and the
frames it already had (``Captured``). Per-topic detail comes from:

- Produce: the request, walked without copying records; errors from the answer.
- Fetch: the request's topics and the answer (bytes, records, per-partition codes), walked
  without copying records, also when the answer streamed through kgate in pieces.
- ListOffsets, Metadata (topics asked for), OffsetCommit, DeleteTopics, DeleteRecords,
  OffsetForLeaderEpoch, TxnOffsetCommit, ElectLeaders, OffsetDelete, DescribeProducers: request
  and answer (small messages); error codes per topic from the answer.
- every other api key: ``topics`` is empty; ``error_code`` from the decoded answer.

Two readers give the same facts (tests/filters/builtin/audit/test_audit_walk.py): the straight-line walkers of
walk.py for whole Produce v3-13, Fetch v4-18 and Metadata v1-13 frames and for a Produce
v9+ request that streamed through in pieces (``_walked``), and otherwise kgate's generated
decoders plus wire.py's walkers over pieces (the decoder path below ``_walked``). The
walkers made every writer-thread event cheaper, and the JSON line is a small part of what
remains thanks to cached pieces (client, api, topic heads) (bench/audit_events.py;
docs/performance.md, "where the cost was, what was cut").

A name for a topic id is asked of ``names`` (the writer's memo, then kgate's resolver on the
event loop) so the exchange itself never waited for it.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from uuid import UUID

from kgate.api import TOPIC_LISTS, ConnectionInfo, TopicNameError, topic_key
from kgate.codec import api
from kgate.codec.generated.api_keys import DELETE_TOPICS, FETCH, METADATA, PRODUCE
from kgate.codec.headers import HeaderError, response_body_offset
from kgate.codec.primitives import skip_tagged
from kgate.filters.answer_errors import top_error_code
from kgate.filters.builtin.audit import walk as walk
from kgate.filters.builtin.audit.wire import (
    Chunks,
    WireError,
    body_offset,
    count_records,
    fetch_response_topics,
    produce_request_topics,
)
from kgate.filters.exchanges import POLICY_STATE_KEY, Answer, FinishedExchange

SCHEMA = 1
_str: Callable[[str], str] = json.encoder.encode_basestring  # the C escaper
_ZERO = UUID(int=0)
_LOOKUP_FAILED = -1  # kgate.api.LOOKUP_FAILED: the lookup itself failed


class Captured:
    """What the event loop hands the writer per exchange: references only, nothing decoded."""

    __slots__ = (
        "address",
        "answer",
        "answer_bytes",
        "client_id",
        "end_ns",
        "ex",
        "facts",
        "header",
        "held",
        "principal",
    )

    def __init__(
        self,
        ex: FinishedExchange,
        info: ConnectionInfo,
        answer: Answer | None,
        answer_bytes: int | None,
        end_ns: int,
    ) -> None:
        self.ex = ex
        self.address: str = info.client_address
        self.client_id: str | None = info.client_id
        self.principal: str | None = info.principal
        self.answer: Answer | Chunks | None = answer  # a list becomes Chunks or bytes on the writer thread
        self.answer_bytes = answer_bytes
        self.end_ns = end_ns
        self.facts: tuple[int | None, list[_Topic]] | None = None  # computed once, on the writer thread
        self.header: tuple[str | None, int] | bool | None = False  # (client id, body offset); False: not parsed yet
        # bytes this event keeps alive, from the sizes kgate already knows (no len() per piece):
        # at most the frames' full sizes (a streamed request keeps only its head)
        self.held = ex.req_bytes + (answer_bytes or 0)

    @classmethod
    def of(cls, t: Offered) -> Captured:
        """The writer thread's view of what the event loop queued (``Offered``)."""
        ex, address, client_id, principal, answer, answer_bytes, end_ns = t
        c = cls.__new__(cls)
        c.ex, c.address, c.client_id, c.principal = ex, address, client_id, principal
        c.answer, c.answer_bytes, c.end_ns = answer, answer_bytes, end_ns
        c.facts, c.header = None, False
        c.held = ex.req_bytes + (answer_bytes or 0)
        return c


#: what the event loop queues per exchange: a plain tuple, ~10x cheaper to make than a
#: ``Captured`` (one allocation instead of an ``__init__`` with ten attribute writes):
#: (exchange, client address, client id, principal, answer, answer bytes, end ns)
Offered = tuple[FinishedExchange, str, "str | None", "str | None", "Answer | None", "int | None", int]


#: id -> name, or a TopicNameError (unresolved, or the lookup failed)
NameLookup = Callable[[Iterable[UUID]], "dict[UUID, str | TopicNameError]"]


class _Topic:
    __slots__ = ("bytes", "codes", "failed_bytes", "failed_records", "id", "name", "partitions", "records")

    def __init__(self, key: str | UUID) -> None:
        self.id: UUID | None = key if isinstance(key, UUID) else None
        self.name: str | None = key if isinstance(key, str) else None
        self.partitions = 0
        self.bytes: int | None = None
        self.records: int | None = None
        self.codes: list[int] = []
        #: Produce only, once its answer failed a partition of the topic: what the broker did not store
        #: (-1 records: not known); None while every partition was stored (docs/audit-log.md)
        self.failed_bytes: int | None = None
        self.failed_records: int | None = None


def topic_ids_of(c: Captured) -> list[UUID]:
    """The topic ids an event will need names for (asked for in one batch per written chunk)."""
    return [t.id for t in _topics(c)[1] if t.id is not None and t.name is None]


def _whole(frame: Any, size: int | None) -> bool:
    return frame is not None and not isinstance(frame, list) and size is not None and len(frame) == size


#: (api key, version) -> (request header version, response header version)
_HEADER_VERSIONS: dict[tuple[int, int], tuple[int, int]] = {}


def _header_versions(key: int, version: int) -> tuple[int, int]:
    found = _HEADER_VERSIONS.get((key, version))
    if found is None:
        found = (api.request_header_version(key, version), api.response_header_version(key, version))
        if len(_HEADER_VERSIONS) < 4096:
            _HEADER_VERSIONS[(key, version)] = found
    return found


def _header(c: Captured) -> tuple[str | None, int] | None:
    """The request's (client id, body offset), parsed once per event; None when kgate cannot read it."""
    if c.header is False:
        ex = c.ex
        c.header = None
        req = ex.req
        if isinstance(req, list):
            req = req[0]  # a streamed request: its header was whole in its first piece
        if ex.api_key in api.API_INFO:
            try:
                if len(req) < 12:
                    raise WireError("no request header")
                c.header = walk.request_header(req, _header_versions(ex.api_key, ex.api_version)[0])
            except (HeaderError, ValueError, IndexError, struct.error):
                pass
    return c.header  # type: ignore[return-value]


def _request(c: Captured) -> Any:
    """The decoded request: the one a hook decoded, or decoded here from a whole frame.

    The generated decoder slices ``records`` as a memoryview (no copy); it reads what the
    walkers (walk.py) do not: other api keys and versions, frames a walker refused. A
    general Python walk (audit_wire._Reader) costs more than the decoder (docs/performance.md,
    "Figures moved out of code comments"); the straight-line walkers, one index per field, cost less.
    """
    ex = c.ex
    if ex.request is not None:
        return ex.request
    header = _header(c)
    if header is None or not _whole(ex.req, ex.req_bytes):
        return None
    req = ex.req
    assert not isinstance(req, list)
    try:
        return api.decode_request(ex.api_key, ex.api_version, req[header[1] :])
    except (api.CodecError, ValueError):
        return None


def _answer(c: Captured) -> Any:
    ex = c.ex
    answer = c.answer
    if not isinstance(answer, bytes | memoryview) or not _whole(answer, c.answer_bytes):
        return None
    if ex.api_key not in api.API_INFO:
        return None
    try:
        body = response_body_offset(answer, api.response_header_version(ex.api_key, ex.api_version))
        return api.decode_response(ex.api_key, ex.api_version, answer[body:])
    except (HeaderError, api.CodecError, ValueError):
        return None


_CODE_FIELDS: dict[type, tuple[bool, tuple[tuple[str, bool], ...]]] = {}


def _asks_no_topic(c: Captured) -> bool:
    """Whether a Metadata request (v1+) asks for no topic or for every topic: its topic array's
    length, the body's first field, is 0 or null."""
    ex = c.ex
    if ex.request is not None:
        return not ex.request.topics
    header = _header(c)
    req = ex.req
    if header is None or ex.api_version < 1 or isinstance(req, list) or not _whole(req, ex.req_bytes):
        return False
    pos = header[1]
    if pos >= len(req):
        return False
    if ex.api_version >= 9:  # compact array: length + 1, 0 for null
        return req[pos] <= 1
    return len(req) >= pos + 4 and int.from_bytes(req[pos : pos + 4], "big", signed=True) <= 0


def _code_fields(cls: type) -> tuple[bool, tuple[tuple[str, bool], ...]]:
    """Whether ``cls`` has an ``error_code``, and its struct fields whose subtree has one (cached)."""
    found = _CODE_FIELDS.get(cls)
    if found is None:
        fields = getattr(cls, "_FIELDS", ())
        own = any(f.name == "error_code" and f.struct is None for f in fields)
        subs = tuple(
            (f.name, bool(f.array))
            for f in fields
            if f.struct is not None and (_code_fields(f.struct)[0] or _code_fields(f.struct)[1])
        )
        found = _CODE_FIELDS[cls] = (own, subs)
    return found


def _codes(obj: Any) -> Iterator[int]:
    """Every ``error_code`` in a decoded message, depth first (top level before topics and partitions)."""
    own, subs = _code_fields(type(obj))
    if own:
        code = obj.error_code
        if isinstance(code, int):
            yield code
    for name, array in subs:
        value = getattr(obj, name, None)
        if value is None:
            continue
        for item in value if array else (value,):
            yield from _codes(item)


def _first_error(codes: Iterable[int]) -> int:
    for code in codes:
        if code:
            return code
    return 0


def _partition_count(entry: Any) -> int:
    for attr in ("partitions", "partition_data", "partition_indexes", "partition_responses"):
        value = getattr(entry, attr, None)
        if isinstance(value, list):
            return len(value)
    return 0


def _topics(c: Captured) -> tuple[int | None, list[_Topic]]:
    """The answer's first non-zero error code (None without an answer) and the per-topic facts.

    Computed once per event (for the id batch, then for the line).
    """
    if c.facts is None:
        if type(c.answer) is list:
            # a streamed answer: Fetch is walked in place; anything else (rare, small) joined
            c.answer = Chunks(c.answer) if c.ex.api_key == FETCH else b"".join(c.answer)
        c.facts = _compute_topics(c)
    return c.facts


class _Facts:
    """The topics of one event, in the order the request named them."""

    __slots__ = ("by_key", "order")

    def __init__(self) -> None:
        self.by_key: dict[str | UUID, _Topic] = {}
        self.order: list[_Topic] = []

    def topic(self, key: str | UUID) -> _Topic:
        t = self.by_key.get(key)
        if t is None:
            t = self.by_key[key] = _Topic(key)
            self.order.append(t)
        return t

    def answered(self, pos: int, key: str | UUID) -> _Topic | None:
        """The topic an answer's ``pos``-th entry is about: by key, else by position (an id the
        broker zeroed, as Tansu does for unknown ids; a name answered for an id asked for)."""
        t = self.by_key.get(key)
        if t is None and pos < len(self.order):
            if isinstance(key, UUID) or self.order[pos].id is not None:
                t = self.order[pos]
        return t

    def codes(self, t: _Topic, codes: Iterable[int]) -> None:
        for code in codes:
            if code not in t.codes:
                t.codes.append(code)

    def learn(self, pos: int, key: str | UUID, codes: Iterable[int]) -> None:
        """An answer's ``pos``-th entry: its codes onto the topic the request named (none: ignored),
        with the id or name the answer tells about it (the decoded and the walked paths alike)."""
        hit = self.answered(pos, key)
        if hit is None:
            return  # not a topic the request named
        if isinstance(key, UUID) and hit.id is None:
            hit.id = key
        if isinstance(key, str) and key and hit.name is None:
            hit.name = key
        self.codes(hit, codes)

    def first_error(self) -> int:
        return _first_error(code for t in self.order for code in t.codes)


def _compute_topics(c: Captured) -> tuple[int | None, list[_Topic]]:
    first, topics = _facts_of(c)
    if first and c.ex.api_key == PRODUCE and c.answer is not None:
        _count_failed(c, topics)
    return first, topics


def _count_failed(c: Captured, topics: list[_Topic]) -> None:
    """A Produce answer that failed partitions: per topic, the record bytes and records the broker did
    not store, so a report bills what was written, not what was tried (a retried or refused batch
    counts once). A topic whose every partition failed is read from its totals; one with some failed
    is matched partition by partition on the decoded request and answer (a failure's cost only)."""
    mixed = []
    for t in topics:
        if not t.codes or t.codes == [0] or (t.bytes is None and t.records is None):
            continue  # all stored, or nothing known of what was sent (a refusal kgate never read)
        if 0 in t.codes:
            mixed.append(t)
        else:
            t.failed_bytes = t.bytes or 0
            t.failed_records = -1 if t.records is None else t.records
    if not mixed:
        return
    try:
        failed = _failed_partitions(c)
    except (api.CodecError, ValueError, IndexError, struct.error):  # a frame the decoder refuses
        failed = None  # the event is still written: its records marked unknown below
    for t in mixed:
        key = t.id if t.id is not None else t.name
        found = failed.get(key) if failed is not None and key is not None else None
        # not matched (a frame the decoder refused): the bytes stay billed, the records unknown
        t.failed_bytes, t.failed_records = found if found is not None else (0, -1)


def _failed_partitions(c: Captured) -> dict[str | UUID, tuple[int, int]] | None:
    """Per topic key of a Produce request: (bytes, records) of its partitions the answer failed. None
    when the request or the answer does not decode."""
    request = _request(c)
    if request is None and type(c.ex.req) is list:
        header = _header(c)
        joined = b"".join(c.ex.req)  # a streamed request: joined only when its answer failed a partition
        if header is not None and len(joined) == c.ex.req_bytes:
            request = api.decode_request(PRODUCE, c.ex.api_version, memoryview(joined)[header[1] :])
    answer = _answer(c)
    if request is None or answer is None:
        return None
    by_key: dict[str | UUID, dict[int, int]] = {}
    by_pos: list[dict[int, int]] = []
    for e in answer.responses:
        codes = {p.index: p.error_code for p in e.partition_responses}
        by_key[topic_key(e, "name")] = codes
        by_pos.append(codes)
    out: dict[str | UUID, tuple[int, int]] = {}
    for pos, e in enumerate(request.topic_data):
        key = topic_key(e, "name")
        # by position where the broker zeroed an id it did not know (Tansu), as _Facts.answered does
        codes = by_key.get(key) or (by_pos[pos] if pos < len(by_pos) else {})
        nbytes = records = 0
        for p in e.partition_data:
            if codes.get(p.index, 0) == 0 or p.records is None or not len(p.records):
                continue
            nbytes += len(p.records)
            records = _plus(records, count_records(p.records, 0, len(p.records)))
        was = out.get(key, (0, 0))
        out[key] = (was[0] + nbytes, _plus(was[1], records))
    return out


def _facts_of(c: Captured) -> tuple[int | None, list[_Topic]]:  # noqa: C901 - a branch per api shape
    ex = c.ex
    key = ex.api_key
    answered = c.answer is not None
    if key in _WALKED and ex.request is None:
        try:
            found = _walked(c, answered)
        except (ValueError, IndexError, struct.error):  # WireError, UnicodeDecodeError included
            found = None
        if found is not None:
            return found
    f = _Facts()
    if key == PRODUCE:
        return _produce(c, f, answered)
    if key == FETCH:
        return _fetch(c, f, answered)
    if key == METADATA and _asks_no_topic(c):
        # nothing to attribute, and Metadata has no top-level error code (before v13): neither
        # the request nor the (large) answer is read at all
        return (0 if answered else None), f.order
    request = _request(c)
    lists = TOPIC_LISTS.get(key)
    if lists is not None and request is not None:
        req_attr, name_attr, _resp_attr = lists
        if key == DELETE_TOPICS and not getattr(request, "topics", None):
            for name in getattr(request, "topic_names", None) or []:
                f.topic(name)
        else:
            for e in getattr(request, req_attr, None) or []:
                try:
                    k = topic_key(e, name_attr)
                except TypeError:
                    continue
                if k is not None:
                    f.topic(k).partitions += _partition_count(e)
    if not answered:
        return None, f.order
    answer = _answer(c)
    if answer is None:
        return _top_error(c), f.order
    if lists is None:
        return _first_error(_codes(answer)), f.order
    own = getattr(answer, "error_code", 0)
    for pos, e in enumerate(getattr(answer, lists[2], None) or []):
        try:
            k = topic_key(e)
        except TypeError:
            continue
        f.learn(pos, k, _codes(e))
    return (own if isinstance(own, int) and own else f.first_error()), f.order


_WALKED = frozenset((PRODUCE, FETCH, METADATA))
_WHOLE_TYPES = frozenset((bytes, memoryview, Chunks))


def _walked(c: Captured, answered: bool) -> tuple[int | None, list[_Topic]] | None:  # noqa: C901 - a branch per walked api
    """``_compute_topics`` for a whole Produce, Fetch or Metadata request (and its whole answer)
    with the straight-line walkers (walk.py): the same facts as the decoder path below, the
    event 15-40 % cheaper. None (or an exception from a walker) where that path must decide."""
    ex = c.ex
    key = ex.api_key
    v = ex.api_version
    req: Any = ex.req
    if type(req) is list:
        if key != PRODUCE or v < 9:
            return None
        req = Chunks(req)  # a streamed Produce request, read across its pieces (indexed like bytes)
    header = _header(c)
    if header is None or len(req) != ex.req_bytes:
        return None
    answer = c.answer
    if answered and (type(answer) not in _WHOLE_TYPES or len(answer) != c.answer_bytes):  # type: ignore[arg-type]
        return None  # no whole answer: the decoder path reads its top-level error code
    if key == METADATA and (v < 1 or _asks_no_topic(c)):
        return None
    f = _Facts()
    body = header[1]
    if key == PRODUCE:
        if not 3 <= v <= 13:
            return None
        for k, parts, nbytes, records in walk.produce_request(req, body, v):
            t = f.topic(k)
            t.partitions += parts
            t.bytes = (t.bytes or 0) + nbytes
            t.records = _plus(t.records or 0, records)
        if not answered:
            return None, f.order
        assert isinstance(answer, bytes | memoryview)
        for pos, (k, codes) in enumerate(walk.produce_response(answer, _response_body(answer, key, v), v)):
            f.codes(f.answered(pos, k) or f.topic(k), codes)
        return f.first_error(), f.order
    if key == FETCH:
        if not 4 <= v <= 18:
            return None
        for k, parts in walk.fetch_request(req, body, v):
            f.topic(k).partitions += parts
        if not answered:
            return None, f.order
        if isinstance(answer, Chunks):
            top, facts = fetch_response_topics(answer, body_offset(answer, _header_versions(key, v)[1]), v)
        else:
            assert isinstance(answer, bytes | memoryview)
            top, facts = walk.fetch_response(answer, _response_body(answer, key, v), v)
        _fetched(f, facts)
        return top or f.first_error(), f.order
    if not 1 <= v <= 13:
        return None
    for asked in walk.metadata_request(req, body, v):
        f.topic(asked)
    if not answered:
        return None, f.order
    assert isinstance(answer, bytes | memoryview)
    top, entries = walk.metadata_response(answer, _response_body(answer, key, v), v)
    for pos, (named, codes) in enumerate(entries):
        if named is not None:
            f.learn(pos, named, codes)
    return (top or f.first_error()), f.order


def _response_body(answer: bytes | memoryview, key: int, version: int) -> int:
    """Where an answer's body starts: after the correlation id (and header v1's tag section)."""
    if _header_versions(key, version)[1] == 0:
        return 8
    return 9 if answer[8] == 0 else skip_tagged(answer, 8)


def _fetched(f: _Facts, facts: Iterable[tuple[str | UUID, int, int, int, list[int]]]) -> None:
    """A Fetch answer's per-topic facts onto the request's topics."""
    for pos, (k, parts, nbytes, records, codes) in enumerate(facts):
        hit = f.answered(pos, k)
        if hit is None:
            hit = f.topic(k)
            hit.partitions = parts  # a fetch session's answer names topics the request did not
        hit.bytes = (hit.bytes or 0) + nbytes
        hit.records = _plus(hit.records, records)
        f.codes(hit, codes)


def _produce(c: Captured, f: _Facts, answered: bool) -> tuple[int | None, list[_Topic]]:
    ex = c.ex
    request = _request(c)
    if request is not None:
        for e in request.topic_data:
            t = f.topic(topic_key(e, "name"))
            t.bytes = t.bytes or 0
            t.records = t.records or 0
            for p in e.partition_data:
                t.partitions += 1
                records = p.records
                if records is not None and len(records):
                    t.bytes += len(records)
                    t.records = _plus(t.records, count_records(records, 0, len(records)))
    elif isinstance(ex.req, list):
        # a Produce that streamed through kgate in pieces: walked over them, records not joined
        header = _header(c)
        if header is not None:
            try:
                facts = produce_request_topics(Chunks(ex.req), header[1], ex.api_version)
            except (WireError, ValueError):
                facts = []
            for k, parts, nbytes, records, _unused in facts:
                t = f.topic(k)
                t.partitions += parts
                t.bytes = (t.bytes or 0) + nbytes
                t.records = _plus(t.records, records)
    if not answered:
        return None, f.order
    answer = _answer(c)
    if answer is None:
        return _top_error(c), f.order
    for pos, e in enumerate(answer.responses):
        k = topic_key(e, "name")
        hit = f.answered(pos, k) or f.topic(k)
        f.codes(hit, (p.error_code for p in e.partition_responses))
    return f.first_error(), f.order


def _fetch(c: Captured, f: _Facts, answered: bool) -> tuple[int | None, list[_Topic]]:
    ex = c.ex
    request = _request(c)
    if request is not None:
        for e in request.topics:
            f.topic(topic_key(e, "topic")).partitions += len(e.partitions)
    if not answered:
        return None, f.order
    answer = c.answer
    if isinstance(answer, Chunks) and _whole(answer, c.answer_bytes):
        # streamed through in pieces: walked over them without joining the records
        try:
            body = body_offset(answer, api.response_header_version(FETCH, ex.api_version))
            top, facts = fetch_response_topics(answer, body, ex.api_version)
        except (WireError, ValueError, IndexError):
            return _top_error(c), f.order
    else:
        decoded = _answer(c)
        if decoded is None:
            return _top_error(c), f.order
        top = getattr(decoded, "error_code", 0) or 0
        facts = []
        for e in decoded.responses:
            nbytes = records = 0
            codes: list[int] = []
            for p in e.partitions:
                if p.error_code not in codes:
                    codes.append(p.error_code)
                data = p.records
                if data is not None and len(data):
                    nbytes += len(data)
                    records = _plus(records, count_records(data, 0, len(data)))
            facts.append((topic_key(e, "topic"), len(e.partitions), nbytes, records, codes))
    _fetched(f, facts)
    return top or f.first_error(), f.order


def _plus(total: int | None, n: int) -> int:
    """Record counts added up; -1 (not countable from the batch headers) stays -1, written as null."""
    if total is None:
        return n
    return -1 if total < 0 or n < 0 else total + n


def _top_error(c: Captured) -> int:
    """The answer's top-level error code from its first bytes (0 when it has none there)."""
    answer = c.answer
    if isinstance(answer, Chunks):
        answer = answer.get(0, min(len(answer), 64))
    if not isinstance(answer, bytes | memoryview):
        return 0
    return top_error_code(c.ex.api_key, c.ex.api_version, answer) or 0


def build_event(
    c: Captured,
    *,
    instance: str,
    cluster: str,
    wall_offset_ns: int,
    names: dict[UUID, str | TopicNameError],
) -> dict[str, Any]:
    """The audit event of one exchange as a dict (docs/audit-log.md, schema v1): ``event_line`` parsed."""
    line = event_line(c, instance=instance, cluster=cluster, wall_offset_ns=wall_offset_ns, names=names)
    return json.loads(line)


def event_line(
    c: Captured,
    *,
    instance: str,
    cluster: str,
    wall_offset_ns: int,
    names: dict[UUID, str | TopicNameError],
) -> bytes:
    """The audit event of one exchange as one JSON line, ``\\n`` included (schema v1).

    Written straight from the exchange with f-strings and the C string escaper: building a dict
    and ``json.dumps`` it cost more than twice as much (docs/performance.md, "Before (the
    `audit-log` branch as first merged)"), and
    this is the writer thread's largest cost per event after reading the frames. ``wall_offset_ns``
    turns the core's monotonic stamps into wall-clock time (one clock read per exchange instead of
    two); ``names`` holds what was resolved for the event's topic ids.
    """
    ex = c.ex
    first, topics = _topics(c)
    header = _header(c)
    client_id = header[0] if header is not None else c.client_id
    answered = c.answer is not None and c.answer_bytes is not None
    parts = []
    for t in topics:
        name, status = t.name, "given"
        tid = t.id
        if tid is not None and tid == _ZERO:
            tid = t.id = None
        if name is None:
            found = names.get(tid) if tid is not None else None
            if isinstance(found, str):
                name, status = found, "resolved"
            elif isinstance(found, TopicNameError) and found.code == _LOOKUP_FAILED:
                status = "lookup_failed"
            else:
                status = "unresolved"
        head = _TOPIC_HEADS.get((tid, name, status))
        if head is None:
            head = _topic_head(tid, name, status)
        nbytes, records = t.bytes, t.records
        failed = ""
        if t.failed_bytes is not None:
            lost = t.failed_records
            failed = f',"failed_bytes":{t.failed_bytes},"failed_records":{"null" if lost is None or lost < 0 else lost}'
        parts.append(
            f'{head}"partitions":{t.partitions},"bytes":{"null" if nbytes is None else nbytes},'
            f'"records":{"null" if records is None or records < 0 else records},'
            f'"error_codes":[{",".join(map(str, t.codes)) if answered else ""}]{failed}}}'
        )
    policy = ex.state.get(POLICY_STATE_KEY) if ex.state else None
    if answered:
        tail = (
            f'"error_code":{first or 0},"latency_us":{(c.end_ns - ex.t0_ns) // 1000},'
            f'"request_bytes":{ex.req_bytes},"response_bytes":{c.answer_bytes},'
        )
    else:
        tail = f'"error_code":null,"latency_us":null,"request_bytes":{ex.req_bytes},"response_bytes":null,'
    who = _CLIENTS.get((instance, cluster, c.address, client_id, c.principal))
    if who is None:
        who = _client(instance, cluster, c.address, client_id, c.principal)
    api_head = _API_HEADS.get((ex.api_key, ex.api_version))
    if api_head is None:
        api_head = _api_head(ex.api_key, ex.api_version)
    line = (
        f'{{"schema":{SCHEMA},"time_us":{(ex.t0_ns + wall_offset_ns) // 1000},{who}{api_head}'
        f'"correlation_id":{ex.cid},{tail}"topics":[{",".join(parts)}],'
        f'"policy":{_JSON(list(policy)) if policy else "null"}}}\n'
    )
    return line.encode("utf-8", "backslashreplace")  # a lone surrogate becomes a JSON \\u escape


#: JSON pieces that repeat from event to event, built once (the writer's per-event cost is Python
#: work: each cached piece saves a few escaper calls and f-string parts; docs/performance.md,
#: "where the cost was, what was cut"):
#: (instance, cluster, address, client id, principal) -> '"instance":..,"cluster":..,"client":{..},'
_CLIENTS: dict[tuple[str, str, str, str | None, str | None], str] = {}
#: (api key, version) -> '"api":{..},'
_API_HEADS: dict[tuple[int, int], str] = {}
#: (topic id, name, name status) -> '{"id":..,"name":..,"name_status":..,'
_TOPIC_HEADS: dict[tuple[UUID | None, str | None, str], str] = {}
_PIECES_MAX = 10_000  # entries per cache at most (a cache is cleared when full: ids die, clients leave)


def _client(instance: str, cluster: str, address: str, client_id: str | None, principal: str | None) -> str:
    piece = (
        f'"instance":{_str(instance)},"cluster":{_str(cluster)},"client":{{"address":{_j(address)},'
        f'"id":{_j(client_id)},"principal":{_j(principal)}}},'
    )
    if len(_CLIENTS) >= _PIECES_MAX:
        _CLIENTS.clear()
    _CLIENTS[(instance, cluster, address, client_id, principal)] = piece
    return piece


def _api_head(api_key: int, version: int) -> str:
    piece = f'"api":{{"key":{api_key},"name":{_api_name(api_key)},"version":{version}}},'
    if len(_API_HEADS) >= _PIECES_MAX:
        _API_HEADS.clear()
    _API_HEADS[(api_key, version)] = piece
    return piece


def _topic_head(topic_id: UUID | None, name: str | None, status: str) -> str:
    piece = (
        f'{{"id":{_j(_id_string(topic_id) if topic_id is not None else None)},"name":{_j(name)},'
        f'"name_status":"{status}",'
    )
    if len(_TOPIC_HEADS) >= _PIECES_MAX:
        _TOPIC_HEADS.clear()
    _TOPIC_HEADS[(topic_id, name, status)] = piece
    return piece


_API_NAMES: dict[int, str] = {}


def _api_name(api_key: int) -> str:
    """Kafka's name of an api key as a JSON string (``"unknown"`` for keys kgate does not know)."""
    found = _API_NAMES.get(api_key)
    if found is None:
        info = api.API_INFO.get(api_key)
        found = _str(info.name if info is not None else "unknown")
        if len(_API_NAMES) < 1024:
            _API_NAMES[api_key] = found
    return found


def _id_string(topic_id: UUID) -> str:
    """Kafka's string form of a topic id: URL-safe base64 of the 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode("ascii")


_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _j(value: Any) -> str:
    """One JSON scalar: strings through the C escaper, ints as they print, None as null."""
    if value is None:
        return "null"
    if type(value) is str:
        return _str(value)
    return str(int(value))
