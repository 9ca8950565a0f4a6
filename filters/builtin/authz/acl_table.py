"""Which resources and operations each Kafka api key needs: the authorizer's table, as data.

Every api key kgate's codec knows has an entry (``tests/filters/test_acl_table.py`` checks it is
total, that the authorizer has a handler for each, and that docs/authorization.md shows this very
table), so a new api key cannot slip through unchecked: one that is missing is refused. The
requirements follow Kafka's own ``KafkaApis`` authorization, api by api; where kgate differs it
says so in ``note``.

``scope`` says what a refusal covers:

* ``request``: the whole request is answered with ``error`` (nothing goes upstream);
* ``entry``: only the topics / groups / resources that fail get ``error``, the rest of the
  request goes to the broker and the answers are merged;
* ``answer``: the broker's answer is filtered (left out of a listing, or answered with ``error``
  where asked for by name), so nothing the client may not describe shows.
"""

from __future__ import annotations

from dataclasses import dataclass

from kgate.api import ApiKey, ErrorCode
from kgate.filters.builtin.authz.acl_rules import Op, Res

T, G, X, C = Res.TOPIC, Res.GROUP, Res.TRANSACTIONAL_ID, Res.CLUSTER
TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
TXN_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED


@dataclass(frozen=True)
class Need:
    """One check an api key makes: ``op`` on the ``res`` named by request ``field``."""

    res: Res
    op: Op
    field: str  # where the name comes from in the request ("" for the cluster)
    error: ErrorCode
    scope: str  # "request", "entry" or "answer" (see the module docstring)
    note: str = ""


def _cluster(op: Op, note: str = "") -> tuple[Need, ...]:
    return (Need(C, op, "", CLUSTER_DENIED, "request", note),)


_BROKER_ONLY = "inter-broker / controller RPC: no client needs it"
_STREAMS_CREATE = (
    "only those the broker does not have yet; create on the cluster counts too "
    "(kgate refuses the heartbeat: Kafka answers status MISSING_INTERNAL_TOPICS)"
)
_ASSIGNMENT = "left out of the assignment the member sees (a KIP-848 regex is resolved by the broker: see below)"
_REFUSED_AGAIN = "a member refused again is answered after refused_heartbeat_delay_ms (see below)"

#: api keys every client needs before or without naming a resource: never checked
UNCHECKED: frozenset[int] = frozenset(
    {
        ApiKey.API_VERSIONS,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
        ApiKey.GET_TELEMETRY_SUBSCRIPTIONS,
        ApiKey.PUSH_TELEMETRY,
        ApiKey.DESCRIBE_CLUSTER,
    }  # as Kafka: the brokers, which Metadata shows to anyone too
)

TABLE: dict[int, tuple[Need, ...]] = {
    ApiKey.ADD_RAFT_VOTER: _cluster(Op.ALTER),
    ApiKey.REMOVE_RAFT_VOTER: _cluster(Op.ALTER),
    ApiKey.PRODUCE: (
        Need(X, Op.WRITE, "transactional_id", TXN_DENIED, "request", "only when a transactional id is set"),
        Need(T, Op.WRITE, "topic_data[].name / topic_id", TOPIC_DENIED, "entry"),
    ),
    ApiKey.FETCH: (
        Need(T, Op.READ, "topics[].topic / topic_id", TOPIC_DENIED, "entry"),
        Need(C, Op.CLUSTER_ACTION, "replica_id / replica_state", CLUSTER_DENIED, "request", "follower fetches only"),
    ),
    ApiKey.LIST_OFFSETS: (Need(T, Op.DESCRIBE, "topics[].name", TOPIC_DENIED, "entry"),),
    ApiKey.METADATA: (
        Need(T, Op.DESCRIBE, "topics[].name / topic_id", TOPIC_DENIED, "answer", "left out of a full listing"),
        Need(
            T,
            Op.CREATE,
            "topics[].name",
            TOPIC_DENIED,
            "entry",
            "without it allow_auto_topic_creation is turned off (create on the cluster counts too)",
        ),
    ),
    ApiKey.OFFSET_COMMIT: (
        Need(G, Op.READ, "group_id", GROUP_DENIED, "request"),
        Need(T, Op.READ, "topics[].name / topic_id", TOPIC_DENIED, "entry"),
    ),
    ApiKey.OFFSET_FETCH: (
        Need(G, Op.DESCRIBE, "group_id / groups[].group_id", GROUP_DENIED, "entry"),
        Need(T, Op.DESCRIBE, "topics (answer)", TOPIC_DENIED, "answer"),
    ),
    ApiKey.FIND_COORDINATOR: (
        Need(G, Op.DESCRIBE, "key / coordinator_keys[] (key_type 0)", GROUP_DENIED, "entry"),
        Need(X, Op.DESCRIBE, "key / coordinator_keys[] (key_type 1)", TXN_DENIED, "entry"),
    ),
    ApiKey.JOIN_GROUP: (Need(G, Op.READ, "group_id", GROUP_DENIED, "request"),),
    ApiKey.HEARTBEAT: (Need(G, Op.READ, "group_id", GROUP_DENIED, "request"),),
    ApiKey.LEAVE_GROUP: (Need(G, Op.READ, "group_id", GROUP_DENIED, "request"),),
    ApiKey.SYNC_GROUP: (Need(G, Op.READ, "group_id", GROUP_DENIED, "request"),),
    ApiKey.DESCRIBE_GROUPS: (
        Need(G, Op.DESCRIBE, "groups[]", GROUP_DENIED, "entry"),
        Need(
            T,
            Op.DESCRIBE,
            "members' assignments (answer)",
            TOPIC_DENIED,
            "answer",
            "a group assigned a topic the client may not describe is described as the error",
        ),
    ),
    ApiKey.LIST_GROUPS: (
        Need(
            G,
            Op.DESCRIBE,
            "groups (answer)",
            GROUP_DENIED,
            "answer",
            "describe on the cluster lists every group, as in Kafka",
        ),
    ),
    ApiKey.CREATE_TOPICS: (
        Need(T, Op.CREATE, "topics[].name", TOPIC_DENIED, "entry", "create on the cluster counts too"),
        Need(
            T,
            Op.DESCRIBE,
            "topics[].name",
            TOPIC_DENIED,
            "answer",
            "TOPIC_ALREADY_EXISTS becomes TOPIC_AUTHORIZATION_FAILED without it",
        ),
        Need(
            T,
            Op.DESCRIBE_CONFIGS,
            "topics[].name",
            TOPIC_DENIED,
            "answer",
            "the configs in the answer are left out (topic_config_error_code) without it",
        ),
    ),
    ApiKey.DELETE_TOPICS: (
        Need(
            T,
            Op.DELETE,
            "topic_names[] / topics[].name / topic_id",
            TOPIC_DENIED,
            "entry",
            "by id as by name (the rule for ids, below; Kafka answers UNKNOWN_TOPIC_ID without describe)",
        ),
    ),
    ApiKey.DELETE_RECORDS: (Need(T, Op.DELETE, "topics[].name", TOPIC_DENIED, "entry"),),
    ApiKey.INIT_PRODUCER_ID: (
        Need(X, Op.WRITE, "transactional_id", TXN_DENIED, "request", "when a transactional id is set"),
        Need(
            C,
            Op.IDEMPOTENT_WRITE,
            "",
            CLUSTER_DENIED,
            "request",
            "without a transactional id; write on any topic counts too (KIP-679)",
        ),
    ),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (Need(T, Op.DESCRIBE, "topics[].topic", TOPIC_DENIED, "entry"),),
    ApiKey.ADD_PARTITIONS_TO_TXN: (
        Need(X, Op.WRITE, "v3_and_below_transactional_id", TXN_DENIED, "request"),
        Need(
            T,
            Op.WRITE,
            "v3_and_below_topics[].name",
            TOPIC_DENIED,
            "entry",
            "the other topics get OPERATION_NOT_ATTEMPTED, as in Kafka; v4+ (brokers only): cluster_action",
        ),
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: (
        Need(X, Op.WRITE, "transactional_id", TXN_DENIED, "request"),
        Need(G, Op.READ, "group_id", GROUP_DENIED, "request"),
    ),
    ApiKey.END_TXN: (Need(X, Op.WRITE, "transactional_id", TXN_DENIED, "request"),),
    ApiKey.TXN_OFFSET_COMMIT: (
        Need(X, Op.WRITE, "transactional_id", TXN_DENIED, "request"),
        Need(G, Op.READ, "group_id", GROUP_DENIED, "request"),
        Need(T, Op.READ, "topics[].name", TOPIC_DENIED, "entry"),
    ),
    ApiKey.DESCRIBE_ACLS: _cluster(Op.DESCRIBE),
    ApiKey.CREATE_ACLS: _cluster(Op.ALTER),
    ApiKey.DELETE_ACLS: _cluster(Op.ALTER),
    ApiKey.DESCRIBE_CONFIGS: (
        Need(T, Op.DESCRIBE_CONFIGS, "resources[] (topic)", TOPIC_DENIED, "entry"),
        Need(G, Op.DESCRIBE_CONFIGS, "resources[] (group)", GROUP_DENIED, "entry"),
        Need(C, Op.DESCRIBE_CONFIGS, "resources[] (broker, broker logger, client metrics)", CLUSTER_DENIED, "entry"),
    ),
    ApiKey.ALTER_CONFIGS: (
        Need(T, Op.ALTER_CONFIGS, "resources[] (topic)", TOPIC_DENIED, "entry"),
        Need(G, Op.ALTER_CONFIGS, "resources[] (group)", GROUP_DENIED, "entry"),
        Need(C, Op.ALTER_CONFIGS, "resources[] (broker, broker logger, client metrics)", CLUSTER_DENIED, "entry"),
    ),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (
        Need(T, Op.ALTER_CONFIGS, "resources[] (topic)", TOPIC_DENIED, "entry"),
        Need(G, Op.ALTER_CONFIGS, "resources[] (group)", GROUP_DENIED, "entry"),
        Need(C, Op.ALTER_CONFIGS, "resources[] (broker, broker logger, client metrics)", CLUSTER_DENIED, "entry"),
    ),
    ApiKey.ALTER_REPLICA_LOG_DIRS: _cluster(Op.ALTER),
    ApiKey.DESCRIBE_LOG_DIRS: (
        Need(C, Op.DESCRIBE, "", CLUSTER_DENIED, "request"),
        Need(T, Op.DESCRIBE, "results[].topics (answer)", TOPIC_DENIED, "answer"),
    ),
    ApiKey.CREATE_PARTITIONS: (Need(T, Op.ALTER, "topics[].name", TOPIC_DENIED, "entry"),),
    ApiKey.CREATE_DELEGATION_TOKEN: _cluster(Op.ALTER, "kgate has no delegation-token resource: cluster alter"),
    ApiKey.RENEW_DELEGATION_TOKEN: _cluster(Op.ALTER, "kgate has no delegation-token resource: cluster alter"),
    ApiKey.EXPIRE_DELEGATION_TOKEN: _cluster(Op.ALTER, "kgate has no delegation-token resource: cluster alter"),
    ApiKey.DESCRIBE_DELEGATION_TOKEN: _cluster(Op.DESCRIBE, "kgate has no delegation-token resource"),
    ApiKey.DELETE_GROUPS: (Need(G, Op.DELETE, "groups_names[]", GROUP_DENIED, "entry"),),
    ApiKey.ELECT_LEADERS: (
        Need(C, Op.ALTER, "", CLUSTER_DENIED, "request"),
        Need(T, Op.DESCRIBE, "topic_partitions[].topic", TOPIC_DENIED, "entry"),
    ),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _cluster(Op.ALTER),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _cluster(Op.DESCRIBE),
    ApiKey.OFFSET_DELETE: (
        Need(G, Op.DELETE, "group_id", GROUP_DENIED, "request"),
        Need(T, Op.READ, "topics[].name", TOPIC_DENIED, "entry"),
    ),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _cluster(Op.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CLIENT_QUOTAS: _cluster(Op.ALTER_CONFIGS),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster(Op.DESCRIBE),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _cluster(Op.ALTER),
    ApiKey.DESCRIBE_QUORUM: _cluster(Op.DESCRIBE),
    ApiKey.UPDATE_FEATURES: _cluster(Op.ALTER),
    ApiKey.DESCRIBE_PRODUCERS: (Need(T, Op.READ, "topics[].name", TOPIC_DENIED, "entry"),),
    ApiKey.DESCRIBE_TRANSACTIONS: (
        Need(X, Op.DESCRIBE, "transactional_ids[]", TXN_DENIED, "entry"),
        Need(T, Op.DESCRIBE, "transaction_states[].topics (answer)", TOPIC_DENIED, "answer"),
    ),
    ApiKey.LIST_TRANSACTIONS: (Need(X, Op.DESCRIBE, "transaction_states (answer)", TXN_DENIED, "answer"),),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (
        Need(G, Op.READ, "group_id", GROUP_DENIED, "request"),
        Need(T, Op.DESCRIBE, "subscribed_topic_names[]", TOPIC_DENIED, "request", _REFUSED_AGAIN),
        Need(T, Op.DESCRIBE, "assignment.topic_partitions[].topic_id (answer)", TOPIC_DENIED, "answer", _ASSIGNMENT),
    ),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (
        Need(G, Op.DESCRIBE, "group_ids[]", GROUP_DENIED, "entry"),
        Need(T, Op.DESCRIBE, "members' assignments (answer)", TOPIC_DENIED, "answer"),
    ),
    ApiKey.LIST_CONFIG_RESOURCES: _cluster(Op.DESCRIBE_CONFIGS),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (
        Need(
            T,
            Op.DESCRIBE,
            "topics[].name",
            TOPIC_DENIED,
            "answer",
            "left out of a full listing, pages over shown topics only; a name asked for never reaches the broker",
        ),
    ),
    ApiKey.SHARE_GROUP_HEARTBEAT: (
        Need(G, Op.READ, "group_id", GROUP_DENIED, "request"),
        Need(T, Op.DESCRIBE, "subscribed_topic_names[]", TOPIC_DENIED, "request", _REFUSED_AGAIN),
        Need(T, Op.DESCRIBE, "assignment.topic_partitions[].topic_id (answer)", TOPIC_DENIED, "answer", _ASSIGNMENT),
    ),
    ApiKey.SHARE_GROUP_DESCRIBE: (
        Need(G, Op.DESCRIBE, "group_ids[]", GROUP_DENIED, "entry"),
        Need(T, Op.DESCRIBE, "members' assignments (answer)", TOPIC_DENIED, "answer"),
    ),
    ApiKey.SHARE_FETCH: (
        Need(G, Op.READ, "group_id", GROUP_DENIED, "request"),
        Need(T, Op.READ, "topics[].topic_id", TOPIC_DENIED, "entry"),
    ),
    ApiKey.SHARE_ACKNOWLEDGE: (
        Need(G, Op.READ, "group_id", GROUP_DENIED, "request"),
        Need(T, Op.READ, "topics[].topic_id", TOPIC_DENIED, "entry"),
    ),
    ApiKey.STREAMS_GROUP_HEARTBEAT: (
        Need(G, Op.READ, "group_id", GROUP_DENIED, "request"),
        Need(
            T,
            Op.DESCRIBE,
            "topology.subtopologies[] (every topic)",
            TOPIC_DENIED,
            "request",
            "source, repartition and changelog topics, as Kafka",
        ),
        Need(
            T,
            Op.CREATE,
            "topology internal topics (changelog, repartition source)",
            TOPIC_DENIED,
            "request",
            _STREAMS_CREATE,
        ),
    ),
    ApiKey.STREAMS_GROUP_DESCRIBE: (
        Need(G, Op.DESCRIBE, "group_ids[]", GROUP_DENIED, "entry"),
        Need(
            T,
            Op.DESCRIBE,
            "topology's topics (answer)",
            TOPIC_DENIED,
            "answer",
            "a group whose topology names a topic the client may not describe is described as the error",
        ),
    ),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (
        Need(G, Op.DESCRIBE, "groups[].group_id", GROUP_DENIED, "entry"),
        Need(
            T,
            Op.DESCRIBE,
            "groups[].topics[].topic_name",
            TOPIC_DENIED,
            "answer",
            "asked for: each partition answers the error; a whole-group listing leaves it out",
        ),
    ),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (
        Need(G, Op.READ, "group_id", GROUP_DENIED, "request"),
        Need(T, Op.READ, "topics[].topic_name", TOPIC_DENIED, "entry"),
    ),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (
        Need(G, Op.DELETE, "group_id", GROUP_DENIED, "request"),
        Need(T, Op.READ, "topics[].topic_name", TOPIC_DENIED, "entry"),
    ),
}

for _key in (
    ApiKey.WRITE_TXN_MARKERS,
    ApiKey.VOTE,
    ApiKey.BEGIN_QUORUM_EPOCH,
    ApiKey.END_QUORUM_EPOCH,
    ApiKey.ALTER_PARTITION,
    ApiKey.ENVELOPE,
    ApiKey.FETCH_SNAPSHOT,
    ApiKey.BROKER_REGISTRATION,
    ApiKey.BROKER_HEARTBEAT,
    ApiKey.UNREGISTER_BROKER,
    ApiKey.ALLOCATE_PRODUCER_IDS,
    ApiKey.CONTROLLER_REGISTRATION,
    ApiKey.ASSIGN_REPLICAS_TO_DIRS,
    ApiKey.UPDATE_RAFT_VOTER,
    ApiKey.INITIALIZE_SHARE_GROUP_STATE,
    ApiKey.READ_SHARE_GROUP_STATE,
    ApiKey.WRITE_SHARE_GROUP_STATE,
    ApiKey.DELETE_SHARE_GROUP_STATE,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
):
    TABLE[_key] = _cluster(Op.CLUSTER_ACTION, _BROKER_ONLY)
del _key


def markdown_table() -> str:
    """The table as docs/authorization.md shows it (a test compares the two)."""
    lines = [
        "| api key | resource | operation | from the request | error | refusal covers | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for key in sorted(TABLE):
        for need in TABLE[key]:
            lines.append(
                f"| {ApiKey(key).name} | {need.res.name.lower()} | {need.op.name.lower()} | "
                f"`{need.field or '-'}` | {need.error.name} | {need.scope} | {need.note} |"
            )
    for key in sorted(UNCHECKED):
        lines.append(f"| {ApiKey(key).name} | - | - | - | - | never checked | needs no resource (as in Kafka) |")
    return "\n".join(lines)
