"""The ``authorized_operations`` bitfields of describe answers, computed from kgate's rules.

Metadata (v8+), DescribeTopicPartitions, DescribeGroups (v3+), ConsumerGroupDescribe,
ShareGroupDescribe, StreamsGroupDescribe and DescribeCluster answer with a 32-bit field per topic, group or cluster: bit
``code`` is set for each ``AclOperation`` the asking principal may perform on it (``Utils.to32BitField``
in Kafka). The broker computes it for the principal *it* sees (kgate's upstream identity; every
operation a resource supports when the broker has no authorizer, as Kafka 4.0 answers), so through an
authorizing proxy it would show operations kgate refuses. The filter replaces it with what kgate's rules
allow, intersected with the broker's value (the broker may refuse more than kgate); the broker's
"not asked for" value (``NOT_REQUESTED``, -2^31) stays as it is.

Codes and the operations each resource type supports are Kafka 4.0.2's (``AclOperation``,
``AclEntry.supportedOperations``, read from the shipped jars): UNKNOWN 0, ANY 1, ALL 2, READ 3, WRITE 4,
CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11,
IDEMPOTENT_WRITE 12, CREATE_TOKENS 13, DESCRIBE_TOKENS 14 (kgate has no delegation-token resource).

Pure functions: the verdict comes in as ``allowed(op) -> bool`` for one resource.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from kgate.filters.builtin.authz.acl_rules import Op, Res

NOT_REQUESTED = -(2**31)  # Kafka: the client did not ask for the field (or the resource is refused)

#: Kafka's ``AclOperation`` code of each operation kgate's rules know
ACL_OPERATION_CODE: Mapping[Op, int] = {
    Op.READ: 3,
    Op.WRITE: 4,
    Op.CREATE: 5,
    Op.DELETE: 6,
    Op.ALTER: 7,
    Op.DESCRIBE: 8,
    Op.CLUSTER_ACTION: 9,
    Op.DESCRIBE_CONFIGS: 10,
    Op.ALTER_CONFIGS: 11,
    Op.IDEMPOTENT_WRITE: 12,
}

#: the operations Kafka reports for each resource type (``AclEntry.supportedOperations``)
SUPPORTED: Mapping[Res, tuple[Op, ...]] = {
    Res.TOPIC: (
        Op.READ,
        Op.WRITE,
        Op.CREATE,
        Op.DESCRIBE,
        Op.DELETE,
        Op.ALTER,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
    ),
    Res.GROUP: (Op.READ, Op.DESCRIBE, Op.DELETE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS),
    Res.CLUSTER: (
        Op.CREATE,
        Op.CLUSTER_ACTION,
        Op.DESCRIBE_CONFIGS,
        Op.ALTER_CONFIGS,
        Op.IDEMPOTENT_WRITE,
        Op.ALTER,
        Op.DESCRIBE,
    ),
    Res.TRANSACTIONAL_ID: (Op.DESCRIBE, Op.WRITE),
}


def operations_bitfield(res: Res, allowed: Callable[[Op], bool]) -> int:
    """The bitfield of the operations on a resource of type ``res`` that ``allowed`` grants."""
    bits = 0
    for op in SUPPORTED[res]:
        if allowed(op):
            bits |= 1 << ACL_OPERATION_CODE[op]
    return bits


def narrowed(broker_value: int, ours: int) -> int:
    """What the client sees: the broker's field narrowed to kgate's operations; "not requested" stays."""
    if broker_value == NOT_REQUESTED:
        return broker_value
    return broker_value & ours


def operation_names(bits: int) -> set[str]:
    """The operations a bitfield names (lower case, as kgate's rules spell them); for tests and logs."""
    return {op.name.lower() for op, code in ACL_OPERATION_CODE.items() if bits & (1 << code)}
