"""The authorizer and topic-policy on the header-only path, held to the fully decoded one.

A Metadata request every hook of which screens, and a single-topic Produce every hook of which
peeks (the authorizer's and topic-policy's Produce screens first), are decided on raw mode's
header-only path and forwarded as they came; the screened Metadata answer is decided in the
one-read answer path. These tests run the same sequences of exchanges, on one connection, through
a core on that path (default settings: raw mode, screens, peeks, requests in random pieces) and
through a core that decodes every request and answer and runs the hooks (``validate_requests``
forces the filtered path, screens switched off), and compare byte for byte what each side got,
how the connection ended, and the decision counters. ``produce_head`` (the Produce screen's
reader) is compared with the codec's decode.
"""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgate.codec.generated.data import metadata as md
from kgate.codec.generated.data import produce as pd
from kgate.filters.builtin.authz.authorizer import Authorizer
from kgate.filters.builtin.authz.produce_head import produce_head
from kgate.filters.builtin.authz.topic_policy import TopicPolicy
from kgate.testing.frames import request_bytes, response_bytes
from tests.filters.builtin.authz.test_authz_screens import metadata_exchanges
from tests.support.core_driver import make_core
from tests.support.wire import record_batch

ACL = {
    "default": "deny",
    "rules": [
        {"allow": "all", "topic": "*"},
        {"allow": "all", "group": "*"},
        {"allow": "all", "transactional_id": "*"},
        {"allow": "all", "cluster": True},
        {"deny": "all", "topic": {"glob": "secret-*"}},
        {"deny": "all", "transactional_id": {"glob": "secret-*"}},
        {"deny": "create", "topic": {"glob": "nocreate-*"}},
    ],
}
TOPICS = ["orders", "payments", "secret-data", "secret-other", "logs"]
PRODUCE_VERSIONS = range(3, 13)  # by name (v13 names topics by id: the peek's own path)
BATCH = record_batch([b"x" * 100])


def _filters(kind: str) -> list[Any]:
    if kind == "authorizer":
        return [Authorizer(Authorizer.validate_config(ACL))]
    if kind == "topic-policy":
        return [TopicPolicy(TopicPolicy.validate_config({"deny": ["secret-*"]}))]
    return [
        TopicPolicy(TopicPolicy.validate_config({"deny": ["secret-other"]})),
        Authorizer(Authorizer.validate_config(ACL)),
    ]


def _produce_request(version: int, txn: str | None, acks: int, topics: list[str]) -> Any:
    return pd.ProduceRequest(
        transactional_id=txn,
        acks=acks,
        timeout_ms=1500,
        topic_data=[
            pd.TopicProduceData(name=t, partition_data=[pd.PartitionProduceData(index=0, records=BATCH)])
            for t in topics
        ],
    )


@st.composite
def produce_exchanges(draw: Any) -> tuple[bytes, bytes | None]:
    version = draw(st.sampled_from(list(PRODUCE_VERSIONS)))
    topics = draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=2, unique=True))
    txn = draw(st.sampled_from([None, None, "txn-1", "secret-txn"]))
    acks = draw(st.sampled_from([1, 1, -1, 0]))
    request = request_bytes(0, version, _produce_request(version, txn, acks, topics), client_id="cli")
    if acks == 0:
        return request, None
    answer = pd.ProduceResponse(
        responses=[
            pd.TopicProduceResponse(name=t, partition_responses=[pd.PartitionProduceResponse(index=0, base_offset=7)])
            for t in topics
        ]
    )
    return request, response_bytes(0, version, answer)


def _with_cid(frame: bytes, cid: int, request: bool) -> bytes:
    at = 8 if request else 4
    return frame[:at] + cid.to_bytes(4, "big") + frame[at + 4 :]


def _counts(filters: list[Any]) -> dict[Any, int]:
    counts: dict[Any, int] = {}
    for f in filters:
        report = f.report if isinstance(f, Authorizer) else f._admin.report
        for key, n in report.counts.items():
            counts[(type(f).__name__, *key)] = n
    return counts


def _run(kind: str, fast: bool, exchanges: list[tuple[bytes, bytes | None]], cuts: list[int]) -> tuple[Any, ...]:
    """Each request (in pieces on the fast core), then its answer if the broker got the request."""
    filters = _filters(kind)
    if fast:
        core, out = make_core(filters)
    else:
        core, out = make_core(filters, validate_requests=True)
        core.chain.screens = lambda *a, **k: None  # type: ignore[method-assign]
    for i, (request, answer) in enumerate(exchanges):
        before = len(out.upstream.data)
        cut = cuts[i % len(cuts)] % len(request) if fast and cuts else 0
        for piece in (request[:cut], request[cut:]) if cut else (request,):
            core.receive_client(piece)
        if out.close_reason is not None:
            break
        if answer is not None and len(out.upstream.data) == before + len(request):
            core.receive_broker(answer)
    return bytes(out.upstream.data), bytes(out.client.data), out.close_reason, _counts(filters), core


@st.composite
def mixed_exchanges(draw: Any) -> list[tuple[bytes, bytes | None]]:
    n = draw(st.integers(1, 6))
    found: list[tuple[bytes, bytes | None]] = []
    for _ in range(n):
        if draw(st.booleans()):
            _version, request, answer = draw(metadata_exchanges())
            found.append((request, answer))
        else:
            found.append(draw(produce_exchanges()))
    # distinct correlation ids, in order, as a client numbers its requests
    return [
        (_with_cid(rq, i + 1, True), None if an is None else _with_cid(an, i + 1, False))
        for i, (rq, an) in enumerate(found)
    ]


SEQUENCES = settings(
    max_examples=120,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@given(
    kind=st.sampled_from(["authorizer", "topic-policy", "both"]),
    exchanges=mixed_exchanges(),
    cuts=st.lists(st.integers(0, 400), max_size=6),
)
@SEQUENCES
def test_the_header_only_path_answers_what_the_decoded_path_answers(
    kind: str, exchanges: list[tuple[bytes, bytes | None]], cuts: list[int]
) -> None:
    fast = _run(kind, True, exchanges, cuts)
    slow = _run(kind, False, exchanges, [])
    assert fast[:4] == slow[:4]


def _metadata(cid: int, names: list[str] | None) -> tuple[bytes, bytes]:
    zero = uuid.UUID(int=0)
    topics = None if names is None else [md.MetadataRequestTopic(name=n, topic_id=zero) for n in names]
    request = request_bytes(3, 12, md.MetadataRequest(topics=topics), correlation_id=cid, client_id="cli")
    listed = names if names is not None else ["orders", "logs"]
    answer = md.MetadataResponse(
        brokers=[md.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9, rack=None)],
        topics=[md.MetadataResponseTopic(name=n, topic_id=uuid.UUID(int=i + 1)) for i, n in enumerate(listed)],
    )
    return request, response_bytes(3, 12, answer, correlation_id=cid)


def _produce(cid: int, topic: str, version: int = 9) -> tuple[bytes, bytes]:
    request = request_bytes(0, version, _produce_request(version, None, 1, [topic]), correlation_id=cid)
    answer = pd.ProduceResponse(
        responses=[pd.TopicProduceResponse(name=topic, partition_responses=[pd.PartitionProduceResponse(index=0)])]
    )
    return request, response_bytes(0, version, answer, correlation_id=cid)


def test_allowed_metadata_and_produce_stay_on_the_header_only_path() -> None:
    """Before, the first request a hook must see (Metadata, Produce) made the connection filtered
    for good: every request after it was split into frames, its header parsed, a context and an
    exchange built on the general path. A denied one still goes the decoded way (and is refused
    as before), and the connection comes back to the header-only path after the next allowed one."""
    for kind in ("authorizer", "topic-policy"):
        core, out = make_core(_filters(kind))
        script = [_metadata(1, None), _produce(2, "orders"), _metadata(3, ["orders"]), _produce(4, "logs", 7)]
        for request, answer in script:
            core.receive_client(request)
            core.receive_broker(answer)
            assert core.raw_requests, (kind, request[:12])
        assert out.close_reason is None
        assert len(out.upstream.data) == sum(len(rq) for rq, _ in script)  # forwarded as they came
        denied, _ = _produce(5, "secret-data")
        core.receive_client(denied)
        assert not core.raw_requests  # decoded, refused by kgate: the broker never saw it
        assert len(out.upstream.data) == sum(len(rq) for rq, _ in script)
        request, answer = _produce(6, "orders")
        core.receive_client(request)
        core.receive_broker(answer)
        assert core.raw_requests
        shown = pd.ProduceResponse.decode(out.client.data[-len(answer) + 9 :], 9)
        assert shown.responses[0].name == "orders"


@given(
    version=st.sampled_from(list(PRODUCE_VERSIONS)),
    topics=st.lists(st.text(min_size=0, max_size=140), min_size=0, max_size=3),
    txn=st.one_of(st.none(), st.text(max_size=140)),
)
@settings(max_examples=300, deadline=None, database=None)
def test_produce_head_reads_what_the_codec_decodes(version: int, topics: list[str], txn: str | None) -> None:
    body = bytes(_produce_request(version, txn, 1, topics).encode(version))
    head = produce_head(body, version)
    decoded = pd.ProduceRequest.decode(body, version)
    if len(decoded.topic_data) != 1:
        assert head is None
        return
    if head is None:  # a length of 127 or more in a flexible version: left to the peek
        assert version >= 9
        assert len(topics[0].encode()) >= 126 or len((txn or "").encode()) >= 126
        return
    assert head[:2] == (decoded.transactional_id, decoded.topic_data[0].name)
    name = decoded.topic_data[0].name.encode()
    assert body[head[2] - len(name) : head[2]] == name
    for cut in range(len(body)):  # a start too short is undecided, never a wrong answer
        assert produce_head(body[:cut], version) in (None, head)
        assert produce_head(memoryview(body)[:cut], version) in (None, head)
