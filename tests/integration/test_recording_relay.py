"""The recording relay (tests/support/recording_relay.py) in front of the session's Kafka.

tools/record_kafka_corpus.py builds the committed Kafka corpus with it; this checks, live, that
what it records is what went over the wire: every frame is stored whole, each response is filed
under the api key and version of the request it answers, the body offset it derives from the
specs is where the codec finds the body, and the pairs decode to what the client got.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support.ports import free_port
from support.recording_relay import RecordingRelay
from support.workloads import unique

from kgate.api import ApiKey, ErrorCode
from kgate.codec import api
from kgate.codec.generated.admin.create_topics import CreatableTopic, CreateTopicsRequest
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataRequestTopic
from kgate.codec.generated.session.api_versions import ApiVersionsRequest
from kgate.proxy.carrier.upstream_client import UpstreamClient

SPEC_DIR = Path(__file__).resolve().parents[2].parent / "shared" / "kafka-message-specs"
pytestmark = pytest.mark.skipif(not SPEC_DIR.is_dir(), reason=f"message specs not available at {SPEC_DIR}")


async def test_records_frames_paired_and_decodable(kafka, tmp_path: Path) -> None:
    relay = RecordingRelay(free_port(), kafka.port, tmp_path / "corpus", SPEC_DIR).start()
    c = UpstreamClient(lambda: [("127.0.0.1", relay.listen_port)], client_id="relay-test")
    name = unique("rec")
    try:
        _v, versions = await c.request(
            ApiKey.API_VERSIONS, ApiVersionsRequest(client_software_name="relay-test", client_software_version="1"), 3
        )
        _v, created = await c.request(
            ApiKey.CREATE_TOPICS,
            CreateTopicsRequest(
                topics=[CreatableTopic(name=name, num_partitions=1, replication_factor=1)], timeout_ms=10000
            ),
            7,
        )
        # Kafka acknowledges CreateTopics before every broker's metadata cache has the topic: under
        # load a Metadata right after it can still answer without its id, so ask until it has one
        deadline = asyncio.get_running_loop().time() + 30
        while True:
            _v, md = await c.request(
                ApiKey.METADATA,
                MetadataRequest(topics=[MetadataRequestTopic(name=name)], allow_auto_topic_creation=False),
                12,
            )
            tid = md.topics[0].topic_id
            if tid.int != 0 or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.1)
    finally:
        c.close()
        relay.stop()
    assert versions.error_code == ErrorCode.NONE
    assert created.topics[0].error_code == ErrorCode.NONE
    assert tid.int != 0

    rows = [json.loads(line) for line in (tmp_path / "corpus" / "index.jsonl").read_text().splitlines()]
    by_key: dict[tuple[int, str], dict] = {}
    for r in rows:
        frame = (tmp_path / "corpus" / r["file"]).read_bytes()
        assert len(frame) == r["frame_len"] == int.from_bytes(frame[:4], "big") + 4
        decode = api.decode_request if r["direction"] == "req" else api.decode_response
        by_key[(r["api_key"], r["direction"])] = {
            **r,
            "msg": decode(r["api_key"], r["api_version"], memoryview(frame)[r["body_offset"] :]),
        }
    # UpstreamClient also asks ApiVersions v0 first when it connects; the test's requests follow
    assert {k for k, _d in by_key} >= {ApiKey.API_VERSIONS, ApiKey.CREATE_TOPICS, ApiKey.METADATA}
    for key in (ApiKey.API_VERSIONS, ApiKey.CREATE_TOPICS, ApiKey.METADATA):
        req, resp = by_key[(key, "req")], by_key[(key, "resp")]
        assert (req["conn"], req["correlation_id"], req["api_version"]) == (
            resp["conn"],
            resp["correlation_id"],
            resp["api_version"],
        )
    assert by_key[(ApiKey.CREATE_TOPICS, "req")]["msg"].topics[0].name == name
    assert by_key[(ApiKey.METADATA, "resp")]["msg"].topics[0].topic_id == tid
    assert by_key[(ApiKey.METADATA, "resp")]["header_version"] == 1  # v12 is flexible
