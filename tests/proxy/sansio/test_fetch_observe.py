"""Which small Fetch responses kgate decodes to learn that an id is gone.

A Fetch response reporting UNKNOWN_TOPIC_ID (100) or UNKNOWN_TOPIC_OR_PARTITION (3) for an id
teaches the resolver to evict it; decoding every small response to find out cost a tailing
consumer ~10 us per Fetch. ``_may_carry_unknown_topic`` lets through, for decoding, every response
that could carry one of those codes and skips those that cannot.
"""

from __future__ import annotations

import uuid

import pytest

from kgate.codec.generated.data.fetch import FetchableTopicResponse, FetchResponse, PartitionData
from kgate.codec.headers import response_frame
from kgate.proxy.sansio.plans import may_carry_unknown_topic as _may_carry_unknown_topic

TID = uuid.UUID("0b0c0d0e-0f10-1112-1314-151617181920")  # no 00 03 / 00 64 byte pair in it


def _frame(code: int, records: bytes | None) -> memoryview:
    part = PartitionData(
        partition_index=0,
        error_code=code,
        high_watermark=1 if records else -1,
        last_stable_offset=1 if records else -1,
        log_start_offset=0 if records else -1,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=records,
    )
    resp = FetchResponse(responses=[FetchableTopicResponse(topic_id=TID, partitions=[part])])
    return memoryview(response_frame(7, 1, resp.encode(15)))


@pytest.mark.parametrize("code", [3, 100])
def test_a_response_reporting_an_unknown_topic_is_decoded(code: int) -> None:
    assert _may_carry_unknown_topic(_frame(code, None))


def test_a_plain_answer_with_records_is_not() -> None:
    assert not _may_carry_unknown_topic(_frame(0, b"\x7f" * 40))
    assert not _may_carry_unknown_topic(_frame(1, None))  # another error: nothing to learn


def test_the_code_bytes_anywhere_count_false_positives_only_cost_a_decode() -> None:
    assert _may_carry_unknown_topic(_frame(0, b"\x7f\x00\x64\x7f"))
