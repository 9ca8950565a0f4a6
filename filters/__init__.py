"""kgate's filter API (see docs/filters.md) and its built-in filters.

Filter authors import everything they need from here::

    from kgate.filters import ApiKey, Filter, FilterContext, on_request, FORWARD, respond, error_response
"""

from kgate.filters.api import (
    DROP,
    FORWARD,
    ApiKey,
    Close,
    ConnectionInfo,
    Drop,
    Filter,
    FilterConfigError,
    FilterContext,
    Forward,
    HookSpec,
    Respond,
    Result,
    close,
    forward,
    on_request,
    on_response,
    respond,
)
from kgate.filters.errors import error_response

__all__ = [
    "DROP",
    "FORWARD",
    "ApiKey",
    "Close",
    "ConnectionInfo",
    "Drop",
    "Filter",
    "FilterConfigError",
    "FilterContext",
    "Forward",
    "HookSpec",
    "Respond",
    "Result",
    "close",
    "error_response",
    "forward",
    "on_request",
    "on_response",
    "respond",
]
