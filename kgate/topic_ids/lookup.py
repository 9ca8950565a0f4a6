"""kgate's own Metadata lookups by topic id: building the requests and reading the answers (pure).

Lookup by id uses Metadata **v12+** (the spec forbids ids in v10/v11 requests, and Tansu
answers such a request with a malformed response). Against a broker without v12, kgate asks
v10/v11 for all topics and matches ids (``ALL_TOPICS``). Tansu answers an unknown id at v12
with error 3 instead of 100, and zeroes the id of an unknown topic, so both codes mean "does
not exist" and answers are matched to the asked ids by position where the ids are missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID

from kgate.api.topic_names import LOOKUP_FAILED, TopicNameError
from kgate.codec.error_codes import RETRIABLE_CODES as _KAFKA_RETRIABLE
from kgate.codec.error_codes import ErrorCode
from kgate.codec.generated.data.metadata import MetadataRequest, MetadataRequestTopic

UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
UNKNOWN_TOPIC_ID = int(ErrorCode.UNKNOWN_TOPIC_ID)

#: Broker error codes for which asking again soon may give another answer: the ones Kafka marks
#: retriable, plus REBOOTSTRAP_REQUIRED (kgate's next lookup reconnects, which is the rebootstrap),
#: less "does not exist" (an id never comes back, so that answer is final).
RETRIABLE_CODES = (_KAFKA_RETRIABLE | {ErrorCode.REBOOTSTRAP_REQUIRED}) - {UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_ID}
#: Ids per Metadata request; more are split into several requests.
MAX_IDS_PER_REQUEST = 1000
#: The Metadata versions of a lookup by id, and of the all-topics fallback.
BY_ID_VERSIONS = (12, None)
ALL_TOPICS_VERSIONS = (10, 11)

ZERO_ID_ERROR = TopicNameError(UNKNOWN_TOPIC_ID, "the zero topic id names no topic", False)
NO_TOPIC_IDS = TopicNameError(UNKNOWN_TOPIC_ID, "the cluster has no topic ids (no Metadata v10+)", False)


def by_id_requests(keys: list[int]) -> Iterator[tuple[list[int], MetadataRequest]]:
    """One Metadata request (v12+) per ``MAX_IDS_PER_REQUEST`` keys, with the keys it asks for."""
    for i in range(0, len(keys), MAX_IDS_PER_REQUEST):
        chunk = keys[i : i + MAX_IDS_PER_REQUEST]
        yield (
            chunk,
            MetadataRequest(
                topics=[MetadataRequestTopic(topic_id=UUID(int=k), name=None) for k in chunk],
                allow_auto_topic_creation=False,
            ),
        )


def all_topics_request() -> MetadataRequest:
    """Every topic (v10/v11: never an id in the request)."""
    return MetadataRequest(topics=None, allow_auto_topic_creation=False)


def topic_result(t: Any) -> str | TopicNameError:
    """What one topic entry of a Metadata answer says about its id."""
    code = t.error_code
    if code == ErrorCode.NONE:
        if t.name and t.topic_id.int:
            return str(t.name)
        return TopicNameError(LOOKUP_FAILED, "broker answered without a name for this id", True)
    if code in (UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION):
        return TopicNameError(UNKNOWN_TOPIC_ID, f"topic id does not exist (broker error {code})", False)
    return TopicNameError(code, f"broker error {code} for this topic id", code in RETRIABLE_CODES)


def parse_by_id(keys: list[int], version: int, resp: Any) -> dict[int, str | TopicNameError]:
    """The answer to a lookup of ``keys`` by id, per key (keys it does not mention are absent)."""
    top = getattr(resp, "error_code", 0) if version >= 13 else 0
    if top:
        err = TopicNameError(top, f"broker error {top} for the whole Metadata request", True)
        return dict.fromkeys(keys, err)
    want = set(keys)
    out: dict[int, str | TopicNameError] = {}
    for t in resp.topics:
        k = t.topic_id.int
        if k in want and k not in out:
            out[k] = topic_result(t)
    if len(out) < len(keys) and len(resp.topics) == len(keys):
        # A broker that zeroes the id of an unknown topic (Tansu does in Fetch): by position.
        for k, t in zip(keys, resp.topics, strict=True):
            if k not in out and t.topic_id.int in (0, k):
                out[k] = topic_result(t)
    return out


def parse_all(keys: list[int], resp: Any) -> dict[int, str | TopicNameError]:
    """An all-topics answer: every healthy topic's name by id; the asked keys not among them are dead."""
    out: dict[int, str | TopicNameError] = {}
    for t in resp.topics:
        if t.error_code == ErrorCode.NONE and t.name and t.topic_id.int:
            out[t.topic_id.int] = t.name
    gone = TopicNameError(UNKNOWN_TOPIC_ID, "topic id not among the cluster's topics", False)
    for k in keys:
        out.setdefault(k, gone)
    return out
