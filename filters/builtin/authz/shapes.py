"""The shapes the authorizer refuses by: where each RPC lists its topics, groups or resources.

Kept apart from the filter (``filters.builtin.authorizer``) because it is data about Kafka's
messages, not policy: which operation a per-topic RPC needs of its topics, how an RPC that lists
entries (resources, groups, coordinator keys) names them in its request and in its answer, and how
to build the error entry the answer carries for a refused one. Also the id -> name helpers (topic
ids are named through the context's topic-name service before any rule is asked).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any
from uuid import UUID

from kgate.api import ApiKey, ErrorCode, FilterContext, TopicKey
from kgate.codec import api
from kgate.filters.builtin.authz.acl_rules import Op, Res

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
DENIED_MESSAGE = "Authorization failed."


class ConfigResource(enum.IntEnum):
    """DescribeConfigs / AlterConfigs resource types (Kafka's ``ConfigResource.Type``)."""

    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


CONFIG_RESOURCES = {ConfigResource.TOPIC: (Res.TOPIC, TOPIC_DENIED), ConfigResource.GROUP: (Res.GROUP, GROUP_DENIED)}


def element_class(cls: type, attr: str) -> type:
    for f in cls._FIELDS:  # type: ignore[attr-defined]
        if f.name == attr:
            return f.struct
    raise KeyError(f"{cls.__name__} has no field {attr}")


def make(cls: type, **fields: Any) -> Any:
    slots = set(getattr(cls, "__slots__", ()))
    return cls(**{k: v for k, v in fields.items() if k in slots})


# -- topic names (ids resolved through the context's topic-name service) --------------------------
def known_names(ctx: FilterContext, keys: Iterable[TopicKey | None]) -> tuple[dict[TopicKey, str], list[UUID]]:
    """Names for ``keys`` from the request itself or kgate's cache, and the ids still unknown.

    Shared by the authorizer and topic-policy. A ``None`` key (an entry with neither a name nor an id,
    e.g. DeleteTopics v6 ``{name: null, topic_id: zero}``) names no topic, so no rule applies to it: it
    is left out and goes to the broker, which answers its own error for it. (topic-policy's copy of this
    function kept it and then failed on it with a TypeError.)
    """
    names: dict[TopicKey, str] = {}
    missing: list[UUID] = []
    for key in keys:
        if isinstance(key, UUID):
            name = ctx.cached_topic_name(key)
            if name is None:
                missing.append(key)
            else:
                names[key] = name
        elif key is not None:
            names[key] = key
    return names, missing


async def look_up(ctx: FilterContext, names: dict[TopicKey, str], missing: list[UUID]) -> list[UUID]:
    """Add the names of ``missing`` to ``names`` (kgate's topic-name service); return the ids not resolved."""
    unresolved = []
    for topic_id, found in (await ctx.topic_names(missing)).items():
        if isinstance(found, str):
            names[topic_id] = found
        else:
            unresolved.append(topic_id)
    return unresolved


TOPIC_OP: dict[int, Op] = {
    ApiKey.PRODUCE: Op.WRITE,
    ApiKey.FETCH: Op.READ,
    ApiKey.LIST_OFFSETS: Op.DESCRIBE,
    ApiKey.OFFSET_COMMIT: Op.READ,
    ApiKey.DELETE_TOPICS: Op.DELETE,
    ApiKey.DELETE_RECORDS: Op.DELETE,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Op.DESCRIBE,
    ApiKey.TXN_OFFSET_COMMIT: Op.READ,
    ApiKey.OFFSET_DELETE: Op.READ,
    ApiKey.DESCRIBE_PRODUCERS: Op.READ,
    ApiKey.SHARE_FETCH: Op.READ,
    ApiKey.SHARE_ACKNOWLEDGE: Op.READ,
    ApiKey.ELECT_LEADERS: Op.DESCRIBE,
}
TOPIC_LIST_KEYS = frozenset(TOPIC_OP) - {ApiKey.ELECT_LEADERS}


class Entries:
    """How one RPC lists the entries it is refused by, in its request and in its answer."""

    def __init__(
        self,
        request_list: str,
        request_name: str,
        response_list: str,
        response_name: str,
        check: tuple[Res, Op, int] = (Res.TOPIC, Op.DESCRIBE, TOPIC_DENIED),
        copy: tuple[str, ...] = (),
        partitions: str = "",
        **fixed: Any,
    ) -> None:
        self.request_list, self.request_name = request_list, request_name
        self.response_list, self.response_name = response_list, response_name
        self.check, self.copy, self.fixed = check, copy, fixed
        self.partitions = partitions  # the answer reports errors per partition (this index field), not per entry

    def name_of(self, entry: Any) -> Any:
        """The name checked (the entry itself for lists of strings; the whole entry for configs)."""
        if self.request_name == "*":
            return entry
        return getattr(entry, self.request_name) if self.request_name else entry

    def error_entry(self, ctx: FilterContext, request: Any, entry: Any, code: int) -> Any:
        cls = element_class(api.API_INFO[ctx.api_key].response_class, self.response_list)
        name = getattr(entry, self.request_name) if self.request_name and self.request_name != "*" else entry
        fields = {a: getattr(entry, a) for a in self.copy}
        if self.request_name != "*":
            fields[self.response_name] = name
        if self.partitions:
            pcls = element_class(cls, "partitions")
            fields["partitions"] = [
                make(
                    pcls,
                    **{self.partitions: getattr(p, self.partitions)},
                    error_code=code,
                    error_message=DENIED_MESSAGE,
                )
                for p in entry.partitions or []
            ]
            return make(cls, **fields, **self.fixed)
        return make(cls, **fields, error_code=code, error_message=DENIED_MESSAGE, **self.fixed)


ENTRY_LISTS: dict[int, Entries] = {
    ApiKey.CREATE_TOPICS: Entries("topics", "name", "topics", "name", num_partitions=-1, replication_factor=-1),
    ApiKey.CREATE_PARTITIONS: Entries("topics", "name", "results", "name", (Res.TOPIC, Op.ALTER, TOPIC_DENIED)),
    ApiKey.DESCRIBE_CONFIGS: Entries(
        "resources", "*", "results", "", copy=("resource_type", "resource_name"), configs=[]
    ),
    ApiKey.ALTER_CONFIGS: Entries("resources", "*", "responses", "", copy=("resource_type", "resource_name")),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Entries(
        "resources", "*", "responses", "", copy=("resource_type", "resource_name")
    ),
    ApiKey.DELETE_GROUPS: Entries("groups_names", "", "results", "group_id", (Res.GROUP, Op.DELETE, GROUP_DENIED)),
    ApiKey.DESCRIBE_GROUPS: Entries(
        "groups", "", "groups", "group_id", (Res.GROUP, Op.DESCRIBE, GROUP_DENIED), members=[]
    ),
    ApiKey.FIND_COORDINATOR: Entries("coordinator_keys", "", "coordinators", "key", node_id=-1, host="", port=-1),
    ApiKey.DESCRIBE_TRANSACTIONS: Entries(
        "transactional_ids",
        "",
        "transaction_states",
        "transactional_id",
        (Res.TRANSACTIONAL_ID, Op.DESCRIBE, TXN_DENIED),
        producer_id=-1,
        producer_epoch=-1,
        transaction_state="",
        topics=[],
    ),
    ApiKey.CONSUMER_GROUP_DESCRIBE: Entries(
        "group_ids", "", "groups", "group_id", (Res.GROUP, Op.DESCRIBE, GROUP_DENIED), members=[]
    ),
    ApiKey.SHARE_GROUP_DESCRIBE: Entries(
        "group_ids", "", "groups", "group_id", (Res.GROUP, Op.DESCRIBE, GROUP_DENIED), members=[]
    ),
    ApiKey.OFFSET_FETCH: Entries("groups", "group_id", "groups", "group_id", topics=[]),
    ApiKey.STREAMS_GROUP_DESCRIBE: Entries(
        "group_ids", "", "groups", "group_id", (Res.GROUP, Op.DESCRIBE, GROUP_DENIED), members=[]
    ),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: Entries(
        "groups", "group_id", "groups", "group_id", (Res.GROUP, Op.DESCRIBE, GROUP_DENIED), topics=[]
    ),
    # the group is checked for the whole request first (read / delete, acl_table); then each topic, read
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: Entries(
        "topics",
        "topic_name",
        "responses",
        "topic_name",
        (Res.TOPIC, Op.READ, TOPIC_DENIED),
        partitions="partition_index",
    ),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: Entries(
        "topics", "topic_name", "responses", "topic_name", (Res.TOPIC, Op.READ, TOPIC_DENIED)
    ),
}
