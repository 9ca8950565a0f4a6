"""What ``topic-policy`` hides or refuses outside per-topic request lists.

The per-topic data RPCs (Produce, Fetch, OffsetCommit, ...) are refused topic by topic through
``filters.topics``. The RPCs here show topics in other shapes: listings and descriptions, the
committed offsets of a group, group subscriptions and assignments. kgate follows what Kafka's own
authorizer does with them, so that clients meet errors they already handle:

* Metadata, DescribeTopicPartitions: a denied topic is left out of a listing; asked for by name,
  it is answered with TOPIC_AUTHORIZATION_FAILED, no partitions and no id (by id: no name).
  Metadata requests naming a denied topic never reach the broker with that name, which could
  otherwise create it (``allow_auto_topic_creation``); see ``TopicPolicy.metadata_request``.
* DescribeTransactions: denied topics are left out of each transaction's partitions.
* OffsetFetch: a denied topic's committed offsets are never shown. Left out when a group's
  offsets are listed whole; asked for by name or id, each partition gets TOPIC_AUTHORIZATION_FAILED
  and offset -1.
* ConsumerGroupHeartbeat, ShareGroupHeartbeat: subscribing to a denied topic by name is answered
  with TOPIC_AUTHORIZATION_FAILED; nothing goes upstream. Denied topics are left out of the
  assignment in the answer (``strip_assignment``: a KIP-848 regex is resolved by the broker).
* ConsumerGroupDescribe, ShareGroupDescribe: a group whose members are assigned a denied topic is
  answered with TOPIC_AUTHORIZATION_FAILED for that group, its members left out.
* StreamsGroupHeartbeat, StreamsGroupDescribe: a topology naming a denied topic (source, repartition,
  changelog) is refused; a group described with one answers TOPIC_AUTHORIZATION_FAILED, as Kafka does.
* DescribeShareGroupOffsets: a denied topic is left out of a whole-group listing, else answered
  TOPIC_AUTHORIZATION_FAILED per partition (Alter/DeleteShareGroupOffsets refuse it per topic).

The functions change a message in place and tell whether anything changed (so that an unchanged
message goes on as its original bytes); the policy's verdict comes in as ``allowed(name) ->
bool``, or as error codes per topic where ids first had to be resolved (OffsetFetch).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from uuid import UUID

from kgate.api import FORWARD, ApiKey, ErrorCode, FilterContext, Result, forward, merge_refused, respond
from kgate.codec import api
from kgate.codec.generated.data.describe_topic_partitions import Cursor as _CURSOR
from kgate.codec.generated.data.describe_topic_partitions import DescribeTopicPartitionsResponseTopic as _DTP_TOPIC
from kgate.codec.metadata_walk import metadata_answer
from kgate.filters.builtin.authz.operations import NOT_REQUESTED

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

Allowed = Callable[[str], bool]
_ZERO = UUID(int=0)
DESCRIBE_REFUSED = "The group has assigned topics that the client is not authorized to describe."


def hide_described_topics(
    topics: list[Any], allowed: Allowed, asked_for_all: bool, asked_ids: frozenset[UUID] = frozenset()
) -> list[Any] | None:
    """Metadata / DescribeTopicPartitions topics with denied ones hidden; None when none is denied.

    A denied topic asked for by name keeps its name (the client's key) and loses its id; one asked
    for by id (Metadata v12+) keeps the id and loses its name, as Kafka answers: an id is not
    secret, a name is.
    """
    kept: list[Any] = []
    changed = False
    for topic in topics:
        name = topic.name
        if name is None or allowed(name):  # None: looked up by an id the broker does not know
            kept.append(topic)
            continue
        changed = True
        if asked_for_all:
            continue
        topic.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        topic.partitions = []
        if hasattr(topic, "topic_authorized_operations"):
            topic.topic_authorized_operations = NOT_REQUESTED  # the broker's bits of a hidden topic, as Kafka
        if getattr(topic, "topic_id", None) in asked_ids:
            topic.name = None
        elif hasattr(topic, "topic_id"):
            topic.topic_id = _ZERO
        kept.append(topic)
    return kept if changed else None


# -- OffsetFetch ------------------------------------------------------------------------------
def offset_fetch_lists(request: Any, response: Any, version: int) -> Iterator[tuple[Any, bool]]:
    """Per group in the response: (holder of its ``topics`` list, whether all its topics were asked for).

    Up to v7 the response has one group at the top; from v8 on, a list of groups, each matched to
    the request's group of the same id. Without the request (not decoded), a group counts as asked
    by name: its denied topics are then answered with errors rather than left out, which hides them
    all the same.
    """
    if version < 8:
        yield response, request is not None and request.topics is None
        return
    asked = {g.group_id: g.topics is None for g in (request.groups if request is not None else [])}
    for group in response.groups:
        yield group, asked.get(group.group_id, False)


def hide_offsets(
    request: Any,
    response: Any,
    version: int,
    codes: Mapping[str | UUID, int],
) -> bool:
    """Hide the topics in ``codes`` (by name, or by id from v10): left out, or answered with the code."""
    changed = False
    for holder, asked_for_all in offset_fetch_lists(request, response, version):
        kept = []
        for topic in holder.topics:
            key = topic.topic_id if version >= 10 else topic.name
            code = codes.get(key)
            if code is None:
                kept.append(topic)
                continue
            changed = True
            if asked_for_all:
                continue
            for p in topic.partitions:
                p.committed_offset = -1
                if hasattr(p, "committed_leader_epoch"):
                    p.committed_leader_epoch = -1
                p.metadata = ""
                p.error_code = code
            kept.append(topic)
        holder.topics = kept
    return changed


def offset_fetch_topic_keys(response: Any, version: int) -> list[str | UUID]:
    """Names (v0-9) or ids (v10+) of the topics an OffsetFetch response carries."""
    if version < 8:
        return [t.name for t in response.topics]
    if version < 10:
        return [t.name for g in response.groups for t in g.topics]
    return [t.topic_id for g in response.groups for t in g.topics]


# -- transactions -----------------------------------------------------------------------------
def hide_transaction_topics(response: Any, allowed: Allowed) -> bool:
    """DescribeTransactions: leave denied topics out of each transaction's partitions, as Kafka does."""
    changed = False
    for state in response.transaction_states:
        topics = state.topics or []
        kept = [t for t in topics if allowed(t.topic)]
        if len(kept) != len(topics):
            state.topics = kept
            changed = True
    return changed


# -- group RPCs -------------------------------------------------------------------------------
def denied_subscriptions(request: Any, allowed: Allowed) -> list[str]:
    """The denied topics a Consumer/ShareGroupHeartbeat subscribes to by name."""
    return [n for n in (request.subscribed_topic_names or []) if not allowed(n)]


def assigned_topic_ids(response: Any) -> list[UUID]:
    """The topic ids a Consumer/ShareGroupHeartbeat answer assigns (none when the assignment is unchanged)."""
    assignment = response.assignment
    if assignment is None:
        return []
    return [tp.topic_id for tp in assignment.topic_partitions or []]


def strip_assignment(response: Any, keep: Callable[[UUID], bool]) -> bool:
    """Consumer/ShareGroupHeartbeat answer: leave out the assigned topics ``keep`` refuses; whether any was.

    The broker still counts those partitions as this member's (see docs/authorization.md, "Regex
    subscriptions"): the member never reports owning them, so revoking them later completes at once.
    """
    assignment = response.assignment
    if assignment is None or not assignment.topic_partitions:
        return False
    kept = [tp for tp in assignment.topic_partitions if keep(tp.topic_id)]
    if len(kept) == len(assignment.topic_partitions):
        return False
    assignment.topic_partitions = kept
    return True


def refuse_groups_with_denied_assignments(response: Any, allowed: Allowed) -> bool:
    """Consumer/ShareGroupDescribe: a group assigning a denied topic becomes an error entry."""
    changed = False
    for i, group in enumerate(response.groups):
        if not any(not allowed(name) for name in _assigned_names(group)):
            continue
        changed = True
        refused = type(group)(group_id=group.group_id)
        refused.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        refused.error_message = DESCRIBE_REFUSED
        response.groups[i] = refused
    return changed


def _assigned_names(group: Any) -> Iterator[str]:
    for member in group.members or []:
        for attr in ("assignment", "target_assignment"):
            assignment = getattr(member, attr, None)
            if assignment is None:
                continue
            for tp in assignment.topic_partitions or []:
                if tp.topic_name:
                    yield tp.topic_name


# -- Streams groups (KIP-1071) -----------------------------------------------------------------
def topology_topics(topology: Any) -> list[str]:
    """Every topic a StreamsGroupHeartbeat topology or a StreamsGroupDescribe answer's topology names:
    source, repartition sink, repartition source and state changelog topics (Kafka checks describe on
    all of them). Source topic *regexes* are resolved by the broker and are not topic names."""
    names: list[str] = []
    if topology is None:
        return names
    for sub in topology.subtopologies or []:
        names.extend(sub.source_topics or [])
        names.extend(sub.repartition_sink_topics or [])
        names.extend(t.name for t in sub.repartition_source_topics or [])
        names.extend(t.name for t in sub.state_changelog_topics or [])
    return names


def topology_internal_topics(topology: Any) -> list[str]:
    """The topics a Streams topology asks the broker to create when missing (changelog, repartition source)."""
    names: list[str] = []
    if topology is None:
        return names
    for sub in topology.subtopologies or []:
        names.extend(t.name for t in sub.repartition_source_topics or [])
        names.extend(t.name for t in sub.state_changelog_topics or [])
    return list(dict.fromkeys(names))


STREAMS_DESCRIBE_REFUSED = "The described group uses topics that the client is not authorized to describe."


def refuse_streams_groups_with_denied_topics(response: Any, allowed: Allowed) -> bool:
    """StreamsGroupDescribe: a group whose topology names a denied topic becomes an error entry, as Kafka
    answers it (the members' partitions are numbered per subtopology, so the topology is what names topics)."""
    changed = False
    for i, group in enumerate(response.groups):
        if group.error_code or all(allowed(n) for n in topology_topics(group.topology)):
            continue
        refused = type(group)(group_id=group.group_id)
        refused.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        refused.error_message = STREAMS_DESCRIBE_REFUSED
        response.groups[i] = refused
        changed = True
    return changed


# -- share-group offsets (KIP-932 admin) ----------------------------------------------------------
def hide_share_group_offsets(request: Any, response: Any, allowed: Allowed) -> bool:
    """DescribeShareGroupOffsets: a denied topic's start offsets are never shown.

    As Kafka answers: a group listed whole (``topics`` null) leaves the topic out; asked for by name,
    each partition answers TOPIC_AUTHORIZATION_FAILED with offsets -1 and the topic id zeroed. Without
    the request a group counts as asked by name (hidden all the same).
    """
    whole = {g.group_id: g.topics is None for g in (request.groups if request is not None else [])}
    changed = False
    for group in response.groups:
        topics = group.topics or []
        kept = []
        for topic in topics:
            if allowed(topic.topic_name):
                kept.append(topic)
                continue
            changed = True
            if whole.get(group.group_id, False):
                continue
            topic.topic_id = _ZERO
            for p in topic.partitions:
                p.start_offset, p.leader_epoch = -1, -1
                if hasattr(p, "lag"):
                    p.lag = -1
                p.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                p.error_message = "Authorization failed."
            kept.append(topic)
        group.topics = kept
    return changed


def hide_log_dir_topics(response: Any, allowed: Allowed) -> bool:
    """DescribeLogDirs: denied topics are left out of every log dir (as if they had no replica there)."""
    changed = False
    for result in response.results:
        kept = [t for t in result.topics if allowed(t.name)]
        if len(kept) != len(result.topics):
            result.topics = kept
            changed = True
    return changed


def assignment_topics(data: bytes | memoryview | None) -> list[str] | None:
    """Topic names in a classic consumer group member's assignment (ConsumerProtocolAssignment v0-v3).

    Layout (never flexible): int16 version, int32 count of (string topic, int32 count of int32
    partitions), then user data. Returns None for bytes that do not parse that way.
    """
    if data is None:
        return []
    buf = bytes(data)
    if len(buf) < 2:
        return [] if not buf else None
    pos, names = 2, []
    try:
        (count,) = _I32.unpack_from(buf, pos)
        pos += 4
        if count < 0 or count > len(buf):
            return None
        for _ in range(count):
            (n,) = _I16.unpack_from(buf, pos)
            pos += 2
            if n < 0 or pos + n > len(buf):
                return None
            names.append(buf[pos : pos + n].decode("utf-8"))
            pos += n
            (parts,) = _I32.unpack_from(buf, pos)
            pos += 4 + 4 * max(parts, 0)
            if parts < 0 or pos > len(buf):
                return None
    except (struct.error, UnicodeDecodeError):
        return None
    return names


def refuse_classic_groups_with_denied_assignments(response: Any, allowed: Allowed) -> bool:
    """DescribeGroups: a consumer group with a member assigned a denied topic becomes an error entry.

    The same rule as for KIP-848 groups (``refuse_groups_with_denied_assignments``): the group is
    described as TOPIC_AUTHORIZATION_FAILED with no members, so neither the denied topic's name nor
    its partitions show. An assignment kgate cannot parse counts as denied (fail closed).
    """
    changed = False
    for i, group in enumerate(response.groups):
        if group.protocol_type != "consumer":
            continue
        for member in group.members:
            names = assignment_topics(member.member_assignment)
            if names is None or any(not allowed(n) for n in names):
                refused = type(group)(group_id=group.group_id)
                refused.error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                if hasattr(refused, "error_message"):
                    refused.error_message = DESCRIBE_REFUSED
                response.groups[i] = refused
                changed = True
                break
    return changed


_DESCRIBE_RULES = "kgate.describe.allowed"  # the chain's describe rules for one DescribeTopicPartitions


_DESCRIBE_DENIED = "kgate.describe.denied"  # names a DescribeTopicPartitions request asked for and was refused
_SEARCH_LIMIT = 1000  # partitions per page kgate asks for when only looking for the next shown topic


def note_describe_rule(ctx: FilterContext, request: Any, allowed: Allowed) -> Result:
    """A DescribeTopicPartitions request hook: remember this filter's describe rule for the exchange, and
    take the names it refuses out of an explicit list.

    kgate fills a filtered page by asking the broker for more (``fill_pages``); the first filter whose
    response hook does so applies every rule of the chain, or a later page could show a topic an earlier
    filter hid (the later hooks see only what the first let through). Names asked for and refused never
    reach the broker, so they take no room in its pages; as Kafka's handler does, the answer carries
    TOPIC_AUTHORIZATION_FAILED for each of them from the cursor's topic on, on every page.
    """
    state = ctx.state
    state.setdefault(_DESCRIBE_RULES, []).append(allowed)
    if not request.topics:
        return FORWARD
    kept = [t for t in request.topics if allowed(t.name)]
    if len(kept) == len(request.topics):
        return FORWARD
    cursor = request.cursor
    denied: list[str] = state.setdefault(_DESCRIBE_DENIED, [])
    for t in request.topics:
        if not allowed(t.name) and t.name not in denied and (cursor is None or t.name >= cursor.topic_name):
            denied.append(t.name)
    if kept:
        request.topics = kept
        return forward(request)
    resp = api.API_INFO[ApiKey.DESCRIBE_TOPIC_PARTITIONS].response_class(topics=[], next_cursor=None)
    _add_denied(ctx, resp)
    return respond(resp)


def _add_denied(ctx: FilterContext, response: Any) -> bool:
    """The refused names of the request as TOPIC_AUTHORIZATION_FAILED entries, sorted in; whether any."""
    denied = ctx.state.pop(_DESCRIBE_DENIED, None) if ctx.state else None
    if not denied:
        return False
    for name in denied:
        entry = _DTP_TOPIC(
            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            name=name,
            topic_id=_ZERO,
            is_internal=False,
            partitions=[],
            topic_authorized_operations=NOT_REQUESTED,
        )
        response.topics.append(entry)
    response.topics.sort(key=lambda t: t.name or "")
    return True


def _chain_rule(ctx: FilterContext, allowed: Allowed) -> Allowed:
    rules = ctx.state.get(_DESCRIBE_RULES) if ctx.state else None
    if not rules:
        return allowed
    every = (*rules, allowed)
    return lambda name: all(rule(name) for rule in every)


def hide_undescribable(ctx: FilterContext, response: Any, allowed: Allowed) -> Result | Any:
    """A Metadata / DescribeTopicPartitions answer with the topics ``allowed`` refuses hidden, and the
    entries a request hook refused merged back in (Metadata): one rule for topic-policy and the authorizer.

    v1+ Metadata with an empty topic list asks for no topic (every one refused by the request hook, or a
    broker-only refresh), yet some brokers (Tansu) list every topic: the answer's list is emptied. A
    DescribeTopicPartitions page that lost partitions, or whose ``next_cursor`` names a hidden topic, is
    filled from the broker's next pages (a coroutine: ``fill_pages``).
    """
    request = ctx.request
    asked_ids: frozenset[UUID] = frozenset()
    changed = False
    if ctx.api_key == ApiKey.METADATA:
        asked_for_all = request is None or request.topics is None or (ctx.api_version == 0 and not request.topics)
        if not asked_for_all:
            asked_ids = frozenset(t.topic_id for t in request.topics if getattr(t, "topic_id", _ZERO).int)
            if not request.topics and response.topics:
                response.topics, changed = [], True
    else:
        asked_for_all = request is None or not request.topics
        allowed = _chain_rule(ctx, allowed)
    kept = hide_described_topics(response.topics, allowed, asked_for_all, asked_ids)
    if kept is not None:
        response.topics, changed = kept, True
    if ctx.api_key == ApiKey.METADATA:
        if merge_refused(ctx, response) is not FORWARD:
            changed = True
    else:
        cursor = response.next_cursor
        if cursor is not None and request is not None and (changed or not allowed(cursor.topic_name)):
            return fill_pages(ctx, request, response, allowed, asked_for_all)
        changed |= _add_denied(ctx, response)
    return forward(response) if changed else FORWARD


def screen_described_metadata(ctx: FilterContext, body: memoryview, allowed: Allowed, narrows: bool) -> Result | None:
    """``hide_undescribable`` for a Metadata answer, decided from its bytes (an ``on_response`` screen).

    FORWARD when no topic is hidden (the common answer: the original bytes go on); a listing with
    hidden topics without their byte spans (``forward(body)``, what the hook's re-encoding would hold);
    None (decode and run the hook) for the rare shapes: refused entries to merge, a denied topic asked
    for by name or id, an empty v1+ topic list, and, where the filter narrows
    ``*_authorized_operations`` (``narrows``), any operations the broker filled in. ``ctx.request`` is
    None where the request's screen let it through: it asked for every topic, or for allowed names
    with no operations (the authorizer's ``screen_metadata_request``), so nothing is asked by id.
    """
    request = ctx.request
    version = ctx.api_version
    if request is None:  # the request's screen let it through (see above): nothing kept, nothing by id
        asked_for_all = True
    else:
        if ctx.state:
            return None  # entries a request hook refused, to merge back (merge_refused)
        asked_for_all = request.topics is None or (version == 0 and not request.topics)
        if not asked_for_all and (not request.topics or any(getattr(t, "topic_id", _ZERO).int for t in request.topics)):
            return None
    answer = metadata_answer(body, version)
    if (
        narrows
        and version >= 8
        and request is not None
        and (
            request.include_topic_authorized_operations
            or getattr(request, "include_cluster_authorized_operations", False)
        )
        and (answer.cluster_operations != NOT_REQUESTED or any(t.operations != NOT_REQUESTED for t in answer.topics))
    ):
        return None  # the operations the client asked for are narrowed by the hook
    for t in answer.topics:  # the common answer hides nothing: found without building the set below
        if t.name is not None and not allowed(t.name):
            break
    else:
        return FORWARD
    denied = {i for i, t in enumerate(answer.topics) if t.name is not None and not allowed(t.name)}
    if not asked_for_all:
        return None  # asked for by name: answered TOPIC_AUTHORIZATION_FAILED (the hook builds the entry)
    return forward(answer.without(denied))


def _partitions(topics: list[Any]) -> int:
    return sum(len(t.partitions) for t in topics)


async def fill_pages(ctx: FilterContext, request: Any, response: Any, allowed: Allowed, asked_for_all: bool) -> Result:
    """DescribeTopicPartitions pages over the topics the client may describe, as Kafka's handler does
    (it filters before paging): a filtered page is filled up to ``response_partition_limit`` from the
    broker's next pages, and ``next_cursor`` never names a hidden topic (it moves on to the first
    partition of the next topic shown, or is null when none follows).
    """
    limit = max(request.response_partition_limit, 1)
    count = _partitions(response.topics)
    shown = {t.name: t for t in response.topics if t.name is not None}
    cursor = response.next_cursor
    next_cursor: Any = None
    cursor_cls = type(cursor)
    while cursor is not None:
        full = count >= limit
        if full and allowed(cursor.topic_name):
            next_cursor = cursor
            break
        ask = type(request)(
            topics=list(request.topics),
            response_partition_limit=_SEARCH_LIMIT if full else limit - count,
            cursor=_CURSOR(topic_name=cursor.topic_name, partition_index=cursor.partition_index),
        )
        page = await ctx.send_request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, ask)
        kept = hide_described_topics(page.topics, allowed, asked_for_all)
        topics = page.topics if kept is None else kept
        if full:  # only looking for where the client's next page starts
            first = next((t for t in topics if t.partitions and t.name is not None and allowed(t.name)), None)
            if first is not None:
                next_cursor = cursor_cls(topic_name=first.name, partition_index=first.partitions[0].partition_index)
                break
        else:
            for t in topics:
                before = shown.get(t.name) if t.name is not None else None
                if before is None:
                    response.topics.append(t)
                    if t.name is not None:
                        shown[t.name] = t
                elif t.partitions:  # a topic continued from the previous broker page
                    before.partitions = list(before.partitions) + list(t.partitions)
                count += len(t.partitions)
        new = page.next_cursor
        if new is not None and (new.topic_name, new.partition_index) == (cursor.topic_name, cursor.partition_index):
            break  # no progress: a broker bug; end the listing here rather than loop
        cursor = new
    response.next_cursor = next_cursor
    _add_denied(ctx, response)
    return forward(response)
