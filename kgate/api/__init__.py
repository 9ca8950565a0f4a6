"""kgate's public filter API: everything a filter plugin imports, and nothing else.

::

    from kgate.api import ApiKey, ErrorCode, Filter, FilterContext, FORWARD, on_request, error_response

This package depends only on the codec (message classes, ``ApiKey``, ``ErrorCode``), never on
kgate's proxy, configuration or filter runtime (tests/unit/test_layering.py enforces it), so a
plugin and its tests see a small, stable surface. Stability policy: docs/filters.md, "Stability".
"""

from kgate.api.errors import error_response, topic_key
from kgate.api.filter import (
    DROP,
    FORWARD,
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
from kgate.api.services import ClusterServices
from kgate.api.topic_names import LOOKUP_FAILED, TopicNameError
from kgate.api.topics import TOPIC_LISTS, TopicKey, merge_refused, refuse_topics, request_topics
from kgate.codec.api import Message
from kgate.codec.error_codes import ErrorCode
from kgate.codec.generated.api_keys import ApiKey

__all__ = [
    "DROP",
    "FORWARD",
    "LOOKUP_FAILED",
    "TOPIC_LISTS",
    "ApiKey",
    "Close",
    "ClusterServices",
    "ConnectionInfo",
    "Drop",
    "ErrorCode",
    "Filter",
    "FilterConfigError",
    "FilterContext",
    "Forward",
    "HookSpec",
    "Message",
    "Respond",
    "Result",
    "TopicKey",
    "TopicNameError",
    "close",
    "error_response",
    "forward",
    "merge_refused",
    "on_request",
    "on_response",
    "refuse_topics",
    "request_topics",
    "respond",
    "topic_key",
]
