"""KIP-619's table as pure functions: which topics are internal, and what each RPC may do to them.

Kept free of I/O and of the hooks so the decisions can be tested one by one (tests/filters/
test_internal_policy.py) and read next to the KIP:

| RPC | system-defined | user-defined |
|---|---|---|
| Metadata, DescribeTopicPartitions | ``is_internal=true`` | ``is_internal=true`` |
| CreateTopics | allowed | allowed (``internal=true`` recorded by kgate) |
| DeleteTopics | refused: INVALID_TOPIC_EXCEPTION | allowed |
| Produce | refused: INVALID_TOPIC_EXCEPTION (as Kafka) | allowed |
| AddPartitionsToTxn | allowed | allowed |
| DeleteRecords (KIP silent) | refused: INVALID_TOPIC_EXCEPTION (as Kafka) | allowed |

The error codes follow what Apache Kafka 4.0.2 answers for its own internal topics (probed, see
docs/internal-topics.md): Produce to ``__consumer_offsets`` and DeleteRecords on it are answered
INVALID_TOPIC_EXCEPTION (17). Kafka 4.0 itself *allows* DeleteTopics of ``__consumer_offsets``;
KIP-619 refuses it, and kgate answers it with the same INVALID_TOPIC_EXCEPTION and a message.

kgate's own marks topic is neither kind: clients must not see it at all, so every RPC naming it
is answered TOPIC_AUTHORIZATION_FAILED, the answer Kafka's authorizer gives for a topic the
client may not describe (it reveals nothing beyond what a denied topic reveals).
"""

from __future__ import annotations

import enum
import fnmatch
import re
from collections.abc import Container, Iterable

from kgate.api import ApiKey, ErrorCode

DEFAULT_SYSTEM_TOPICS = ("__consumer_offsets", "__transaction_state")


class Kind(enum.Enum):
    SYSTEM = "system"
    USER = "user"
    KGATE = "kgate"  # kgate's own marks topic: hidden from clients


def compile_patterns(patterns: Iterable[str]) -> re.Pattern[str] | None:
    """One regex for shell-style patterns (``connect-*``); None for an empty list."""
    parts = [fnmatch.translate(p) for p in patterns]
    return re.compile("|".join(parts)) if parts else None


class Classifier:
    """Which kind of internal topic a name is, from config, the broker and the marks."""

    def __init__(self, system: Iterable[str], user: Iterable[str], marks_topic: str) -> None:
        self._system = compile_patterns(system)
        self._user = compile_patterns(user)
        self.marks_topic = marks_topic

    def kind(self, name: str, *, broker_internal: Container[str] = (), marked: bool = False) -> Kind | None:
        """SYSTEM before USER: a topic both configured as system and marked is system (refusals apply)."""
        if name == self.marks_topic:
            return Kind.KGATE
        if name in broker_internal or (self._system is not None and self._system.match(name)):
            return Kind.SYSTEM
        if marked or (self._user is not None and self._user.match(name)):
            return Kind.USER
        return None

    def configured_user(self, name: str) -> bool:
        return self._user is not None and bool(self._user.match(name))


# (api key) -> the code for a SYSTEM topic; absent: allowed
_SYSTEM_REFUSED: dict[int, int] = {
    ApiKey.PRODUCE: ErrorCode.INVALID_TOPIC_EXCEPTION,
    ApiKey.DELETE_TOPICS: ErrorCode.INVALID_TOPIC_EXCEPTION,
    ApiKey.DELETE_RECORDS: ErrorCode.INVALID_TOPIC_EXCEPTION,
}
_MESSAGES: dict[int, str] = {
    ApiKey.PRODUCE: "Cannot append to internal topic {name}",
    ApiKey.DELETE_TOPICS: "Cannot delete the system-defined internal topic {name} (KIP-619)",
    ApiKey.DELETE_RECORDS: "Cannot delete records of internal topic {name}",
}


def refusal(api_key: int, kind: Kind | None) -> int | None:
    """The error code for ``api_key`` on a topic of ``kind``; None when the RPC is allowed.

    Every RPC kgate hooks that names its own marks topic is refused (TOPIC_AUTHORIZATION_FAILED):
    Produce, Fetch, DeleteTopics, DeleteRecords, CreateTopics, config changes.
    """
    if kind is Kind.KGATE:
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if kind is Kind.SYSTEM:
        return _SYSTEM_REFUSED.get(api_key)
    return None


def refusal_message(api_key: int, kind: Kind | None, name: str) -> str | None:
    if kind is Kind.KGATE:
        return "Topic authorization failed."
    template = _MESSAGES.get(api_key)
    return template.format(name=name) if template and kind is Kind.SYSTEM else None


def is_internal(kind: Kind | None) -> bool:
    """What Metadata and DescribeTopicPartitions answer as ``is_internal``."""
    return kind is Kind.SYSTEM or kind is Kind.USER


INTERNAL_CONFIG = "internal"


def parse_internal(value: str | None) -> bool | None:
    """The ``internal`` config value as Kafka parses a boolean config: true/false, any case."""
    if value is None:
        return None
    v = value.strip().lower()
    return True if v == "true" else False if v == "false" else None
