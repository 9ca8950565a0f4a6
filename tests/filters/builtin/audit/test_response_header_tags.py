"""An answer whose flexible header carries tagged fields: the audit walkers start after them.

Brokers nearly always send an empty tag section (one 0 byte, the fast path); a section with a
field takes the general skip (codec.primitives.skip_tagged), which no recorded frame reaches."""

from __future__ import annotations

from kgate.codec.generated.api_keys import METADATA
from kgate.filters.builtin.audit.event import _response_body


def test_body_starts_after_the_header_tagged_fields() -> None:
    size_and_correlation = b"\0\0\0\0" + b"\0\0\0\7"
    tags = bytes([1, 5, 2, 0xAA, 0xBB])  # one field: tag 5, two bytes
    answer = size_and_correlation + tags + b"body"
    assert _response_body(answer, METADATA, 12) == len(size_and_correlation) + len(tags)


def test_an_empty_tag_section_is_one_byte() -> None:
    assert _response_body(b"\0\0\0\0\0\0\0\7\0body", METADATA, 12) == 9


def test_a_classic_header_has_no_tag_section() -> None:
    assert _response_body(b"\0\0\0\0\0\0\0\7body", METADATA, 8) == 8
