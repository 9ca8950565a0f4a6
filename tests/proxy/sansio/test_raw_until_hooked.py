"""Raw mode until a request a hook must see: ``ConnectionCore._leave_raw``.

A chain that hooks only admin RPCs (the default chain's guardrails hooks CreateTopics and config
changes) must cost producers and consumers nothing: their connections never send such a request
and stay on the header-only path, where a large Produce is forwarded as its reads arrive. The
first hooked request moves its connection to the filtered path at that frame's boundary, with
nothing of it forwarded before the hook decided, and every answer in request order. Driven
sans-IO (tests/support/core_driver.py); the e2e guardrails tests run the same path on sockets.
"""

from __future__ import annotations

from typing import Any

import pytest
from support.core_driver import make_core

from kgate.api import ApiKey, ErrorCode, Filter, FilterContext, Respond, on_request
from kgate.codec import api
from kgate.codec.framing import FrameReader
from kgate.codec.generated.admin import create_topics as ct
from kgate.codec.generated.api_keys import CREATE_TOPICS as CT
from kgate.codec.generated.api_keys import METADATA as MD
from kgate.codec.generated.api_keys import PRODUCE as PR
from kgate.codec.generated.data import metadata as mm
from kgate.codec.generated.data import produce as pm
from kgate.codec.headers import request_frame, response_frame

MD_V, PR_V, CT_V = 12, 9, 7


class RefuseCreateTopics(Filter):
    """Hooks CreateTopics only, as guardrails does, and answers it itself (so it never goes upstream)."""

    name = "test-refuse-create-topics"

    @on_request(ApiKey.CREATE_TOPICS)
    def create(self, ctx: FilterContext, request: Any) -> Any:
        answer = ct.CreateTopicsResponse(
            topics=[
                ct.CreatableTopicResult(name=t.name, error_code=ErrorCode.POLICY_VIOLATION, error_message="too big")
                for t in request.topics
            ]
        )
        return Respond(answer)


def metadata_request(cid: int) -> bytes:
    req = mm.MetadataRequest(topics=[mm.MetadataRequestTopic(name="t")])
    return request_frame(MD, MD_V, cid, "c", api.request_header_version(MD, MD_V), req.encode(MD_V))


def metadata_answer(cid: int) -> bytes:
    return response_frame(cid, api.response_header_version(MD, MD_V), api.API_INFO[MD].response_class().encode(MD_V))


def produce_request(cid: int, records: bytes) -> bytes:
    req = pm.ProduceRequest(acks=1, timeout_ms=1000, transactional_id=None)
    req.topic_data = [pm.TopicProduceData(name="t", partition_data=[pm.PartitionProduceData(index=0, records=records)])]
    return request_frame(PR, PR_V, cid, "c", api.request_header_version(PR, PR_V), req.encode(PR_V))


def create_topics_request(cid: int) -> bytes:
    req = ct.CreateTopicsRequest(timeout_ms=1000, validate_only=False)
    req.topics = [
        ct.CreatableTopic(name="huge", num_partitions=1_111_556_097, replication_factor=1, assignments=[], configs=[])
    ]
    return request_frame(CT, CT_V, cid, "c", api.request_header_version(CT, CT_V), req.encode(CT_V))


def cids(data: bytes | bytearray, at: int) -> list[int]:
    frames, _end = FrameReader(1 << 30).split(bytes(data))
    return [int.from_bytes(f[at : at + 4], "big", signed=True) for f in frames]


def test_a_producer_under_an_admin_only_chain_stays_raw_and_streams_a_large_produce() -> None:
    core, actions = make_core([RefuseCreateTopics({})])
    frame = produce_request(1, b"r" * 200_000)
    core.receive_client(metadata_request(0))
    core.receive_client(frame[:4096])
    assert bytes(actions.upstream.data).endswith(frame[:4096]), "the Produce's first read went up before the rest"
    for at in range(4096, len(frame), 65536):
        core.receive_client(frame[at : at + 65536])
    assert core.raw_requests
    assert bytes(actions.upstream.data) == metadata_request(0) + frame
    assert [ex.cid for ex in core.pending] == [0, 1]


@pytest.mark.parametrize("split", [None, 3, 7, 11, 30], ids=lambda s: f"split-{s}")
def test_the_first_hooked_request_leaves_raw_mode_and_never_goes_upstream(split: int | None) -> None:
    """Metadata, then a CreateTopics (split after ``split`` bytes: before its api key is known, inside
    its header, or whole), then Metadata again: the refusal is kgate's, answers keep request order."""
    core, actions = make_core([RefuseCreateTopics({})])
    create = create_topics_request(2)
    first = metadata_request(1) + (create if split is None else create[:split])
    core.receive_client(first)
    if split is not None:
        assert bytes(actions.upstream.data) == metadata_request(1), "no byte of the hooked request went up early"
        core.receive_client(create[split:] + metadata_request(3))
    else:
        core.receive_client(metadata_request(3))
    assert not core.raw_requests
    assert cids(actions.upstream.data, 8) == [1, 3]  # the CreateTopics was answered by the hook
    core.receive_broker(metadata_answer(1))
    core.receive_broker(metadata_answer(3))
    assert cids(actions.client.data, 4) == [1, 2, 3]
    answers, _end = FrameReader(1 << 30).split(bytes(actions.client.data))
    refusal = api.decode_response(CT, CT_V, answers[1][9:])  # size, correlation id, header tags
    assert refusal.topics[0].error_code == ErrorCode.POLICY_VIOLATION


def test_without_hooks_a_split_header_is_still_forwarded_once_tracked() -> None:
    """Holding a head that is not yet readable delays it by one read at most; nothing is lost."""
    core, actions = make_core()
    frame = produce_request(1, b"x" * 100)
    core.receive_client(frame[:5])
    assert bytes(actions.upstream.data) == b""
    core.receive_client(frame[5:20])
    core.receive_client(frame[20:])
    assert bytes(actions.upstream.data) == frame
    assert core.raw_requests
    assert [ex.cid for ex in core.pending] == [1]
