"""What ``FilterContext.topic_names`` answers for an id it cannot name.

Here rather than beside the resolver (``kgate.topic_ids``) so a plugin, and its tests,
can name the type without importing kgate's proxy runtime.
"""

from __future__ import annotations

from dataclasses import dataclass

from kgate.codec.error_codes import ErrorCode

#: kgate's code for "the lookup itself failed" (broker unreachable, timeout, undecodable answer).
#: It is Kafka's UNKNOWN_SERVER_ERROR number; filters should map it to a retriable code of the
#: RPC they answer (e.g. UNKNOWN_TOPIC_ID or REQUEST_TIMED_OUT) rather than send -1 to clients.
LOOKUP_FAILED = int(ErrorCode.UNKNOWN_SERVER_ERROR)


@dataclass(frozen=True)
class TopicNameError:
    """Why an id has no name.

    ``code`` is a Kafka error code: ``ErrorCode.UNKNOWN_TOPIC_ID`` when the cluster says the id
    does not exist (Kafka's 100 and Tansu's 3 both map here), other broker codes passed through,
    or ``LOOKUP_FAILED`` (-1) when kgate could not ask. ``retriable`` says whether resolving again
    may succeed without the cluster changing: false for "does not exist" (an id never comes
    back), true for lookup failures and transient broker errors.
    """

    code: int
    message: str
    retriable: bool
