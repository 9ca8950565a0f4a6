"""Property tests: random messages of every api, kind and version survive encode -> decode."""

from __future__ import annotations

import uuid
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kgate.codec import api
from kgate.codec.schema import Struct

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}

UUIDS = st.one_of(st.just(uuid.UUID(int=0)), st.integers(0, 2**128 - 1).map(lambda i: uuid.UUID(int=i)))


def _scalar(f, version, flexible):
    t = f.type
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return st.integers(lo, hi)
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "bool":
        return st.booleans()
    if t == "string":
        return st.text(max_size=12)
    if t in ("bytes", "records"):
        return st.binary(max_size=24)
    if t == "uuid":
        return UUIDS
    if t == "struct":
        return struct_strategy(f.struct, version, flexible)
    raise AssertionError(t)


@cache
def struct_strategy(cls, version: int, flexible: bool):
    fields = {}
    known_tags = set()
    for f in cls._FIELDS:
        if not f.present(version):
            continue  # absent in this version: stays at its default on both sides
        if flexible and f.is_tagged(version):
            known_tags.add(f.tag)
        s = _scalar(f, version, flexible)
        if f.array:
            s = st.lists(s, max_size=3)
        if f.is_nullable(version):
            s = st.none() | s
        fields[f.name] = s
    if flexible:
        unknown = st.lists(
            st.tuples(st.integers(0, 20000).filter(lambda t: t not in known_tags), st.binary(max_size=8)),
            max_size=2,
            unique_by=lambda x: x[0],
        ).map(lambda xs: sorted(xs) or None)
        fields["_unknown_tagged"] = unknown
    return st.builds(cls, **fields)


def _pairs():
    out = []
    for _key, info in sorted(api.API_INFO.items()):
        for kind, cls in (("req", info.request_class), ("resp", info.response_class)):
            for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
                out.append(pytest.param(cls, v, id=f"{info.name}-{kind}-v{v}"))
    return out


PAIRS = _pairs()


def test_every_api_and_version_is_covered():
    keys = {p.values[0].API_KEY for p in PAIRS}
    assert keys == set(api.API_INFO)
    assert len(PAIRS) > 500


#: examples per (message, version): over 600 pairs, and the same structs recur across versions, so
#: a few each by default (4); KGATE_HYPOTHESIS=deep (tests/conftest.py) runs 40
EXAMPLES_PER_PAIR = max(2, settings.default.max_examples // 25)


@pytest.mark.parametrize(("cls", "version"), PAIRS)
@settings(
    max_examples=EXAMPLES_PER_PAIR,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_round_trip(cls, version, data):
    msg = data.draw(struct_strategy(cls, version, cls.is_flexible(version)))
    encoded = msg.encode(version)
    decoded, consumed = cls.decode_ex(bytes(encoded), version)
    assert consumed == len(encoded)
    assert decoded == msg
    assert decoded.encode(version) == encoded
    if version == cls.MAX_VERSION:
        # An all-default instance round-trips too (defaults must be encodable).
        assert cls.decode(cls().encode(version), version) == cls()


def test_struct_equality_is_by_value():
    info = api.API_INFO[3]
    a = info.response_class(brokers=[])
    b = info.response_class(brokers=[])
    assert a == b
    b.throttle_time_ms = 5
    assert a != b
    assert isinstance(a, Struct)
