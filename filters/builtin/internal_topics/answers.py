"""The answers ``internal-topics`` writes itself: refused topics and resources, and ``internal`` entries.

Kept apart from the hooks (filters.builtin.internal_topics) so the hooks read as decisions; every
object here is a generated message class of the request's api, encoded by kgate at the client's
version like any other answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from uuid import UUID

from kgate.api import ApiKey
from kgate.codec.generated.admin.alter_configs import AlterConfigsResourceResponse, AlterConfigsResponse
from kgate.codec.generated.admin.create_topics import CreatableTopicConfigs, CreatableTopicResult, CreateTopicsResponse
from kgate.codec.generated.admin.describe_configs import DescribeConfigsResourceResult
from kgate.codec.generated.admin.incremental_alter_configs import (
    AlterConfigsResourceResponse as IncrementalAlterConfigsResourceResponse,
)
from kgate.codec.generated.admin.incremental_alter_configs import IncrementalAlterConfigsResponse
from kgate.filters.builtin.internal_topics.policy import INTERNAL_CONFIG

TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC
OP_SET, OP_DELETE = 0, 1  # IncrementalAlterConfigs config_operation
DYNAMIC_TOPIC_CONFIG, DEFAULT_CONFIG = 1, 5  # config_source
BOOLEAN = 1  # DescribeConfigs config_type
AUTHZ_MESSAGE = "Topic authorization failed."
_ZERO = UUID(int=0)

#: per topic or resource name: (error code, message)
Errors = Mapping[str, tuple[int, str]]


def bad_value(value: str | None) -> str:
    """Kafka's wording for a boolean config with another value."""
    return f"Invalid value {value} for configuration internal: Expected value to be either true or false"


def lost_mark(name: str, exc: Exception) -> str:
    """The message of a topic the broker changed but whose mark kgate could not record."""
    return (
        f"Topic {name} was changed, but kgate could not record internal=true for it ({exc}); "
        "set it again with IncrementalAlterConfigs internal=true"
    )


def create_errors(errors: Errors) -> Any:
    """A CreateTopics answer for topics kgate refused (never sent upstream)."""
    return CreateTopicsResponse(
        throttle_time_ms=0,
        topics=[
            CreatableTopicResult(name=name, topic_id=_ZERO, error_code=code, error_message=msg, configs=None)
            for name, (code, msg) in errors.items()
        ],
    )


def created_internal_config() -> Any:
    """The ``internal=true`` entry of a CreateTopics (v5+) answer's configs."""
    return CreatableTopicConfigs(
        name=INTERNAL_CONFIG, value="true", read_only=False, config_source=DYNAMIC_TOPIC_CONFIG, is_sensitive=False
    )


def alter_response(api_key: int, entries: list[Any]) -> Any:
    """An empty AlterConfigs / IncrementalAlterConfigs answer to add refused resources to."""
    if api_key == ApiKey.INCREMENTAL_ALTER_CONFIGS:
        return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=entries)
    return AlterConfigsResponse(throttle_time_ms=0, responses=entries)


def add_alter_errors(response: Any, errors: Errors) -> None:
    """Append an entry per refused topic resource to an AlterConfigs / IncrementalAlterConfigs answer."""
    entry_cls = (
        IncrementalAlterConfigsResourceResponse
        if isinstance(response, IncrementalAlterConfigsResponse)
        else AlterConfigsResourceResponse
    )
    response.responses = list(response.responses) + [
        entry_cls(error_code=code, error_message=msg, resource_type=TOPIC_RESOURCE, resource_name=name)
        for name, (code, msg) in errors.items()
    ]


def described_internal(internal: bool, marked: bool) -> Any:
    """The ``internal`` entry of a DescribeConfigs answer: set by a mark, else the default."""
    return DescribeConfigsResourceResult(
        name=INTERNAL_CONFIG,
        value="true" if internal else "false",
        read_only=False,
        config_source=DYNAMIC_TOPIC_CONFIG if marked else DEFAULT_CONFIG,
        is_sensitive=False,
        synonyms=[],
        config_type=BOOLEAN,
        documentation="KIP-619: internal topics are left out of default topic listings (kept by kgate)",
    )
