"""Fail closed on api keys kgate's codec does not know, while a filter that must see everything is on.

kgate forwards unknown api keys untouched (a newer client against a newer broker keeps working), but
an authorizer cannot check what it cannot decode: with a filter whose class sets
``refuses_unknown_api_keys`` (the built-in ``authorizer``), such a request closes the connection
before any byte of it goes upstream, and ApiVersions no longer advertises the key.
"""

from __future__ import annotations

from support.core_driver import make_core

from kgate.api import ApiKey
from kgate.codec import api
from kgate.codec.generated.session.api_versions import ApiVersion
from kgate.codec.headers import request_frame, response_frame
from kgate.filters.builtin.authz.authorizer import Authorizer
from kgate.proxy.sansio import rewrite
from kgate.proxy.sansio.close_reason import CloseReason

UNKNOWN_KEY = max(api.API_INFO) + 50


def _authorizer() -> Authorizer:
    return Authorizer(Authorizer.validate_config({"default": "allow"}))


def _unknown_request() -> bytes:
    return request_frame(UNKNOWN_KEY, 0, 7, "future-client", 1, b"\x00\x01\x02")


def test_unknown_api_key_passes_without_such_a_filter() -> None:
    core, out = make_core()
    core.receive_client(_unknown_request())
    assert out.close_reason is None
    assert bytes(out.upstream.data).endswith(b"\x00\x01\x02")


def test_unknown_api_key_is_refused_under_the_authorizer() -> None:
    core, out = make_core([_authorizer()])
    core.receive_client(_unknown_request())
    assert out.close_reason is CloseReason.REFUSED_VERSION
    assert b"\x00\x01\x02" not in bytes(out.upstream.data)


def test_api_versions_does_not_advertise_unknown_keys_when_refused() -> None:
    msg = api.API_INFO[ApiKey.API_VERSIONS].response_class(error_code=0)
    msg.api_keys = [
        ApiVersion(api_key=ApiKey.METADATA, min_version=0, max_version=12),
        ApiVersion(api_key=UNKNOWN_KEY, min_version=0, max_version=3),
    ]
    frame = memoryview(response_frame(3, 0, msg.encode(3)))
    assert rewrite.cap_api_versions(frame, 3, {}) is None  # default: unknown keys pass untouched
    out = rewrite.cap_api_versions(frame, 3, {}, known_only=True)
    assert out is not None
    got = api.decode_response(ApiKey.API_VERSIONS, 3, memoryview(out)[8:])
    assert [e.api_key for e in got.api_keys] == [ApiKey.METADATA]
