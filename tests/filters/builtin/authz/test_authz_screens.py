"""The authorizer's and topic-policy's byte-level fast paths ("screens") against their decoded hooks.

A screen decides a Metadata request or answer, from its bytes
(``codec.metadata_walk``, ``codec.peek``) instead of the full decode the hooks get. These tests hold
the fast path to the slow one: the Metadata walk against the codec's decode (generated answers of
every version, with unknown tagged fields, and the real frames of ``../shared/corpus-tansu``), and
whole exchanges through a connection core with screens and with screens turned off, byte for byte,
over generated mixes of allowed and denied topics, asked for by name, by id or all at once.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgate.api import FORWARD
from kgate.codec import api
from kgate.codec.errors import CodecError
from kgate.codec.generated.data import metadata as md
from kgate.codec.metadata_walk import NOT_REQUESTED, metadata_answer, metadata_ask
from kgate.filters.builtin.authz.authorizer import Authorizer
from kgate.filters.builtin.authz.topic_policy import TopicPolicy
from kgate.testing.frames import request_bytes, response_bytes
from tests.codec.test_hypothesis_roundtrip import struct_strategy
from tests.support.core_driver import make_core

CORPUS = Path(__file__).resolve().parents[4].parent / "shared" / "corpus-tansu"
VERSIONS = range(md.MetadataResponse.MIN_VERSION, md.MetadataResponse.MAX_VERSION + 1)
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- the walk against the codec -----------------------------------------------------------------
def _check_answer(body: bytes, version: int) -> None:
    decoded = md.MetadataResponse.decode(body, version)
    answer = metadata_answer(body, version)
    assert [(t.error_code, t.name, t.topic_id) for t in answer.topics] == [
        (t.error_code, t.name, t.topic_id) for t in decoded.topics
    ]
    if version >= 8:
        assert [t.operations for t in answer.topics] == [t.topic_authorized_operations for t in decoded.topics]
    if 8 <= version <= 10:
        assert answer.cluster_operations == decoded.cluster_authorized_operations
    for i in range(len(answer.topics)):  # each span holds exactly its topic
        alone = md.MetadataResponse.decode(answer.without(set(range(len(answer.topics))) - {i}), version)
        assert alone.topics == [decoded.topics[i]]


@pytest.mark.parametrize("version", VERSIONS)
@SETTINGS
@given(data=st.data())
def test_answer_walk_matches_the_decode(version: int, data: Any) -> None:
    msg = data.draw(struct_strategy(md.MetadataResponse, version, version >= 9))
    body = bytes(msg.encode(version))
    _check_answer(body, version)
    drop = data.draw(st.sets(st.integers(0, max(len(msg.topics) - 1, 0))))
    drop &= set(range(len(msg.topics)))
    expected = md.MetadataResponse.decode(body, version)
    expected.topics = [t for i, t in enumerate(expected.topics) if i not in drop]
    # what the decoded hook's re-encoding holds, byte for byte
    assert metadata_answer(body, version).without(drop) == bytes(expected.encode(version))


@pytest.mark.parametrize("version", VERSIONS)
@SETTINGS
@given(data=st.data())
def test_request_walk_matches_the_decode(version: int, data: Any) -> None:
    msg = data.draw(struct_strategy(md.MetadataRequest, version, version >= 9))
    body = bytes(msg.encode(version))
    decoded = md.MetadataRequest.decode(body, version)
    ask = metadata_ask(body, version)
    if decoded.topics is None:
        assert ask.topics is None
    else:
        assert ask.topics == [(t.name, t.topic_id) for t in decoded.topics]
    assert ask.allow_auto_topic_creation == (decoded.allow_auto_topic_creation if version >= 4 else True)
    assert ask.include_topic_operations == decoded.include_topic_authorized_operations
    assert ask.include_cluster_operations == decoded.include_cluster_authorized_operations


@pytest.mark.parametrize("version", [0, 9, 12])
def test_a_cut_answer_raises_a_codec_error(version: int) -> None:
    msg = md.MetadataResponse(
        topics=[md.MetadataResponseTopic(name="t", partitions=[md.MetadataResponsePartition(replica_nodes=[1, 2])])]
    )
    body = bytes(msg.encode(version))
    for cut in range(len(body) - 1):
        try:
            answer = metadata_answer(body[:cut], version)
        except CodecError:
            continue
        # the few prefixes that walk end exactly where a shorter answer could: never a topic past the end
        assert all(t.end <= cut for t in answer.topics)


def _corpus(direction: str) -> list[Any]:
    if not CORPUS.is_dir():
        return [pytest.param(None, 0, marks=pytest.mark.skip(reason=f"{CORPUS} not found (shared material)"))]
    files = sorted((CORPUS / "frames").glob(f"*_{direction}_03_Metadata_v*.bin"))
    return [pytest.param(f, int(f.stem.rsplit("_v", 1)[1]), id=f.stem) for f in files]


@pytest.mark.parametrize(("path", "version"), _corpus("resp"))
def test_answer_walk_matches_the_decode_on_real_frames(path: Path, version: int) -> None:
    frame = path.read_bytes()
    offset = 8 if version < 9 else 9  # response header v1 (flexible): one empty tagged section
    assert frame[8] == 0 or version < 9
    _check_answer(frame[offset:], version)


@pytest.mark.parametrize(("path", "version"), _corpus("req"))
def test_request_walk_matches_the_decode_on_real_frames(path: Path, version: int) -> None:
    from kgate.codec.headers import parse_request_header

    frame = path.read_bytes()
    header = parse_request_header(frame, api.request_header_version(3, version))
    body = frame[header.body_offset :]
    decoded = md.MetadataRequest.decode(body, version)
    ask = metadata_ask(body, version)
    assert ask.topics == (None if decoded.topics is None else [(t.name, t.topic_id) for t in decoded.topics])


# -- whole exchanges: screens on against screens off ---------------------------------------------
ACL = {
    "default": "deny",
    "rules": [
        {"allow": "all", "topic": "*"},
        {"allow": "all", "group": "*"},
        {"allow": "all", "transactional_id": "*"},
        {"allow": "all", "cluster": True},
        {"deny": "all", "topic": {"glob": "secret-*"}},
        {"deny": "create", "topic": {"glob": "nocreate-*"}},
    ],
}
NAMES = ["orders", "payments", "secret-data", "secret-other", "nocreate-x", "logs"]
IDS = {n: uuid.UUID(int=i + 1) for i, n in enumerate(NAMES)}


def _filters(kind: str) -> list[Any]:
    if kind == "authorizer":
        return [Authorizer(Authorizer.validate_config(ACL))]
    if kind == "topic-policy":
        return [TopicPolicy(TopicPolicy.validate_config({"deny": ["secret-*"]}))]
    return [
        TopicPolicy(TopicPolicy.validate_config({"deny": ["secret-other"]})),
        Authorizer(Authorizer.validate_config(ACL)),
    ]


def _exchange(kind: str, screens: bool, frames: list[tuple[bytes, bytes]]) -> tuple[bytes, bytes, Any, dict[Any, int]]:
    filters = _filters(kind)
    core, out = make_core(filters)
    if not screens:
        core.chain.screens = lambda *a, **k: None  # type: ignore[method-assign]
    for request, answer in frames:
        core.receive_client(request)
        if out.close_reason is None and len(out.upstream.data) and answer:
            core.receive_broker(answer)
    counts: dict[Any, int] = {}
    for f in filters:
        report = f.report if isinstance(f, Authorizer) else f._admin.report
        for key, n in report.counts.items():
            counts[(type(f).__name__, *key)] = n
    return bytes(out.upstream.data), bytes(out.client.data), out.close_reason, counts


def _topic(version: int, name: str | None, code: int, partitions: int, ops: int, tags: bool) -> Any:
    t = md.MetadataResponseTopic(
        error_code=code,
        name=name,
        topic_id=IDS.get(name or "", uuid.UUID(int=0)) if version >= 10 else uuid.UUID(int=0),
        is_internal=False,
        partitions=[
            md.MetadataResponsePartition(partition_index=i, leader_id=1, replica_nodes=[1], isr_nodes=[1])
            for i in range(partitions)
        ],
        topic_authorized_operations=ops,
    )
    if tags and version >= 9:
        t._unknown_tagged = [(777, b"xy")]
    return t


@st.composite
def metadata_exchanges(draw: Any) -> tuple[int, bytes, bytes]:
    version = draw(st.sampled_from(list(VERSIONS)))
    shape = draw(st.sampled_from(["all", "names", "ids", "empty"]))
    if shape == "ids" and version < 10:
        shape = "names"
    asked: list[str] = draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True))
    zero = uuid.UUID(int=0)
    if shape == "all":
        topics = None if version >= 1 else []
    elif shape == "empty":
        topics = []
    elif shape == "ids":
        topics = [md.MetadataRequestTopic(name=None, topic_id=IDS[n]) for n in asked]
    else:
        topics = [md.MetadataRequestTopic(name=n, topic_id=zero) for n in asked]
    request = md.MetadataRequest(
        topics=topics,
        allow_auto_topic_creation=draw(st.booleans()),
        include_cluster_authorized_operations=draw(st.booleans()) and draw(st.booleans()),
        include_topic_authorized_operations=draw(st.booleans()) and draw(st.booleans()),
    )
    listed = asked if shape in ("names", "ids") else draw(st.lists(st.sampled_from(NAMES), max_size=5, unique=True))
    ops = st.sampled_from([NOT_REQUESTED, NOT_REQUESTED, 0b111111111000])
    answer_topics = [
        _topic(
            version,
            None if shape == "ids" and draw(st.booleans()) and False else n,
            draw(st.sampled_from([0, 0, 0, 3, 29])),
            draw(st.integers(0, 3)),
            draw(ops),
            draw(st.booleans()),
        )
        for n in listed
    ]
    answer = md.MetadataResponse(
        throttle_time_ms=0,
        brokers=[md.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9, rack=None)],
        cluster_id="c",
        controller_id=1,
        topics=answer_topics,
        cluster_authorized_operations=draw(ops),
    )
    cid = draw(st.integers(1, 1000))
    return (
        version,
        request_bytes(3, version, request, correlation_id=cid, client_id="cli"),
        response_bytes(3, version, answer, correlation_id=cid),
    )


@pytest.mark.parametrize("kind", ["authorizer", "topic-policy", "both"])
@settings(max_examples=250, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(exchange=metadata_exchanges())
def test_metadata_screens_answer_what_the_hooks_answer(kind: str, exchange: tuple[int, bytes, bytes]) -> None:
    _version, request, answer = exchange
    fast = _exchange(kind, True, [(request, answer)])
    slow = _exchange(kind, False, [(request, answer)])
    assert fast == slow


def test_metadata_screens_take_the_common_answers() -> None:
    """Without the screens in use, the comparison above would compare the slow path with itself."""
    request = md.MetadataRequest(topics=[md.MetadataRequestTopic(name="orders", topic_id=uuid.UUID(int=0))])
    listing = md.MetadataRequest(topics=None)
    for req in (request, listing):
        names = ("orders",) if req is request else ("orders", "secret-data", "logs")
        answer = md.MetadataResponse(
            brokers=[md.MetadataResponseBroker(node_id=1, host="127.0.0.1", port=9, rack=None)],
            topics=[_topic(12, n, 0, 2, NOT_REQUESTED, True) for n in names],
        )
        core, out = make_core(_filters("authorizer"))
        calls: list[str] = []
        record = calls.append
        for attr in ("screen_metadata_request", "screen_metadata_response"):
            f = core.chain.filters[0]
            orig = getattr(f, attr)

            def spy(ctx: Any, body: Any, orig: Any = orig, attr: str = attr, record: Any = record) -> Any:
                result = orig(ctx, body)
                record(f"{attr}:{'FORWARD' if result is FORWARD else type(result).__name__}")
                return result

            setattr(f, attr, spy)
        core.chain._screen_of = {k: getattr(f, v.__name__) for k, v in core.chain._screen_of.items()}
        core.chain._screens.clear()
        core.receive_client(request_bytes(3, 12, req, correlation_id=5, client_id="c"))
        core.receive_broker(response_bytes(3, 12, answer, correlation_id=5))
        assert out.close_reason is None
        assert calls[0] == "screen_metadata_request:FORWARD"
        # asked by name: nothing hidden; a listing: the denied topic's span dropped
        assert calls[1] == (
            "screen_metadata_response:FORWARD" if req is request else "screen_metadata_response:Forward"
        )
        shown = md.MetadataResponse.decode(out.client.data[9:], 12)
        assert [t.name for t in shown.topics] == (["orders"] if req is request else ["orders", "logs"])
