"""AnswerMemo (proxy/sansio/answer_memo.py): a remembered rewrite is byte for byte the fresh one, and
nothing is remembered that could be stale (a list with a broker kgate left out, an unreadable answer)."""

from __future__ import annotations

import random

import pytest

from kgate.codec import api
from kgate.codec.generated.data import metadata as md
from kgate.codec.generated.session.api_versions import ApiVersion
from kgate.codec.headers import HeaderError, response_body_offset, response_frame
from kgate.proxy.sansio import rewrite
from kgate.proxy.sansio.answer_memo import (
    MAX_BROKER_LISTS,
    MAX_LAST_VERSIONS,
    MAX_METADATA_ANSWERS,
    MAX_METADATA_BYTES,
    AnswerMemo,
)
from kgate.proxy.sansio.metadata_brokers import rewrite_brokers


class CountingMapper:
    """Maps every node except ``refused``; counts calls (the memo must skip them on a hit)."""

    def __init__(self, refused: int | None = None) -> None:
        self.calls = 0
        self.refused = refused

    def __call__(self, node_id: int, host: str, port: int) -> tuple[str, int] | None:
        self.calls += 1
        return None if node_id == self.refused else ("kgate.example", 7000 + node_id)


def _metadata(version: int, nodes: tuple[int, ...], topics: int, seed: int = 1, correlation_id: int = 7) -> memoryview:
    rng = random.Random(seed)
    resp = md.MetadataResponse(throttle_time_ms=rng.randint(0, 99), cluster_id="c" if version >= 2 else None)
    resp.brokers = [
        md.MetadataResponseBroker(node_id=n, host=f"b{n}.internal", port=9092 + n, rack=None) for n in nodes
    ]
    resp.topics = [
        md.MetadataResponseTopic(error_code=0, name=f"t{rng.randint(0, 999)}-{i}", is_internal=False, partitions=[])
        for i in range(topics)
    ]
    return memoryview(response_frame(correlation_id, api.response_header_version(3, version), resp.encode(version)))


def _offset(frame: memoryview, version: int) -> int:
    return response_body_offset(frame, api.response_header_version(3, version))


def _brokers(memo: AnswerMemo, frame: memoryview, version: int, mapper: CountingMapper) -> bytes:
    return memo.metadata_brokers(frame, _offset(frame, version), version, mapper)[0]


@pytest.mark.parametrize("version", range(api.API_INFO[3].max_version + 1))
def test_metadata_hit_is_the_fresh_rewrite_and_skips_the_mapper(version: int) -> None:
    memo, mapper = AnswerMemo({}), CountingMapper()
    first = _metadata(version, (1, 2), topics=2, seed=1)
    assert _brokers(memo, first, version, mapper) == rewrite_brokers(
        first, _offset(first, version), version, CountingMapper()
    )
    calls = mapper.calls
    # same brokers, other topics, other correlation id: the memo answers, the tail is this frame's
    second = _metadata(version, (1, 2), topics=5, seed=2, correlation_id=99)
    got = _brokers(memo, second, version, mapper)
    assert mapper.calls == calls
    assert got == rewrite_brokers(second, _offset(second, version), version, CountingMapper())


def test_metadata_other_brokers_miss() -> None:
    memo, mapper = AnswerMemo({}), CountingMapper()
    a, b = _metadata(12, (1, 2), 1), _metadata(12, (1, 3), 1)
    _brokers(memo, a, 12, mapper)
    calls = mapper.calls
    got = _brokers(memo, b, 12, mapper)
    assert mapper.calls == calls + 2
    assert got == rewrite_brokers(b, _offset(b, 12), 12, CountingMapper())


def test_metadata_with_a_refused_broker_is_never_remembered() -> None:
    """Each refusal is counted by the mapper (a metric), so such a list is rewritten every time."""
    memo, mapper = AnswerMemo({}), CountingMapper(refused=2)
    frame = _metadata(12, (1, 2), 1)
    for _ in range(3):
        _brokers(memo, frame, 12, mapper)
    assert mapper.calls == 6


def test_metadata_lists_are_bounded() -> None:
    memo, mapper = AnswerMemo({}), CountingMapper()
    for n in range(MAX_BROKER_LISTS + 5):
        frame = _metadata(12, (n,), 0)
        _brokers(memo, frame, 12, mapper)
    assert len(memo._broker_lists[12]) == MAX_BROKER_LISTS


def test_metadata_truncated_raises_even_after_a_hit() -> None:
    memo, mapper = AnswerMemo({}), CountingMapper()
    frame = _metadata(12, (1, 2), 1)
    _brokers(memo, frame, 12, mapper)
    cut = frame[: _offset(frame, 12) + 10]  # inside the (remembered) broker list
    with pytest.raises(HeaderError):
        _brokers(memo, cut, 12, mapper)


@pytest.mark.parametrize("version", range(api.API_INFO[3].max_version + 1))
def test_whole_metadata_answer_hit_is_the_fresh_rewrite_with_this_correlation_id(version: int) -> None:
    memo, mapper = AnswerMemo({}), CountingMapper()
    first = _metadata(version, (1, 2), topics=3, seed=4, correlation_id=1)
    assert memo.metadata(first, version, mapper) == rewrite_brokers(
        first, _offset(first, version), version, CountingMapper()
    )
    calls = mapper.calls
    again = _metadata(version, (1, 2), topics=3, seed=4, correlation_id=12345)
    got = memo.metadata(again, version, mapper)
    assert mapper.calls == calls  # answered from the memo
    assert got == rewrite_brokers(again, _offset(again, version), version, CountingMapper())
    assert got[4:8] == (12345).to_bytes(4, "big")


@pytest.mark.parametrize("version", range(api.API_INFO[3].max_version + 1))
def test_the_last_answer_repeated_as_read_bytes_is_answered_from_its_tail(version: int) -> None:
    """The data path hands the memo the broker's ``bytes``: a repeat of the last answer is found by
    its length and tail alone (here with the other memos emptied, so only that check can answer)."""
    memo, mapper = AnswerMemo({}), CountingMapper()
    first = bytes(_metadata(version, (1, 2), topics=3, seed=4, correlation_id=1))
    assert memo.metadata(first, version, mapper) == rewrite_brokers(
        memoryview(first), _offset(memoryview(first), version), version, CountingMapper()
    )
    memo._metadata.clear()
    memo._broker_lists.clear()
    calls = mapper.calls
    again = bytes(_metadata(version, (1, 2), topics=3, seed=4, correlation_id=-99))
    got = memo.metadata(again, version, mapper)
    assert mapper.calls == calls
    assert got == rewrite_brokers(memoryview(again), _offset(memoryview(again), version), version, CountingMapper())
    assert got[4:8] == (-99).to_bytes(4, "big", signed=True)


def test_an_answer_of_the_same_length_with_other_bytes_is_not_the_last_one() -> None:
    memo, mapper = AnswerMemo({}), CountingMapper()
    first = bytes(_metadata(12, (1, 2), topics=2))
    memo.metadata(first, 12, mapper)
    other = bytearray(first)
    other[11] ^= 0x40  # another throttle time (v12: size, correlation id, header tags, then throttle_time_ms)
    other_frame = bytes(other)
    expected = rewrite_brokers(memoryview(other_frame), _offset(memoryview(other_frame), 12), 12, CountingMapper())
    assert memo.metadata(other_frame, 12, mapper) == expected != memo.metadata(first, 12, mapper)


def test_a_truncated_answer_as_bytes_after_the_last_one_still_raises() -> None:
    memo, mapper = AnswerMemo({}), CountingMapper()
    frame = bytes(_metadata(12, (1, 2), 2))
    memo.metadata(frame, 12, mapper)
    with pytest.raises(HeaderError):
        memo.metadata(frame[: _offset(memoryview(frame), 12) + 10], 12, mapper)


def test_clear_forgets_the_last_answer_too() -> None:
    memo, mapper = AnswerMemo({}), CountingMapper()
    frame = bytes(_metadata(12, (1, 2), 2))
    memo.metadata(frame, 12, mapper)
    memo.clear()
    calls = mapper.calls
    memo.metadata(frame, 12, mapper)
    assert mapper.calls == calls + 2  # both brokers mapped again


def test_whole_metadata_answer_with_a_refused_broker_is_never_remembered() -> None:
    memo, mapper = AnswerMemo({}), CountingMapper(refused=2)
    frame = _metadata(12, (1, 2), 1)
    for _ in range(3):
        assert memo.metadata(frame, 12, mapper) == rewrite_brokers(
            frame, _offset(frame, 12), 12, CountingMapper(refused=2)
        )
    assert mapper.calls == 6
    assert not memo._metadata


def test_whole_metadata_answers_are_bounded_in_count_and_size() -> None:
    memo, mapper = AnswerMemo({}), CountingMapper()
    for seed in range(MAX_METADATA_ANSWERS + 10):
        memo.metadata(_metadata(12, (1,), 1, seed=seed * 7919), 12, mapper)
    assert len(memo._metadata) == MAX_METADATA_ANSWERS
    memo.clear()
    big = _metadata(12, (1,), 400)
    assert len(big) > MAX_METADATA_BYTES
    assert memo.metadata(big, 12, mapper) == rewrite_brokers(big, _offset(big, 12), 12, CountingMapper())
    assert not memo._metadata


def test_whole_metadata_truncated_after_a_hit_still_raises() -> None:
    memo, mapper = AnswerMemo({}), CountingMapper()
    frame = _metadata(12, (1, 2), 2)
    memo.metadata(frame, 12, mapper)
    with pytest.raises(HeaderError):
        memo.metadata(frame[: _offset(frame, 12) + 10], 12, mapper)  # inside the broker list


def _api_versions(entries: list[tuple[int, int, int]], correlation_id: int) -> memoryview:
    msg = api.API_INFO[18].response_class(error_code=0)
    msg.api_keys = [ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in entries]
    return memoryview(response_frame(correlation_id, 0, msg.encode(3)))


def test_api_versions_hit_keeps_this_frames_correlation_id() -> None:
    limits = rewrite.version_limits()
    memo = AnswerMemo(limits)
    wide = [(3, 0, api.API_INFO[3].max_version + 5), (0, 0, 11)]
    first = memo.api_versions(_api_versions(wide, 1), 3)
    second = memo.api_versions(_api_versions(wide, 42), 3)
    assert first == rewrite.cap_api_versions(_api_versions(wide, 1), 3, limits)
    assert second == rewrite.cap_api_versions(_api_versions(wide, 42), 3, limits)
    assert second is not None
    assert int.from_bytes(second[4:8], "big") == 42


def test_api_versions_unchanged_stays_unchanged() -> None:
    memo = AnswerMemo(rewrite.version_limits())
    narrow = [(3, 0, 12), (18, 0, 3)]
    assert memo.api_versions(_api_versions(narrow, 1), 3) is None
    assert memo.api_versions(_api_versions(narrow, 2), 3) is None


def test_api_versions_unreadable_raises_every_time() -> None:
    memo = AnswerMemo(rewrite.version_limits())
    junk = memoryview(response_frame(1, 0, b"\x00\x00\xff\xff\xff\xff"))
    for _ in range(2):
        with pytest.raises(rewrite.RewriteError):
            memo.api_versions(junk, 3)


def test_the_last_answers_kept_are_bounded_whatever_versions_clients_ask_for() -> None:
    """The version is the client's choice (any int16): only ``MAX_LAST_VERSIONS`` are remembered."""
    memo, mapper = AnswerMemo(rewrite.version_limits()), CountingMapper()
    frame = bytes(_api_versions([(0, 0, 99)], correlation_id=1))
    for version in range(3, 3 + 3 * MAX_LAST_VERSIONS):
        memo.api_versions(frame, version)
    assert len(memo._last_api_versions) == MAX_LAST_VERSIONS
    assert max(memo._last_api_versions) == 3 + 3 * MAX_LAST_VERSIONS - 1  # the newest stay
    for version in range(api.API_INFO[3].max_version + 1):
        memo.metadata(bytes(_metadata(version, (1,), 1)), version, mapper)
    assert len(memo._last_metadata) == min(MAX_LAST_VERSIONS, api.API_INFO[3].max_version + 1)
