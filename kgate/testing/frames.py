"""Build, round-trip and run: what a hook test needs besides a context.

``round_trip_request`` encodes a message as a client would put it on the wire (size, header,
body) and decodes it as kgate does, so a test checks what a real client's bytes turn into, not
just the object it built; ``round_trip_response`` does the same for what a broker (or a hook's
``respond``) sends. ``run_hook`` calls a hook the way kgate's chain does: a plain function's
result is used as is, a coroutine's is awaited (``None`` means ``FORWARD``).
"""

from __future__ import annotations

import inspect
from typing import Any

from kgate.api import FORWARD, FilterContext, Result
from kgate.codec import api
from kgate.codec.headers import parse_request_header, request_frame, response_body_offset, response_frame


def request_class(api_key: int) -> type:
    """The generated request class of ``api_key`` (construct it with keyword fields)."""
    return api.API_INFO[int(api_key)].request_class


def response_class(api_key: int) -> type:
    """The generated response class of ``api_key``."""
    return api.API_INFO[int(api_key)].response_class


def request_bytes(
    api_key: int, version: int, message: Any, *, correlation_id: int = 1, client_id: str | None = "test-client"
) -> bytes:
    """The whole request frame a client would send (4-byte size first)."""
    hv = api.request_header_version(int(api_key), version)
    return request_frame(int(api_key), version, correlation_id, client_id, hv, api.encode_request(message, version))


def response_bytes(api_key: int, version: int, message: Any, *, correlation_id: int = 1) -> bytes:
    """The whole response frame a broker would send (4-byte size first)."""
    hv = api.response_header_version(int(api_key), version)
    return response_frame(correlation_id, hv, api.encode_response(message, version))


def round_trip_request(api_key: int, version: int, message: Any) -> Any:
    """``message`` encoded as a client sends it, then decoded as kgate decodes it."""
    frame = memoryview(request_bytes(api_key, version, message, correlation_id=42))
    header = parse_request_header(frame, api.request_header_version(int(api_key), version))
    if (header.api_key, header.api_version, header.correlation_id) != (int(api_key), version, 42):
        raise AssertionError(f"header did not round-trip: {header}")
    return api.decode_request(int(api_key), version, frame[header.body_offset :])


def round_trip_response(api_key: int, version: int, message: Any) -> Any:
    """``message`` encoded as a broker sends it, then decoded as kgate decodes it."""
    frame = memoryview(response_bytes(api_key, version, message, correlation_id=42))
    hv = api.response_header_version(int(api_key), version)
    return api.decode_response(int(api_key), version, frame[response_body_offset(frame, hv) :])


async def run_hook(hook: Any, ctx: FilterContext, message: Any) -> Result:
    """Call ``hook(ctx, message)`` as kgate's chain does and return its result (``None`` -> FORWARD)."""
    result = hook(ctx, message)
    if inspect.isawaitable(result):
        result = await result
    return FORWARD if result is None else result
