"""Public codec API: api table, body decode/encode and header-version helpers.

Bodies only: ``buf`` passed to ``decode_*`` holds the message body (after the request/response
header). Trailing bytes after the body are tolerated; use the ``*_ex`` variants to learn how many
bytes the body consumed.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from kgate.codec.errors import CodecError
from kgate.codec.generated.api_keys import API_VERSIONS as API_VERSIONS_KEY
from kgate.codec.generated.index import APIS
from kgate.codec.schema import Message

__all__ = [
    "API_INFO",
    "ApiInfo",
    "CodecError",
    "Message",
    "decode_request",
    "decode_request_ex",
    "decode_response",
    "decode_response_ex",
    "encode_request",
    "encode_response",
    "request_header_version",
    "response_header_version",
]


class ApiInfo:
    """One api key: its name, the versions both its request and response know, their classes.

    ``key`` and ``name`` come from the generated index; the rest from the api's generated module,
    imported on the first read of any of them. Importing all ~90 modules up front slowed the start
    of every kgate process (and each test subprocess) for keys most never meet (docs/performance.md,
    "Figures moved out of code comments").
    """

    __slots__ = (
        "_where",
        "key",
        "max_version",
        "min_version",
        "name",
        "request_class",
        "request_flexible_min",
        "response_class",
        "response_flexible_min",
    )

    key: int
    name: str
    _where: tuple[str, str, str]  # the generated module, the request and response class names
    min_version: int
    max_version: int
    request_flexible_min: int | None
    response_flexible_min: int | None
    request_class: type[Message]
    response_class: type[Message]

    def __init__(self, key: int, name: str, module: str, request_name: str, response_name: str) -> None:
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_where", (module, request_name, response_name))

    if not TYPE_CHECKING:  # hidden from mypy, which would otherwise accept any attribute name

        def __getattr__(self, attr: str):
            """Called only for a slot not set yet: load the module, then read the slot again."""
            if attr not in _LOADED_SLOTS:
                raise AttributeError(attr)
            self._load()
            return object.__getattribute__(self, attr)

    def _load(self) -> None:
        module, request_name, response_name = self._where
        mod = importlib.import_module(f"kgate.codec.generated.{module}")
        req, resp = getattr(mod, request_name), getattr(mod, response_name)
        # several threads may load one key at once: each sets the same values
        for attr, value in (
            ("min_version", max(req.MIN_VERSION, resp.MIN_VERSION)),
            ("max_version", min(req.MAX_VERSION, resp.MAX_VERSION)),
            ("request_flexible_min", req.FLEXIBLE_MIN),
            ("response_flexible_min", resp.FLEXIBLE_MIN),
            ("request_class", req),
            ("response_class", resp),
        ):
            object.__setattr__(self, attr, value)

    def __setattr__(self, attr: str, value: object) -> None:
        raise AttributeError(f"ApiInfo is read-only (tried to set {attr})")

    def __repr__(self) -> str:
        return f"ApiInfo(key={self.key}, name={self.name!r})"


_LOADED_SLOTS = frozenset(ApiInfo.__slots__) - {"key", "name", "_where"}

#: api key -> ApiInfo for every api the codec knows; membership, names and iteration import nothing
API_INFO: dict[int, ApiInfo] = {
    key: ApiInfo(key, name, module, req, resp) for key, (name, module, req, resp) in APIS.items()
}


def api_name(api_key: int) -> str:
    """Kafka's name of an api key (``CreateTopics``), ``unknown`` for a key kgate does not know: the one
    spelling every metric label and log line uses, so they join."""
    info = API_INFO.get(api_key)
    return "unknown" if info is None else info.name


def knows(api_key: int, version: int) -> bool:
    """Whether a request header's (api key, version) is one kgate's codec knows (0 up to the newest).

    From 0, not the oldest the codec decodes: this names what a client may plausibly send (a SASL
    token tells itself apart by it, the plan caches remember only such pairs), not what decodes.
    """
    info = API_INFO.get(api_key)
    return info is not None and 0 <= version <= info.max_version


def _info(api_key: int, version: int) -> ApiInfo:
    info = API_INFO.get(api_key)
    if info is None:
        raise CodecError(f"unknown api key {api_key}")
    if not (info.min_version <= version <= info.max_version):
        raise CodecError(f"{info.name} version {version} unsupported (valid {info.min_version}-{info.max_version})")
    return info


def decode_request_ex(api_key: int, version: int, buf) -> tuple[Message, int]:
    """Decode a request body; return ``(message, consumed_bytes)``. Raises CodecError."""
    return _info(api_key, version).request_class.decode_ex(buf, version)


def decode_response_ex(api_key: int, version: int, buf) -> tuple[Message, int]:
    """Decode a response body; return ``(message, consumed_bytes)``. Raises CodecError."""
    return _info(api_key, version).response_class.decode_ex(buf, version)


def decode_request(api_key: int, version: int, buf) -> Message:
    """Decode a request body (trailing bytes tolerated). Raises CodecError."""
    return _info(api_key, version).request_class.decode_ex(buf, version)[0]


def decode_response(api_key: int, version: int, buf) -> Message:
    """Decode a response body (trailing bytes tolerated). Raises CodecError."""
    return _info(api_key, version).response_class.decode_ex(buf, version)[0]


def encode_request(msg: Message, version: int) -> bytearray:
    if msg.KIND != "request":
        raise CodecError(f"{type(msg).__name__} is not a request")
    return msg.encode(version)


def encode_response(msg: Message, version: int) -> bytearray:
    if msg.KIND != "response":
        raise CodecError(f"{type(msg).__name__} is not a response")
    return msg.encode(version)


def request_header_version(api_key: int, version: int) -> int:
    """2 for flexible request versions, else 1 (header v0 was only ControlledShutdown v0's, a removed RPC)."""
    info = _info(api_key, version)
    fmin = info.request_flexible_min
    return 2 if fmin is not None and version >= fmin else 1


def response_header_version(api_key: int, version: int) -> int:
    """1 for flexible response versions, else 0; ApiVersions responses always use 0."""
    info = _info(api_key, version)
    if api_key == API_VERSIONS_KEY:
        return 0
    fmin = info.response_flexible_min
    return 1 if fmin is not None and version >= fmin else 0
