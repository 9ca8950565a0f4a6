"""The connection core: one client connection's protocol logic, without sockets (sans-IO).

Events go in as method calls: ``receive_client`` and ``receive_broker`` (bytes), ``hook_done``
(a suspended hook run ended), ``client_eof`` (the client half-closed), ``client_closed`` and
``close`` (kgate, a timeout or the broker ends it). Actions go out through ``Actions``:
``send_upstream``, ``send_client``, pausing and resuming reading on either side, ``spawn``
(await a suspended hook run), ``report_held`` and ``close_sockets``.
``proxy/carrier/connection.py`` carries them out on asyncio transports; the tests drive the
core with a recorder (tests/proxy/), including hypothesis state machines, with no event loop.
Actions are calls on an object rather than a returned list so the data path allocates nothing
per chunk: most chunks produce exactly one action (forward these bytes).

Client to broker: a ``FrameReader`` splits the stream into frames. Each frame's ``RequestPlan``
(proxy/sansio/plans.py) says whether it is only tracked from its header (the bytes go out as the chunk
that arrived: a 1 MiB Produce is never assembled), decoded for kgate's own bookkeeping, or
decoded and run through the request hooks. Without request hooks and validation the core runs
in raw mode (``_raw_data``): bookkeeping from headers only.

Every request that expects an answer becomes an ``Exchange`` in ``pending`` (the order the
client must get answers in). Forwarded ones also wait in ``upstream_waiting`` (the order the
broker answers in). A response is matched to the head of ``upstream_waiting``, handled by the
exchange's ``ResponsePlan`` and stored on it; ``_flush`` writes answers from the head of
``pending`` as soon as they are ready. Answers kgate makes itself (a filter's ``respond``) take
their place in the same queue, so order always holds.

Suspension: a hook that awaits suspends only its own message (the lifecycle is the table in
proxy/sansio/states.py). Requests behind a suspended request wait in ``backlog``; reading from the
client pauses while the backlog is over its limit. A response hook that awaits only delays
delivery: later responses are processed and wait in ``pending``.

The in-flight limit (``max_inflight_requests``) holds within a read: once ``pending`` reaches it,
the rest of the read is kept (``_kept_frames`` / ``_kept``, reported as held), reading pauses, and
``_flush`` replays what was kept, in order, as answers free places (``_replay_kept``).

Bad input closes only this connection, with a ``CloseReason`` and a log line naming the peer.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from struct import Struct
from typing import TYPE_CHECKING, Any, Final, Protocol
from uuid import UUID

from kgate.api import FORWARD, Close, ConnectionInfo, ErrorCode, Forward, Respond, error_response
from kgate.codec import api
from kgate.codec.framing import FrameReader
from kgate.codec.generated.api_keys import SASL_AUTHENTICATE, SASL_HANDSHAKE
from kgate.codec.generated.data.produce import TopicProduceData
from kgate.codec.headers import (
    HeaderError,
    RequestHeader,
    parse_request_header,
    peek_correlation_id,
    peek_request,
    produce_acks_offset,
    response_body_offset,
    response_frame,
    skip_tagged_fields,
)
from kgate.codec.headers import (
    frame as make_frame,
)
from kgate.codec.metadata_walk import metadata_answer
from kgate.codec.peek import ProducePrefix, produce_prefix
from kgate.codec.tail_walk import WalkError
from kgate.filters.chain import Decision, Verdict, peek_forwards, run_hooks
from kgate.proxy.sansio import response_tail, rewrite
from kgate.proxy.sansio.close_reason import CloseReason
from kgate.proxy.sansio.cluster_port import OPEN_LISTENER
from kgate.proxy.sansio.context import MessageContext
from kgate.proxy.sansio.deadlines import FRAME_KEPT
from kgate.proxy.sansio.exchange import RAW_SASL, Exchange, VersionRefused, tracked_exchange
from kgate.proxy.sansio.metadata_brokers import rewrite_brokers
from kgate.proxy.sansio.plans import (
    METADATA,
    OBSERVE_FETCH_MAX,
    PRODUCE,
    RequestPlan,
    ResponsePlan,
    may_carry_unknown_topic,
)
from kgate.proxy.sansio.sasl import NO_SASL, SaslState
from kgate.proxy.sansio.states import CLIENT_GONE_STATES, HALF_CLOSED_STATES, SUSPENDED_STATES, Event, State, advance
from kgate.proxy.sansio.validate import check_request

if TYPE_CHECKING:
    from kgate.filters.chain import FilterChain
    from kgate.filters.exchanges import ExchangeObserver
    from kgate.proxy.sansio.chain_handover import RetiredChain
    from kgate.proxy.sansio.cluster_port import Address, ClusterPort

# Module constants are ``Final``: compiled (tools/compile_hot.py), mypyc keeps a Final name in a C
# static, where any other module-level name is a lookup in the module's dict on every use (~190
# user-space instructions each; a Produce read nine of them, docs/performance.md, 2026-11-25).
log: Final = logging.getLogger("kgate.connection")
_ZERO: Final = UUID(int=0)
REQUEST_TIMED_OUT: Final = int(ErrorCode.REQUEST_TIMED_OUT)


_I32: Final = Struct(">i")  # a request frame's size
_SIZE_CID: Final = Struct(">ii")  # a response frame's size and correlation id, in one call
_REQ_HEAD: Final = Struct(">hhi")  # a request's api key, version and correlation id, right after its size
_ACKS_TIMEOUT: Final = Struct(">hi")  # a Produce's acks and timeout_ms, read in one call
# The plans and the close reason the data path compares with, once each as ``Final`` names (see
# above; an enum member read through its class is two lookups): the core uses these, never
# ``ResponsePlan.X`` / ``RequestPlan.X`` / ``CloseReason.CLIENT_LEFT``, on any path.
_PASS: Final = ResponsePlan.PASS
_WATCH_FETCH: Final = ResponsePlan.WATCH_FETCH
_BROKERS_ONLY: Final = ResponsePlan.BROKERS_ONLY
_CAP_VERSIONS: Final = ResponsePlan.CAP_VERSIONS
_TAIL: Final = ResponsePlan.TAIL
_WATCH_TAIL: Final = ResponsePlan.WATCH_TAIL
_RAW_SASL_PLAN: Final = ResponsePlan.RAW_SASL
_TRACK: Final = RequestPlan.TRACK
_OBSERVE: Final = RequestPlan.OBSERVE
_REFUSE: Final = RequestPlan.REFUSE
_PEEK: Final = RequestPlan.PEEK
_FILTER: Final = RequestPlan.FILTER
_SCREEN: Final = RequestPlan.SCREEN
_SCREEN_ANSWER: Final = ResponsePlan.SCREEN
_CLIENT_LEFT: Final = CloseReason.CLIENT_LEFT
_FRAME_KEPT: Final = FRAME_KEPT  # imported names are dict lookups compiled, as above
_NO_SASL: Final = NO_SASL


class _HookedRequest(Exception):
    """Raised by ``_track`` in raw mode: this request is one a hook must see (see ``_leave_raw``)."""


#: Produce's request header version per version the codec knows (the peek reads one per request)
_PRODUCE_HEADER: Final = {
    v: api.request_header_version(PRODUCE, v)
    for v in range(api.API_INFO[PRODUCE].min_version, api.API_INFO[PRODUCE].max_version + 1)
}


def _screened(screens: Any, ctx: MessageContext, body: bytes | memoryview) -> bool:
    """Whether every screen forwards a request from its body's bytes (an exception: undecided)."""
    try:
        for screen in screens:
            if screen(ctx, body) is not FORWARD:
                return False
    except Exception:  # the hook will run on the decoded request and report its failure
        return False
    return True


class Actions(Protocol):
    """What the core asks its carrier to do (proxy/carrier/connection.py on asyncio; a recorder in tests)."""

    def send_upstream(self, data: bytes | memoryview) -> None: ...
    def send_client(self, data: bytes | memoryview) -> None: ...
    def pause_client(self, reason: str) -> None: ...
    def resume_client(self, reason: str) -> None: ...
    def pause_broker(self, reason: str) -> None: ...
    def resume_broker(self, reason: str) -> None: ...
    def spawn(self, pending: Awaitable[Decision], suspension: Suspension) -> None:
        """Await ``pending`` (``settle``, with the filter timeout), then call ``core.hook_done``."""

    def report_held(self, held: int) -> None:
        """The bytes this connection now holds in kgate (for the process-wide cap)."""

    def open_listener(self, node_id: int) -> Address | None:
        """Bind node ``node_id``'s listener now, before the answer naming it reaches the client;
        its client-facing address, or None if it cannot be bound (the node is left out)."""

    def close_sockets(self, reason: CloseReason) -> None:
        """The core has closed: close both sockets (answers already written go first)."""


class NoActions:
    """A carrier that does nothing: a torn-down connection's core has it (``ConnectionCore.detach``).

    A closed core acts on nothing, so none of these is expected to run there; they are here so
    that a late event finds no way back to the old carrier (and so keeps nothing of it alive).
    """

    __slots__ = ()

    def send_upstream(self, data: bytes | memoryview) -> None:
        pass

    def send_client(self, data: bytes | memoryview) -> None:
        pass

    def pause_client(self, reason: str) -> None:
        pass

    def resume_client(self, reason: str) -> None:
        pass

    def pause_broker(self, reason: str) -> None:
        pass

    def resume_broker(self, reason: str) -> None:
        pass

    def spawn(self, pending: Awaitable[Decision], suspension: Suspension) -> None:
        close = getattr(pending, "close", None)
        if close is not None:
            close()  # a hook's coroutine that nobody will await: closed, not left to warn

    def report_held(self, held: int) -> None:
        pass

    def open_listener(self, node_id: int) -> Address | None:
        return None

    def close_sockets(self, reason: CloseReason) -> None:
        pass


_DETACHED: Final = NoActions()


def _no_node(node_id: int, host: str, port: int) -> Address | None:
    """A detached core's node mapper: it serves no node."""
    return None


class Suspension:
    """A hook run that awaits: what the core needs back when it ends (``hook_done``)."""

    __slots__ = ("arrived_ns", "changed", "ctx", "exchange", "frame", "header", "message", "offset")

    def __init__(
        self,
        frame: memoryview,
        message: Any,
        ctx: MessageContext,
        header: RequestHeader | None = None,
        exchange: Exchange | None = None,
        offset: int = 0,
        changed: bool = False,
    ) -> None:
        self.frame = frame
        self.message = message
        self.ctx = ctx
        self.header = header  # set for a request
        self.exchange = exchange  # set for a response
        self.offset = offset  # response: where its body starts
        self.changed = changed  # response: whether its addresses were rewritten
        self.arrived_ns = 0  # request, while an exchange observer is installed: when it was read


class ConnectionCore:
    """One client connection's requests, answers, suspensions and framing; no I/O."""

    # Slots: a core has 47 attributes, more than the 30 a key-sharing instance dict holds in
    # CPython 3.11, so each core built and grew a dict of its own while __init__ filled it (a core
    # built in 2.8 µs, 2.0 with slots, timeit); slot reads are also the cheapest attribute reads on
    # the request path. A new attribute must be added here.
    __slots__ = (
        "_acks0",
        "_answers",
        "_answers_paused",
        "_api_versions_rewrites",
        "_arrived_ns",
        "_backlog_arrived",
        "_backlog_bytes",
        "_behind",
        "_client_done",
        "_client_raw",
        "_declined",
        "_go_raw",
        "_held",
        "_held_len",
        "_held_need",
        "_held_told",
        "_inflight_paused",
        "_kept",
        "_kept_bytes",
        "_kept_frames",
        "_map_node",
        "_max_frame",
        "_max_inflight",
        "_max_queued",
        "_metadata_rewrites",
        "_new_observer",
        "_observer",
        "_old",
        "_req_observed",
        "_req_skip",
        "_req_stream_answered",
        "_req_stream_left",
        "_routes",
        "_stream_left",
        "_streamed",
        "_tail",
        "backlog",
        "chain",
        "client_gone",
        "close_detail",
        "closed",
        "cluster",
        "frames_in",
        "half_closed",
        "info",
        "now_ns",
        "out",
        "pending",
        "plans",
        "raw_requests",
        "reader",
        "rx_chunks",
        "sasl",
        "settings",
        "state",
        "suspended",
        "up_chunks",
        "upstream_reader",
        "upstream_waiting",
        "write_client",
        "write_up",
    )

    def __init__(self, cluster: ClusterPort, info: ConnectionInfo, out: Actions) -> None:
        self.cluster = cluster
        self.chain = cluster.chain
        self.plans = cluster.plans
        self._routes = cluster.plans.routes
        # kgate_address_rewrites' Metadata and ApiVersions counter cells, bound once: a Metadata
        # answer's rewrite ran ``metrics.count_rewrite`` per answer (docs/performance.md)
        self._metadata_rewrites = cluster.metrics.metadata_rewrites
        self._api_versions_rewrites = cluster.metrics.api_versions_rewrites
        # the node mapper handed to every rewrite, bound once (a bound method per answer costs); it
        # points back at this core, a cycle ``detach`` breaks at teardown
        self._map_node: rewrite.NodeMapper = self._node_address
        self._answers = cluster.answers
        settings = cluster.settings
        self.settings = settings
        self.info = info
        self.out = out
        # The two hot actions, bound once. The carrier may point them at its transports' own
        # ``write`` while those are open, and must point them back at ``send_upstream`` /
        # ``send_client`` before a transport goes away: a request round trip then skips two wrapper
        # calls (~1,350 of ~39,700 user-space instructions per Metadata request; docs/performance.md).
        self.write_up: Callable[[bytes | memoryview], None] = out.send_upstream
        self.write_client: Callable[[bytes | memoryview], None] = out.send_client
        self.reader = FrameReader(settings.max_frame_bytes)
        self.upstream_reader = FrameReader(settings.max_frame_bytes)
        self.pending: deque[Exchange] = deque()  # answers owed to the client, in request order
        self.upstream_waiting: deque[Exchange] = deque()  # forwarded, in the order the broker answers
        # made on first use (a suspension, an acks=0 Produce): most connections never need them
        self.backlog: deque[memoryview] | None = None  # requests behind a suspended one
        self.sasl: SaslState = _NO_SASL  # shared and read-only until the first SASL step (own_sasl)
        self.state = State.OPEN
        # derived from ``state`` by ``_to`` only (read on every frame, so kept as plain attributes)
        self.closed = False
        self.suspended = False
        self.client_gone = False
        self.half_closed = False  # the client sent its FIN: nothing more to read, answers still go
        #: half-closed or gone: answers take the general path (``_flush``: discarded for a client that
        #: left; written, then the connection ends after the last, for one that half-closed), so the
        #: whole-answer fast path tests one flag for both (``receive_broker``)
        self._client_done = False
        # raw mode forwards request bytes as they arrive, until a request a hook must see (then the
        # connection is filtered: _leave_raw); validation must see each request whole first
        self.raw_requests = not settings.validate_requests
        #: the filtered path just forwarded a request raw mode could have taken (a screened or peeked
        #: one): the connection goes back to raw mode at the next frame boundary (``receive_client``)
        self._go_raw = False
        #: a request whose screen (or peek) declined it in raw mode, handed to the filtered path so its
        #: screens are not asked twice (``_request``); None otherwise
        self._declined: MessageContext | None = None
        #: the client id's bytes as the header-only path last read them (``_client_at``): decoded
        #: into ``info.client_id`` only when they change; None whenever another path set it
        self._client_raw: bytes | None = None
        self._stream_left = 0  # bytes of a cut-through response still to forward
        #: a cut-through response walked to its node-endpoint tail (proxy/sansio/response_tail.py), or None
        self._tail: response_tail.TailStream | None = None
        self._req_skip = 0  # bytes of a tracked request still to pass through (raw mode)
        self._req_stream_left = 0  # bytes of a peeked Produce still to pass through (filter mode)
        #: the request streaming through (either count above) expects an answer: its exchange is the
        #: newest (read only if the client's EOF cuts it short: ``_drop_cut_request``)
        self._req_stream_answered = False
        self._acks0: deque[int] | None = None  # correlation ids of recent acks=0 Produce (at most 256)
        #: start of a request that cannot be tracked yet (raw mode); None, not an empty list, while
        #: nothing is held: a list per connection is one more object for the collector to walk
        self._held: list[bytes] | None = None
        self._held_len = 0
        self._held_need = 0  # bytes to collect before trying again
        self.rx_chunks = 0  # reads from the client so far (the timeout sweep compares it between sweeps)
        self.up_chunks = 0  # reads from the broker so far
        self.frames_in = 0  # request frames started so far
        self._backlog_bytes = 0  # bytes of the frames in backlog
        # While an exchange observer is installed, when each backlog frame was read, and the read time
        # of the request being handled after a wait (0: now): latency counts the time a request waited
        # on a hook or behind one, as its client saw it, not from when kgate sent it on.
        self._backlog_arrived: deque[int] | None = None
        self._arrived_ns = 0
        self._held_told = 0  # what was last reported through ``report_held``
        # limits read on every chunk, and whether this core paused for them (so the common
        # case, not paused, calls nothing on the way out of _flush)
        self._max_inflight = settings.max_inflight_requests
        self._max_queued = settings.max_queued_requests
        self._max_frame = settings.max_frame_bytes
        self._inflight_paused = False
        # what the in-flight limit stopped mid-read, in order: whole frames (filtered mode), then
        # bytes not yet split (they start where the data path left off); made on first use
        self._kept_frames: deque[memoryview] | None = None
        self._kept: deque[bytes | memoryview] | None = None
        self._kept_bytes = 0
        self._answers_paused = False
        #: who wants a report per finished exchange (filters/exchanges.py); None: nobody, and every
        #: observation point below costs one ``is not None`` test
        self._observer = cluster.exchange_observer
        #: a streaming answer being observed: (exchange, pieces so far, size, when its head went)
        self._streamed: tuple[Exchange, list[bytes | memoryview], int, int] | None = None
        #: a request being observed that streams through (larger than a read): its exchange, the
        #: pieces so far (``ex.req``), and whether it is an acks=0 Produce reported once it is whole
        self._req_observed: tuple[Exchange, list[bytes | memoryview], bool] | None = None
        #: after a reload (proxy/sansio/chain_handover.py): the exchanges started on a replaced chain, and
        #: that chain; None (the common case) costs the response path nothing (see switch_chain)
        self._old: dict[Exchange, RetiredChain] | None = None
        #: the observer of the chain requests are read with, while ``_observer`` is ``_report``
        self._new_observer: ExchangeObserver | None = None
        #: a replaced chain whose request hook this connection is still awaiting (switches in hook_done)
        self._behind: RetiredChain | None = None
        self.close_detail = ""
        #: the time of the event being handled (time.monotonic_ns() units), which the carrier sets
        #: before each event while ``observed``: the core never reads a clock (tests set it), and
        #: only exchange observers need one
        self.now_ns = 0

    @property
    def observed(self) -> bool:
        """Whether an exchange observer is installed (the carrier then sets ``now_ns`` per event)."""
        return self._observer is not None

    def own_sasl(self) -> SaslState:
        """This connection's SASL state, made at its first SASL step (every change goes through here):
        until then the core reads the shared ``NO_SASL``, as most connections never authenticate."""
        sasl = self.sasl
        if sasl is _NO_SASL:
            sasl = self.sasl = SaslState()
        return sasl

    def _node_address(self, node_id: int, host: str, port: int) -> Address | None:
        """The client-facing address of a node a broker's answer names (rewrite.NodeMapper).

        Learning is the cluster's bookkeeping; a node with no listener yet is bound by the
        carrier (``Actions.open_listener``) before the answer that names it is sent.
        """
        # the cluster's method looked up here, not bound per connection: a bound method object each,
        # for a call made only for the nodes of an answer that is not a repeat
        addr = self.cluster.learn_node(node_id, host, port)
        if addr is OPEN_LISTENER:
            return self.out.open_listener(node_id)
        return addr  # type: ignore[return-value]

    def detach(self) -> None:
        """Let go of the carrier once the connection is torn down (proxy/carrier/connection.py calls it).

        The core and its carrier point at each other (``out``; ``write_up`` and ``write_client``
        bound to the carrier), so a finished connection could be freed only by the cycle
        collector: its ~33 tracked objects (core, carrier, read gates, frame readers, deques,
        transports, the connect task) stayed until a collection found them, each collection
        walked them, and 700 of them started one. Detached, a connection is freed by reference
        counting as soon as its transports let go of it. Measured in docs/performance.md
        (2026-11-25, "... connections freed at once").
        """
        self.out = _DETACHED
        self.write_up = self.write_client = _DETACHED.send_upstream
        self._map_node = _no_node
        # A closed core reads nothing more: its partial frames go now, not when the last reference
        # to the carrier does (a connect still delivering early bytes holds it for a while).
        self.reader.discard()
        self.upstream_reader.discard()
        self.backlog = None
        if self._old is not None or self._behind is not None:
            self._release_old()  # torn down before it closed (it always closes first; defensive)

    # -- lifecycle (proxy/sansio/states.py) ----------------------------------------------------------
    def _to(self, event: Event) -> None:
        state = self.state = advance(self.state, event)
        self.closed = state is State.CLOSED
        self.suspended = state in SUSPENDED_STATES
        self.client_gone = state in CLIENT_GONE_STATES
        self.half_closed = state in HALF_CLOSED_STATES
        self._client_done = self.half_closed or self.client_gone

    @property
    def drained(self) -> bool:
        """Owes the client nothing: no answer pending, nothing queued, nothing streaming."""
        return (
            not self.pending
            and not self.backlog
            and not self._stream_left
            and not self._req_stream_left
            and not self.suspended
        )

    @property
    def broker_owes_nothing(self) -> bool:
        """Nothing sent upstream is still being worked on: no answer awaited, no acks=0 Produce sent
        (the broker may still be writing one), no request half forwarded. The carrier then closes the
        broker connection at once instead of half-closing it for a grace period."""
        return not self.pending and self._acks0 is None and not self._req_stream_left

    @property
    def inflight_count(self) -> int:
        return len(self.pending) + (len(self.backlog) if self.backlog else 0) + (1 if self._stream_left else 0)

    # -- configuration reload (proxy/sansio/chain_handover.py) -------------------------------------------
    def switch_chain(self, retired: RetiredChain | None) -> None:
        """Read the next request with the cluster's current chain; exchanges already started keep theirs.

        ``retired`` is the chain being replaced (None: a connection that has read nothing yet).
        Each exchange in flight is recorded with it, so its response hooks, its per-exchange state
        and its exchange observer stay that chain's, and holds it until the exchange ends (then
        ``RetiredChain`` closes the chain once nothing holds it). A request whose bytes sit unread
        in the frame reader, or in the backlog, is the new chain's: no chain has looked at it yet.
        A request hook still running (SUSPENDED) finishes on its chain: the switch happens in
        ``hook_done`` once its exchange exists. Nothing pauses and nothing closes.

        While exchanges of an old chain are open, ``_observer`` is ``_report``, which routes each
        finished exchange to its chain's observer and releases it: the raw answer fast path (taken
        only without an observer) is off for that short while, so no exchange ends unaccounted.
        """
        if self.closed or self.chain is self.cluster.chain:
            return
        if self.suspended:
            if self._behind is None and retired is not None and retired.chain is self.chain:
                retired.hold()
                self._behind = retired
            return
        self._adopt(retired if retired is not None and retired.chain is self.chain else None)

    def adopt_chain(self) -> bool:
        """A connection that has read nothing yet (a reload during its TLS handshake) takes the current chain."""
        self.switch_chain(None)
        return self.chain is self.cluster.chain

    def _adopt(self, retired: RetiredChain | None) -> None:
        if retired is not None:
            old = self._old if self._old is not None else {}
            mine = [ex for ex in self.pending if ex.api_key != RAW_SASL and ex not in old]
            if self._streamed is not None and self._streamed[0] not in old:
                mine.append(self._streamed[0])  # its answer is streaming through, reported at its end
            if self._req_observed is not None and self._req_observed[2] and self._req_observed[0] not in old:
                mine.append(self._req_observed[0])  # an acks=0 Produce streaming in, reported once whole
            for ex in mine:
                old[ex] = retired
                retired.hold()
            self._old = old or None
        was_observed = self._observer is not None
        cluster = self.cluster
        self.chain = cluster.chain
        self.plans = cluster.plans
        self._routes = cluster.plans.routes
        self._answers = cluster.answers  # the new chain's version limits cap ApiVersions from now on
        self._new_observer = cluster.exchange_observer
        self._observer = self._report if self._old is not None else self._new_observer
        self._observation_changed(was_observed)
        if (
            not self.raw_requests
            and not self.chain.has_request_hooks
            and not self.settings.validate_requests
            and not self.reader.buffered
            and not self._req_stream_left
            and not self.backlog
        ):
            self.raw_requests = True  # a chain that hooks no request, at a frame boundary: header-only

    def _report(self, ex: Any, info: ConnectionInfo, answer: Any, size: int | None, end_ns: int) -> None:
        """The observer while exchanges of a replaced chain are open: each to its own chain's observer."""
        old = self._old
        retired = old.pop(ex, None) if old is not None else None
        if retired is None:
            observe = self._new_observer
            if observe is not None:
                observe(ex, info, answer, size, end_ns)
            return
        try:
            if retired.observer is not None:
                retired.observer(ex, info, answer, size, end_ns)
        finally:
            retired.release()
            if not old:
                self._old = None
                self._observer = self._new_observer
                self._observation_changed(True)

    def _observation_changed(self, was_observed: bool) -> None:
        """Keep the observation bookkeeping true to ``_observer`` after it changed."""
        if self._observer is None:
            self._streamed = None  # a streaming answer of the new chain, which observes nothing
            self._req_observed = None
            self._backlog_arrived = None
        elif not was_observed and self.backlog and len(self._backlog_arrived or ()) != len(self.backlog):
            now = self.now_ns  # frames queued while nothing observed: read no later than now
            self._backlog_arrived = deque([now] * len(self.backlog))

    def _release_old(self) -> None:
        """The connection ends: exchanges of replaced chains still open let go of them."""
        old, behind = self._old, self._behind
        self._old = self._behind = None
        if self._observer is not self._new_observer and old is not None:
            self._observer = self._new_observer  # nothing more to route: the connection has ended
        if old is not None:
            for retired in old.values():
                retired.release()
        if behind is not None:
            behind.release()

    def _chain_of(self, ex: Exchange) -> FilterChain:
        """The chain that saw ``ex``'s request (only asked while exchanges of a replaced chain are open)."""
        retired = self._old.get(ex) if self._old is not None else None
        return self.chain if retired is None else retired.chain

    @property
    def mid_frame(self) -> bool:
        """Whether a request has begun but not wholly arrived (the frame timeout watches this)."""
        return (
            self.rx_chunks == 0
            or bool(self._held)
            or self._req_skip > 0
            or self._req_stream_left > 0
            or self.reader.buffered > 0
        )

    @property
    def peer(self) -> str:
        return self.info.client_address

    def client_eof(self) -> None:
        """The client half-closed its socket (its FIN): it sends nothing more, and may still read.

        As a broker does with a client that half-closes, and a TCP proxy passes on: every request
        read from it still goes upstream (one suspended behind a hook, its backlog, what the
        in-flight limit kept) and every answer still goes to it; once nothing is left to answer
        the connection ends as a client leaving (FINISHED: ``_finish_if_half_closed``). A request
        cut short by the FIN can never complete: what is held of it is dropped, never forwarded
        (``_drop_cut_request``). The in-flight limit lets go, as for a client that left: reading
        is over, and what it kept was read (at most a read or two past the limit). A second EOF
        (the transport read again after a resume) changes nothing.
        """
        if self.closed or self.half_closed or self.client_gone:
            return
        self._max_inflight = 1 << 62
        self._inflight_paused = False
        if self._kept is not None or self._kept_frames is not None:
            self._replay_kept()  # before the transition: a flush during it must not finish yet
            if self.closed:
                return
        self._drop_cut_request()
        pending = len(self.pending)
        if pending and log.isEnabledFor(logging.DEBUG):
            log.debug("client %s half-closed; answering %d request(s) read from it", self.peer, pending)
        self._to(Event.CLIENT_EOF)
        self._finish_if_half_closed()

    def _drop_cut_request(self) -> None:
        """At the client's EOF, the request it had begun and will never finish: dropped.

        Held bytes of it (a frame not whole in the reader, a header not whole in raw mode) never go
        upstream. A request kgate was already streaming upstream (a large Produce forwarded as it
        arrives) stays cut at the broker, which can never answer it: its exchange is dropped, so
        it does not keep the connection open (the broker answers the requests before it first, in
        order; kgate then closes the broker connection). The cut request's exchange, when it has
        one (not an acks=0 Produce), is the newest (``_req_stream_answered``).
        """
        if self.reader.buffered:
            self.reader.discard()
            self._declined = None  # the cut frame's screens' verdict: nothing left to take it
        if self._held:
            self._held, self._held_len, self._held_need = None, 0, 0
        if not (self._req_skip or self._req_stream_left):
            return
        self._req_skip = self._req_stream_left = 0
        observed = self._req_observed
        if observed is not None:
            self._req_observed = None
            if observed[2]:  # an acks=0 Produce cut short: reported as gone, as at a close (_unanswered)
                self._observer(observed[0], self.info, None, None, observed[0].t0_ns)  # type: ignore[misc]
        if not self._req_stream_answered:
            return
        self._req_stream_answered = False
        waiting, pending = self.upstream_waiting, self.pending
        if waiting and pending and waiting[-1] is pending[-1]:  # always, as nothing can follow it
            cut = waiting.pop()
            pending.pop()
            if self._observer is not None:
                self._observer(cut, self.info, None, None, self.now_ns)

    def _finish_if_half_closed(self) -> None:
        """A half-closed client owed nothing more (every answer written, nothing suspended or
        queued, nothing streaming): the connection ends, as a client leaving."""
        if self.state is State.HALF_CLOSED and self.drained:
            self.close_detail = "client closed the connection"
            if log.isEnabledFor(logging.DEBUG):
                log.debug("client %s (cluster %s) left: every answer written", self.peer, self.cluster.name)
            self._finished()

    def client_closed(self) -> None:
        """The client's socket closed. Requests read from it but not sent yet (behind a suspended
        hook) still go: a broker processes what it has read from a client that left, and acks=0
        data must not be lost."""
        if self.closed:
            return
        if self._kept is not None or self._kept_frames is not None:
            # what the in-flight limit kept was read: it goes, as a suspended request's backlog does
            self._max_inflight = 1 << 62
            self._inflight_paused = False
            self._replay_kept()
            if self.closed:
                return
        if self.suspended:
            queued = len(self.backlog or ())
            log.debug("client %s went away; finishing %d request(s) read from it", self.peer, queued + 1)
            self._to(Event.CLIENT_CLOSED)
            return
        if self.pending:
            log.debug("client %s went away with %d request(s) in flight", self.peer, len(self.pending))
        self.close(_CLIENT_LEFT, "client closed the connection")

    def close(self, reason: CloseReason, detail: str = "") -> None:
        """Close both sides; answers already made for the client are written first."""
        if self.closed:
            return
        text = detail or reason.value
        self.close_detail = text  # for the connection's one "connection closed" line (proxy/carrier/connection.py)
        if reason is _CLIENT_LEFT:  # the common end: nothing to count; a debug line (arguments only if on)
            if log.isEnabledFor(logging.DEBUG):
                # the client ended it, not kgate: "closing client" would read as kgate's decision
                log.debug("client %s (cluster %s) left: %s", self.peer, self.cluster.name, text)
        elif reason.is_error and (held := self.cluster.metrics.close_lines.take(reason, self.now_ns)) >= 0:
            info = self.info
            log.warning(
                "closing client %s (cluster %s): %s%s",
                self.peer,
                self.cluster.name,
                text,
                f" ({held} more closed for this reason without a line)" if held else "",
                extra={
                    "event": "connection_refused",
                    "cluster": self.cluster.name,
                    "connection": info.client_address,
                    "principal": info.principal,
                    "client_id": info.client_id,
                    "reason": reason.value,
                    "decision": "close",
                    "held_back": held,
                },
            )
            self.cluster.metrics.closed_on_error(reason.value)
        elif reason.is_error:  # over its line budget: counted, not logged
            self.cluster.metrics.closed_on_error(reason.value)
        else:
            log.debug("closing client %s (cluster %s): %s", self.peer, self.cluster.name, text)
        self._kept = self._kept_frames = None  # not sent: _flush below must not replay them
        self._kept_bytes = 0
        self.half_closed = False  # this close ends it: the flush below must not finish it first (FINISHED)
        self._flush()
        if self._observer is not None:
            self._unanswered()
        self._to(Event.CLOSE)
        if self._old is not None or self._behind is not None:
            self._release_old()
        self.backlog = self._backlog_arrived = None
        self._backlog_bytes = 0
        self.out.close_sockets(reason)

    def _finish_if_client_gone(self) -> None:
        """Once a departed client's last read request has gone upstream, the connection ends."""
        if self.state is State.CLIENT_GONE and not self.backlog:
            self._finished()

    def _finished(self) -> None:
        """Nothing is owed any more to a client that left or half-closed (FINISHED): the connection
        ends as the client leaving. The one ending both ``_finish_if_*`` share."""
        self._to(Event.FINISHED)
        if self._old is not None or self._behind is not None:
            self._release_old()
        self.out.close_sockets(_CLIENT_LEFT)

    # -- client to broker ---------------------------------------------------------------------
    def receive_client(self, data: bytes) -> None:
        """Bytes from the client."""
        self.rx_chunks += 1
        if self.closed:
            return
        if self._inflight_paused and self._keep_read(data):
            return
        if self.raw_requests:
            n = len(data)
            if (
                not self._held
                and not self._req_skip
                and n >= 12
                and _I32.unpack_from(data)[0] + 4 == n  # (see receive_broker)
                and n <= self._max_frame
            ):
                # The common case (request and answer in turn): one whole frame in one read, tracked
                # and forwarded here, without _raw_data's splitting (nor its call: ~600 user-space
                # instructions of a request's ~38,000; docs/performance.md).
                try:
                    self._track(data)  # the bytes as read: no memoryview to make (~500 instructions compiled)
                except HeaderError as exc:
                    self._refuse(exc)
                    return
                except _HookedRequest:
                    self._leave_raw(data)  # then the in-flight limit below, as for any read
                else:
                    self.frames_in += 1
                    self.write_up(data)
            else:
                self._raw_data(data)
        else:
            self._filtered_data(data)
            self._report_held()
            if self._go_raw:
                self._back_to_raw()
        if len(self.pending) >= self._max_inflight and not self._inflight_paused:
            # bounded per connection: reading resumes in _flush once answers went out
            self._inflight_paused = True
            self.out.pause_client("inflight-limit")

    def _back_to_raw(self) -> None:
        """After a request the header-only path could have taken (screened, peeked), go back to it
        at a frame boundary with nothing waiting: a connection whose one request was declined (or
        arrived in pieces) is not filtered for the rest of its life."""
        if (
            not self.settings.validate_requests
            and not self.reader.buffered
            and not self._req_stream_left
            and not self.suspended
            and not self.backlog
            and self._kept is None
            and self._kept_frames is None
            and not self.closed
        ):
            self.raw_requests = True
            self._go_raw = False

    def _keep_read(self, data: bytes | memoryview) -> bool:
        """At the in-flight limit, keep a read that starts a new request (reading is paused; one
        read may still come). The rest of a request already forwarded is not kept: its answer is
        one the limit waits for."""
        if self._held or self._req_skip or self._req_stream_left:
            return False  # the data path forwards the rest, then keeps what follows it
        self._keep(data)
        self._report_held()
        return True

    def _keep(self, data: bytes | memoryview) -> None:
        kept = self._kept
        if kept is None:
            kept = self._kept = deque()
        kept.append(data)
        self._kept_bytes += len(data)
        if not self._inflight_paused:
            self._inflight_paused = True
            self.out.pause_client("inflight-limit")

    def _keep_frames(self, frames: list[memoryview], start: int) -> None:
        kept = self._kept_frames
        if kept is None:
            kept = self._kept_frames = deque()
        for frame in frames[start:]:
            kept.append(frame)
            self._kept_bytes += len(frame)
        if not self._inflight_paused:
            self._inflight_paused = True
            self.out.pause_client("inflight-limit")

    def _replay_kept(self) -> None:
        """Answers brought the count under the limit: what it stopped goes first, in order, again
        stopping at the limit (``_inflight_paused`` is set again then)."""
        frames, chunks = self._kept_frames, self._kept
        self._kept_frames = self._kept = None
        self._kept_bytes = 0
        pending, limit = self.pending, self._max_inflight
        try:
            while frames and not self.closed:
                if self.suspended:
                    self._queue_behind_suspended(frames.popleft())
                elif len(pending) >= limit:
                    self._keep_frames(list(frames), 0)
                    frames.clear()
                else:
                    self.frames_in += 1
                    self._request(frames.popleft())
        except HeaderError as exc:
            self._refuse(exc)
            return
        if self.closed:
            return
        if self.reader.error is not None:
            self.close(CloseReason.BAD_FRAME, f"bad frame from client: {self.reader.error}")
            return
        while chunks and not self.closed:
            if self._inflight_paused:
                for chunk in chunks:  # behind what this replay kept again
                    self._keep(chunk)
                break
            chunk = chunks.popleft()
            if self.raw_requests:
                # bytes, as _raw_data is typed: compiled (mypyc), a kept memoryview was a TypeError.
                # Only what the limit kept is copied, once; bytes(...) of bytes is the same object
                self._raw_data(bytes(chunk))
            else:
                self._filtered_data(chunk)
        if len(pending) >= limit and not self._inflight_paused and not self.closed:
            self._inflight_paused = True  # reached exactly at the end of what was kept
        self._report_held()

    def _report_held(self) -> None:
        held = self.reader.buffered + self._backlog_bytes + self._kept_bytes
        if held != self._held_told and not self.closed:
            self._held_told = held
            self.out.report_held(held)

    def _filtered_data(self, data: bytes | memoryview) -> None:
        """Filter mode: frames a hook wants are decoded and run through the chain."""
        chunk = data
        lead: memoryview | None = None  # the end of a peeked Produce, not yet written
        if self._req_stream_left:
            data = self._continue_request_stream(data)
            if not data:
                return
            lead = memoryview(chunk)[: len(chunk) - len(data)]
        reader = self.reader
        tail: memoryview | None = None
        if reader.buffered:
            frames = reader.feed(data)
        else:
            frames, end = reader.split(data)
            if end < len(data):
                tail = memoryview(data)[end:]
        if lead is not None:
            # A read that ends one streamed Produce and starts the next (a pipelining producer,
            # every few reads): when the next one is peeked too, both parts go up in one write,
            # as raw mode sends such a read. Two writes cost a second syscall and a second
            # loopback delivery to the broker (docs/performance.md, 2026-11-24 night).
            if (
                not frames
                and tail is not None
                and len(tail) == len(data)
                and not self.suspended
                and len(self.pending) < self._max_inflight
            ):
                if not self._peek_produce(tail, chunk):
                    self.write_up(lead)
                    reader.feed(tail)  # decoded whole once the rest has arrived
                return
            self.write_up(lead)
        if not self._requests(frames, tail):
            return
        if reader.error is not None:
            self.close(CloseReason.BAD_FRAME, f"bad frame from client: {reader.error}")
            return
        if tail is not None and not self.closed:
            if self.suspended:
                reader.feed(tail)
            elif len(self.pending) >= self._max_inflight:
                self._keep(tail)
            elif not self._peek_produce(tail):
                reader.feed(tail)

    def _requests(self, frames: list[memoryview], tail: memoryview | None) -> bool:
        """Run whole frames in order; False when the rest is not for the caller to handle (the
        connection closed, or the in-flight limit kept the frames left and ``tail``)."""
        pending, limit = self.pending, self._max_inflight
        try:
            for i, frame in enumerate(frames):
                if self.closed:
                    return False
                if self.suspended:
                    self.frames_in += 1
                    self._queue_behind_suspended(frame)
                elif len(pending) >= limit:  # exact: the rest waits for answers (_replay_kept)
                    self._keep_frames(frames, i)
                    if tail is not None:
                        self._keep(tail)
                    return False
                else:
                    self.frames_in += 1
                    self._request(frame)
        except HeaderError as exc:
            self._refuse(exc)
            return False
        return True

    def _peek_produce(self, head: memoryview, joined: bytes | memoryview | None = None) -> bool:
        """Let a single-topic Produce go on if every hook forwards it from its topic alone.

        ``head`` is a whole frame or the start of one whose rest has not arrived. True: it went
        upstream (and ``_req_stream_left`` bytes of it are still to come); False: decode it whole.
        Never while validating: a request is checked whole before any of it goes upstream.
        ``joined``: bytes that end with ``head`` and are written in its place when it goes on (the
        end of the previous streamed request, then this one's start); the caller writes the part
        before ``head`` itself when this returns False.
        """
        if self.settings.validate_requests or len(head) < 12 or head[4:6] != b"\x00\x00" or self.sasl.raw:
            return False
        if self._declined is not None:
            return False  # raw mode's peek declined this one already (``_request`` clears the mark)
        _key, version, cid = peek_request(head)
        plan, answer_plan, count = self.plans.route(PRODUCE, version)
        if plan is not _PEEK:
            return False  # no hook, a hook that cannot peek, or a version the full path refuses
        size = int.from_bytes(head[:4], "big", signed=True)
        if size < 8 or size > self.settings.max_frame_bytes:
            return False  # let the reader report it
        try:
            header = parse_request_header(head, _PRODUCE_HEADER[version])  # PEEK: a version the codec knows
            prefix = produce_prefix(head, header.body_offset, version)
        except HeaderError:
            return False
        if prefix.topic_count != 1:
            return False
        if header.client_id is not None:
            self.info.client_id = header.client_id
            self._client_raw = None
        ctx = MessageContext(self.cluster, self.info, PRODUCE, version, cid)
        ctx.frame_bytes = size + 4  # the quotas filter charges a Produce as it is read
        if not self._peek_forwards(prefix, version, ctx):
            self._declined = ctx  # the whole request's hooks get this context (``_request``)
            return False
        count.n += 1
        self.frames_in += 1
        out = head if joined is None else joined
        if prefix.acks == 0:
            self._note_acks0(cid)
            self.write_up(out)
            if self._observer is not None:
                self._observe_acks0(cid, version, head, size + 4)
        else:
            state = ctx._state
            if state:  # a hook kept state for the answer's hooks: the plan may differ
                answer_plan = self.plans.response(PRODUCE, version, True)
            ex = Exchange(cid, PRODUCE, version, None, state, answer_plan)
            ex.wait = prefix.timeout_ms  # the broker may hold it this long (proxy/sansio/deadlines.py)
            if self._observer is not None:
                self._observe_start(ex, head, size + 4)
            self._forward(out, ex)
        self._req_stream_left = size + 4 - len(head)
        self._req_stream_answered = prefix.acks != 0
        self._go_raw = True
        return True

    def _continue_request_stream(self, data: bytes | memoryview) -> bytes | memoryview:
        """Forward the next bytes of a peeked Produce; return what follows it in ``data``.

        When something follows, the request's last bytes are NOT written here: the caller writes
        them (``_filtered_data``), together with the next request's start when it can.
        """
        n = self._req_stream_left
        if len(data) <= n:
            self._req_stream_left = n - len(data)
            self.write_up(data)
            if self._req_observed is not None:
                self._request_piece(data, self._req_stream_left)
            return b""
        view = memoryview(data)
        self._req_stream_left = 0
        if self._req_observed is not None:
            self._request_piece(view[:n], 0)
        return view[n:]

    def _raw_data(self, data: bytes) -> None:
        """Bookkeeping from headers only, bytes forwarded as they came, until a request a hook wants.

        A frame is tracked as soon as its header has arrived; the rest of it is skipped, not
        assembled (a 1 MiB Produce is never copied). Only a frame whose header is split across
        reads, or a frame decoded whole (SASL, CreateTopics), is held until it can be read; its
        pieces are kept in a list, joined once when enough has arrived, and not forwarded before:
        until its header is read, the frame may be one a hook must see first.
        """
        if self._held:
            self._held.append(data)
            self._held_len += len(data)
            if self._held_len < self._held_need:
                return
            buf: bytes = b"".join(self._held)
            self._held, self._held_len, self._held_need = None, 0, 0
        else:
            buf = data
        pos = 0
        if self._req_skip:
            pos = min(self._req_skip, len(buf))
            self._req_skip -= pos
            if self._req_observed is not None:
                self._request_piece(memoryview(buf)[:pos], self._req_skip)
            if pos == len(buf):  # the middle of a large request: nothing to look at
                self.write_up(buf)
                return
        frames, tail = self.reader.split(memoryview(buf)[pos:])
        tail += pos
        done = pos  # end of the frames tracked so far, in buf
        pending, limit = self.pending, self._max_inflight
        try:
            for frame in frames:
                if len(pending) >= limit:  # exact: the rest waits for answers (_replay_kept)
                    break
                self._track(frame)
                done += len(frame)
                self.frames_in += 1
            if len(pending) >= limit and done < len(buf):
                self.reader.error = None  # met again when the kept bytes are split
                self._forward_prefix(buf, done)
                self._keep(memoryview(buf)[done:])
                self._report_held()
                return
            if self.reader.error is None and tail < len(buf):
                head = memoryview(buf)[tail:]
                if self._track_head(head):
                    self._req_skip = int.from_bytes(head[:4], "big", signed=True) + 4 - len(head)
                    done = len(buf)
                else:
                    self._hold(head)  # not forwarded: done stays at its start
        except HeaderError as exc:
            self._forward_prefix(buf, done)  # whole frames before the bad one still go
            self._refuse(exc)
            return
        except _HookedRequest:
            self._forward_prefix(buf, done)
            self._leave_raw(memoryview(buf)[done:])
            return
        if self.reader.error is not None:
            self._forward_prefix(buf, done)
            self.close(CloseReason.BAD_FRAME, f"bad frame from client: {self.reader.error}")
            return
        if done == len(buf):
            self.write_up(buf)
        else:
            self._forward_prefix(buf, done)

    def _leave_raw(self, rest: bytes | memoryview) -> None:
        """A request a hook must see arrived on a raw connection: it and all after it go the filtered way.

        A chain that hooks only admin RPCs (guardrails' CreateTopics and config changes) thus costs
        nothing to producers and consumers, whose connections never send one and stay raw. Nothing of
        ``rest`` has gone upstream (held heads are not forwarded), and every request before it was
        forwarded and tracked in order, so the filtered path takes over at a frame boundary.
        """
        self.raw_requests = False
        self._filtered_data(rest)
        self._report_held()

    def _refuse(self, exc: HeaderError) -> None:
        if isinstance(exc, VersionRefused):
            self.close(CloseReason.REFUSED_VERSION, str(exc))
        else:
            self.close(CloseReason.MALFORMED_REQUEST, f"malformed request: {exc}")

    def _forward_prefix(self, data: bytes | memoryview, end: int) -> None:
        if end > 0:
            self.write_up(memoryview(data)[:end])

    def _hold(self, head: memoryview) -> None:
        """Keep the start of a frame that cannot be tracked yet, and how much to wait for."""
        self._held = [bytes(head)]
        self._held_len = len(head)
        if len(head) < 12:
            self._held_need = 12
            return
        size = int.from_bytes(head[:4], "big", signed=True) + 4
        if self.sasl.raw or self._plan_of(head) is _OBSERVE:
            self._held_need = size  # decoded whole
        else:
            self._held_need = min(size, 2 * len(head))  # header fields still missing: grow geometrically

    def _plan_of(self, head: memoryview) -> RequestPlan:
        api_key = int.from_bytes(head[4:6], "big", signed=True)
        version = int.from_bytes(head[6:8], "big", signed=True)
        return self.plans.request(api_key, version)

    def _track_head(self, head: memoryview) -> bool:
        """Track a frame from its first bytes only; False when more of it is needed."""
        if len(head) < 12 or self.sasl.raw or self._plan_of(head) is _OBSERVE:
            return False  # decoded whole (rare, small)
        waiting = len(self.upstream_waiting)
        try:
            self._track(head)
        except HeaderError:
            return False  # header fields not all here yet
        self.frames_in += 1
        self._req_stream_answered = len(self.upstream_waiting) > waiting  # not an acks=0 Produce
        return True

    def _exchange(
        self, cid: int, api_key: int, version: int, request: Any = None, state: dict[str, Any] | None = None
    ) -> Exchange:
        """A new exchange, with the plan for its answer fixed now (proxy/sansio/plans.py)."""
        return Exchange(cid, api_key, version, request, state, self.plans.response(api_key, version, bool(state)))

    def _track(self, frame: bytes | memoryview) -> None:  # noqa: C901 - per-request hot path, kept whole
        """Bookkeeping for a request forwarded as is: what answer, if any, to wait for."""
        if self.sasl.raw:
            if self.sasl.is_raw_token(memoryview(frame)):
                ex = Exchange(0, RAW_SASL, 0, plan=_RAW_SASL_PLAN)
                self.pending.append(ex)
                self.upstream_waiting.append(ex)
                return
            self.info.principal = self.sasl.principal  # bare-token exchange just ended
        if len(frame) < 12:
            peek_request(frame)  # raises HeaderError, with its message
        api_key, version, cid = _REQ_HEAD.unpack_from(frame, 4)  # peek_request, without its call
        route = self._routes.get((api_key, version))
        plan, answer_plan, count = self.plans.route(api_key, version) if route is None else route
        state = None  # what a screen or a peek kept for the answer's hooks
        if plan is not _TRACK and plan is not _OBSERVE:
            # raw mode only for SCREEN, PEEK and FILTER: the filtered path tracks only TRACK, OBSERVE and REFUSE
            if plan is _SCREEN or plan is _PEEK:
                state = (
                    self._screen_raw(frame, api_key, version, cid)
                    if plan is _SCREEN
                    else self._peek_raw(frame, version, cid)
                )
                if state:  # the answer's plan may differ
                    answer_plan = self.plans.response(api_key, version, True)
            elif plan is _REFUSE:
                limit = self.cluster.filter_limits.get(api_key)
                if limit is None:  # an api key the codec does not know, under a filter that must see everything
                    raise VersionRefused(f"api key {api_key} refused: kgate cannot decode it and a filter must see it")
                raise VersionRefused(
                    f"{api.API_INFO[api_key].name} v{version} refused: filters handle v{limit[0]}-v{limit[1]} only"
                )
            else:
                # a new instance each time: a shared one keeps its last traceback, whose frames pin this core
                # and its partial frame after the connection closed (docs/performance.md, "Memory given back")
                raise _HookedRequest
        count.n += 1  # kgate_requests
        if api_key == PRODUCE:
            at = produce_acks_offset(frame, version)
            if len(frame) < at + 6:
                raise HeaderError("truncated Produce acks and timeout_ms")
            acks, timeout = _ACKS_TIMEOUT.unpack_from(frame, at)  # one call for both (see below)
            if acks == 0:
                self._note_acks0(cid)
                if self._observer is not None:
                    self._observe_acks0(cid, version, frame, int.from_bytes(frame[:4], "big") + 4)
                return  # acks=0: the broker sends no response, so nothing waits for one
        request = None
        if plan is _OBSERVE:
            if api_key == SASL_HANDSHAKE or api_key == SASL_AUTHENTICATE:
                self._observe_sasl_request(memoryview(frame), api_key, version)
            else:  # CreateTopics: its validate_only decides what the answer teaches
                request = self._decode_quietly(memoryview(frame), api_key, version)
        ex = tracked_exchange(cid, api_key, version, request, answer_plan)
        if state:
            ex.state = state
        # what the sweep reads the request's own wait from, should the broker be slow (proxy/sansio/deadlines.py)
        if api_key == PRODUCE:
            ex.wait = timeout
        elif api_key in _FRAME_KEPT:
            ex.wait = frame if type(frame) is bytes else bytes(frame)
        if self._observer is not None:
            self._observe_start(ex, frame, int.from_bytes(frame[:4], "big") + 4)
        self.pending.append(ex)
        self.upstream_waiting.append(ex)

    def _client_at(self, frame: bytes | memoryview, header_version: int) -> int:
        """Where a request's body starts (header v1 or v2), its client id read into ``info``: decoded
        as ``parse_request_header`` does, but only when its bytes differ from the last ones read.
        Raises ``HeaderError`` for a header cut short."""
        n = len(frame)
        if n < 14:
            raise HeaderError("truncated client_id length")
        size = frame[12] << 8 | frame[13]
        if size & 0x8000:  # negative: a null client id, which leaves the last one in place
            pos = 14
        else:
            pos = 14 + size
            if pos > n:
                raise HeaderError("client_id runs past the end of the frame")
            raw = frame[14:pos]
            if raw != self._client_raw:
                raw = bytes(raw)  # a copy: a view would keep the whole read it came in alive
                self.info.client_id = raw.decode("utf-8", "replace")
                self._client_raw = raw
        if header_version >= 2:
            return pos + 1 if pos < n and frame[pos] == 0 else skip_tagged_fields(frame, pos)
        return pos

    def _screen_raw(self, frame: bytes | memoryview, api_key: int, version: int, cid: int) -> dict[str, Any] | None:
        """Raw mode: a request every hook of which has a screen, forwarded as it came when every screen
        forwards it from its bytes; what they kept for the answer's hooks. Raises ``_HookedRequest`` (the filtered
        path takes it, with the context the screens saw: ``_declined``) when one does not, or when the
        frame has not all arrived."""
        n = len(frame)
        if int.from_bytes(frame[:4], "big") + 4 != n:
            raise _HookedRequest  # a head: read whole and screened on the filtered path
        screens, header_version = self.plans.screening[(api_key, version)]
        try:
            offset = self._client_at(frame, header_version)
        except HeaderError:
            raise _HookedRequest from None  # the filtered path reports it
        ctx = MessageContext(self.cluster, self.info, api_key, version, cid)
        ctx.frame_bytes = n
        if not _screened(screens, ctx, frame[offset:]):
            self._declined = ctx
            raise _HookedRequest
        return ctx._state

    def _peek_raw(self, frame: bytes | memoryview, version: int, cid: int) -> dict[str, Any] | None:
        """Raw mode: ``_peek_produce``'s decision for a single-topic Produce, from its first bytes (the
        rest is skipped as for any tracked request); what its hooks kept for the answer's. Raises ``HeaderError``
        when the fields before its partitions have not all arrived (``_track_head`` holds it) and
        ``_HookedRequest`` when the hooks must see it whole."""
        n = len(frame)
        size = int.from_bytes(frame[:4], "big")
        try:
            offset = self._client_at(frame, _PRODUCE_HEADER[version])
        except HeaderError:
            if size + 4 == n:
                raise _HookedRequest from None  # whole, and still unreadable: the filtered path reports it
            raise  # more of it to come
        ctx = MessageContext(self.cluster, self.info, PRODUCE, version, cid)
        ctx.frame_bytes = size + 4  # the quotas filter charges a Produce as it is read
        screening = self.plans.screening.get((PRODUCE, version))
        if screening is not None and _screened(screening[0], ctx, memoryview(frame)[offset:]):
            return ctx._state  # every hook's screen forwards it from its first bytes
        try:
            prefix = produce_prefix(frame, offset, version)
        except HeaderError:
            if size + 4 == n:
                raise _HookedRequest from None  # whole, and still unreadable: the filtered path reports it
            raise  # more of it to come
        if prefix.topic_count != 1:
            raise _HookedRequest
        if not self._peek_forwards(prefix, version, ctx):  # the screens' context: a filter knows its counts
            self._declined = ctx  # not peeked again on the filtered path
            raise _HookedRequest
        return ctx._state

    def _peek_forwards(self, prefix: ProducePrefix, version: int, ctx: MessageContext) -> bool:
        """Whether the Produce peek hooks forward a single-topic Produce from its prefix alone: they see
        a request holding its first fields and its one topic, without partitions (raw and filtered path)."""
        peeked = api.API_INFO[PRODUCE].request_class(
            transactional_id=prefix.transactional_id, acks=prefix.acks, timeout_ms=prefix.timeout_ms
        )
        peeked.topic_data = [
            TopicProduceData(name=prefix.topic_name or "", topic_id=prefix.topic_id or _ZERO, partition_data=[])
        ]
        try:
            return peek_forwards(self.chain.peek_hooks(PRODUCE, version), ctx, peeked)
        except Exception:  # the full request will run the hook again and report its failure
            return False

    @staticmethod
    def _decode_quietly(frame: memoryview, api_key: int, version: int) -> Any:
        """The decoded request, or None when kgate cannot read it (it is forwarded all the same)."""
        try:
            header = parse_request_header(frame, api.request_header_version(api_key, version))
            return api.decode_request(api_key, version, frame[header.body_offset :])
        except (HeaderError, api.CodecError):
            return None

    def _observe_sasl_request(self, frame: memoryview, api_key: int, version: int) -> None:
        msg = self._decode_quietly(frame, api_key, version)
        if msg is None:
            return
        if api_key == SASL_HANDSHAKE:
            self.own_sasl().handshake_request(str(msg.mechanism))
        else:
            self.own_sasl().authenticate_request(bytes(msg.auth_bytes))

    def _request(self, frame: memoryview) -> None:
        if self.sasl.raw:
            if self.sasl.is_raw_token(frame):
                self._forward(frame, Exchange(0, RAW_SASL, 0, plan=_RAW_SASL_PLAN))
                return
            self.info.principal = self.sasl.principal  # bare-token exchange just ended
        api_key, version, cid = peek_request(frame)
        plan = self.plans.request(api_key, version)
        checked = None
        screened: MessageContext | None = None
        if self.settings.validate_requests:
            problem, checked = check_request(frame, api_key, version)
            if problem is not None:
                name = api.API_INFO[api_key].name if api_key in api.API_INFO else str(api_key)
                self.close(CloseReason.MALFORMED_REQUEST, f"malformed {name} v{version} request refused: {problem}")
                return
        if plan is _TRACK or plan is _OBSERVE or plan is _REFUSE:
            self._track(frame)
            self.write_up(frame)
            return
        if plan is _PEEK or plan is _SCREEN:
            went, screened = self._undecoded(frame, plan, api_key, version, cid)
            if went:
                return  # decided from its bytes (SCREEN) or its topic alone (PEEK): not decoded
        elif self._declined is not None:
            self._declined = None
        self._go_raw = False
        self.cluster.metrics.count_request(api_key, version)
        try:
            header = parse_request_header(frame, api.request_header_version(api_key, version))
            msg = checked if checked is not None else api.decode_request(api_key, version, frame[header.body_offset :])
        except (HeaderError, api.CodecError) as exc:
            # A filter must see this api key; kgate cannot read this one: never bypass it.
            self.close(
                CloseReason.UNDECODABLE_REQUEST, f"cannot decode {api_key} v{version} request a filter must see: {exc}"
            )
            return
        if header.client_id is not None:
            self.info.client_id = header.client_id
            self._client_raw = None
        # the screens' context when they declined: a filter may know it screened this one (its counts)
        ctx = screened if screened is not None else MessageContext(self.cluster, self.info, api_key, version, cid)
        ctx.frame_bytes = len(frame)
        decision = run_hooks(self.chain.hooks("request", api_key, version), ctx, msg)
        if type(decision) is not Decision:  # run_hooks returned its coroutine (cheaper than isawaitable)
            self._to(Event.SUSPEND)
            suspension = Suspension(frame, msg, ctx, header=header)
            if self._observer is not None:
                suspension.arrived_ns = self._arrived_ns or self.now_ns
            self.out.spawn(decision, suspension)  # type: ignore[arg-type]
            return
        self._apply_request(decision, frame, header, ctx)

    def _undecoded(
        self, frame: memoryview, plan: RequestPlan, api_key: int, version: int, cid: int
    ) -> tuple[bool, MessageContext | None]:
        """A SCREEN or PEEK request on the filtered path: (True, None) when its screens or its peek
        let it go on undecoded; else (False, the context they saw, for the hooks: a filter that
        counted the request there knows it). Raw mode's verdict is not asked for again."""
        declined = None if self._declined is None else self._take_declined(api_key, cid)
        if declined is not None:
            return False, declined
        if plan is _PEEK:
            if self._peek_produce(frame):
                return True, None
            return False, self._take_declined(api_key, cid)
        screened = self._screened_request(frame, api_key, version, cid, self.plans.screening[(api_key, version)][0])
        return screened is None, screened

    def _take_declined(self, api_key: int, cid: int) -> MessageContext | None:
        """The context of the request raw mode's screens (or peek) declined, if this is that request
        (the first the filtered path reads after it): its screens are not asked again."""
        declined, self._declined = self._declined, None
        if declined is None or declined.correlation_id != cid or declined.api_key != api_key:
            return None
        return declined

    def _screened_request(
        self, frame: memoryview, api_key: int, version: int, cid: int, screens: Any
    ) -> MessageContext | None:
        """Forward a request its hooks' screens let through from its bytes (``on_request(screen=)``): None.
        Otherwise the context the screens saw, for the hooks that run on the decoded request."""
        ctx = MessageContext(self.cluster, self.info, api_key, version, cid)
        try:
            header = parse_request_header(frame, api.request_header_version(api_key, version))
        except HeaderError:
            return ctx  # the full path reports it
        if header.client_id is not None:
            self.info.client_id = header.client_id
            self._client_raw = None
        ctx.frame_bytes = len(frame)
        if not _screened(screens, ctx, frame[header.body_offset :]):
            return ctx
        self.cluster.metrics.count_request(api_key, version)
        ex = self._exchange(cid, api_key, version, None, ctx._state)
        if self._observer is not None:
            self._observe_start(ex, frame, len(frame))
        self._forward(frame, ex)
        self._go_raw = True
        return None

    def _queue_behind_suspended(self, frame: memoryview) -> None:
        backlog = self.backlog
        if backlog is None:
            backlog = self.backlog = deque()
        backlog.append(frame)
        if self._observer is not None:
            arrived = self._backlog_arrived
            if arrived is None:
                arrived = self._backlog_arrived = deque()
            arrived.append(self.now_ns)
        self._backlog_bytes += len(frame)
        if self._backlog_full():
            self.out.pause_client("backlog-full")

    def _keep_backlog(self) -> None:
        """The backlog's rest waits for answers, ahead of anything the limit kept already (it was
        read first). A departed client's backlog is not held: nothing would bring it back."""
        backlog = self.backlog
        assert backlog is not None
        kept = self._kept_frames
        backlog.extend(kept or ())
        self._kept_frames = backlog
        self._kept_bytes += self._backlog_bytes
        self.backlog = self._backlog_arrived = None
        self._backlog_bytes = 0
        if not self._inflight_paused:
            self._inflight_paused = True
            self.out.pause_client("inflight-limit")

    def _backlog_full(self) -> bool:
        """Per connection, at most ``max_queued_requests`` requests or one max-size frame's worth wait."""
        s = self.settings
        queued = len(self.backlog) if self.backlog else 0
        return queued >= s.max_queued_requests or self._backlog_bytes >= s.max_frame_bytes

    # -- hook runs that awaited ---------------------------------------------------------------
    def hook_done(self, suspension: Suspension, decision: Decision) -> None:
        """A suspended hook run ended (``settle`` mapped timeouts and exceptions to a verdict)."""
        if self.closed:
            return
        if suspension.exchange is not None:
            self._apply_response(decision, suspension)
            self._flush()
            return
        self._to(Event.HOOK_DONE)
        header = suspension.header
        assert header is not None
        if decision.verdict is Verdict.TIMED_OUT:
            self.cluster.metrics.count_filter(decision.filter, "request", Verdict.TIMED_OUT.value)
            decision = self._request_timed_out(header, suspension.message)  # kgate's answer: counted no further
        self._arrived_ns = suspension.arrived_ns
        try:
            self._apply_request(decision, suspension.frame, header, suspension.ctx)
            if self._behind is not None:  # a reload came while the hook ran: its exchange stays on that chain
                behind, self._behind = self._behind, None
                if not self.closed:
                    self._adopt(behind)
                behind.release()
            arrived = self._backlog_arrived
            pending, limit = self.pending, self._max_inflight
            while self.backlog and not self.suspended and not self.closed:
                if len(pending) >= limit and not self.client_gone:
                    self._keep_backlog()  # the in-flight limit holds for a backlog too
                    break
                frame = self.backlog.popleft()
                self._backlog_bytes -= len(frame)
                self._arrived_ns = arrived.popleft() if arrived else 0
                self._request(frame)
        except HeaderError as exc:
            self._refuse(exc)
            return
        finally:
            self._arrived_ns = 0
        if self.closed:
            return
        if not self._backlog_full():
            self.out.resume_client("backlog-full")
        self._report_held()
        self._finish_if_client_gone()
        self._finish_if_half_closed()  # e.g. an acks=0 Produce a hook let go: nothing to answer

    def _request_timed_out(self, header: RequestHeader, msg: Any) -> Decision:
        """A request hook that took too long: Kafka's REQUEST_TIMED_OUT in the api's error shape."""
        name = api.API_INFO[header.api_key].name
        log.warning(
            "filter timed out after %.1fs on %s v%d from %s: answering REQUEST_TIMED_OUT",
            self.settings.filter_timeout_s,
            name,
            header.api_version,
            self.peer,
        )
        self.cluster.metrics.closed_on_error("filter-timeout")
        resp = error_response(header.api_key, header.api_version, msg, REQUEST_TIMED_OUT)
        if resp is None:
            reason = f"filter timed out on {name}, which has no error response kgate can build"
            return Decision(Verdict.CLOSE, msg, result=Close(reason))
        return Decision(Verdict.RESPOND, msg, result=Respond(resp))

    def _filter_failed(self, api_key: int, version: int, exc: BaseException | None, what: str = "") -> None:
        name = api.API_INFO[api_key].name if api_key in api.API_INFO else str(api_key)
        log.error("filter failed on %s v%d%s for %s", name, version, what, self.peer, exc_info=exc)
        self.close(CloseReason.FILTER_ERROR, f"filter error: {exc}")

    def _apply_request(self, decision: Decision, frame: memoryview, header: RequestHeader, ctx: MessageContext) -> None:
        api_key, version, cid = header.api_key, header.api_version, header.correlation_id
        verdict, msg = decision.verdict, decision.message
        if verdict is not Verdict.FORWARD and decision.filter:
            self.cluster.metrics.count_filter(decision.filter, "request", verdict.value)
        if verdict is Verdict.FAILED:
            self._filter_failed(api_key, version, decision.error)
            return
        acks0 = api_key == PRODUCE and msg.acks == 0
        observed = self._observer is not None
        try:
            if verdict is Verdict.FORWARD:
                original = frame
                if decision.changed:
                    frame = memoryview(make_frame(frame[4 : header.body_offset], msg.encode(version)))
                if acks0:
                    self._note_acks0(cid)
                    self.write_up(frame)
                    if observed:
                        self._observe_acks0(cid, version, original, len(original), msg, ctx._state)
                else:
                    ex = self._exchange(cid, api_key, version, msg, ctx._state)
                    if observed:
                        self._observe_start(ex, original, len(original))
                    self._forward(frame, ex)
            elif verdict is Verdict.RESPOND:
                if acks0:
                    if observed:
                        self._observe_acks0(cid, version, frame, len(frame), msg, ctx._state)
                    return  # the client expects no answer to acks=0
                hv = api.response_header_version(api_key, version)
                ex = Exchange(cid, api_key, version, msg, ctx._state)
                if observed:
                    self._observe_start(ex, frame, len(frame))
                ex.response = response_frame(cid, hv, decision.result.message.encode(version))  # type: ignore[union-attr]
                self.pending.append(ex)
                self._flush()
            elif verdict is Verdict.DROP:
                if not acks0:
                    self.close(
                        CloseReason.FILTER_DROP,
                        f"a filter dropped a {api.API_INFO[api_key].name} request that expects an answer",
                    )
            else:
                self.close(CloseReason.FILTER_CLOSE, f"closed by filter: {decision.result.reason}")  # type: ignore[union-attr]
        except Exception as exc:  # e.g. a filter's answer that does not encode: this connection only
            self._filter_failed(api_key, version, exc)

    def _forward(self, frame: bytes | memoryview, ex: Exchange) -> None:
        self.pending.append(ex)
        self.upstream_waiting.append(ex)
        self.write_up(frame)

    # -- broker to client ---------------------------------------------------------------------
    def receive_broker(self, data: bytes | memoryview) -> None:  # noqa: C901 - per-answer hot path, kept whole
        """Bytes from the broker."""
        self.up_chunks += 1
        if self.closed:
            return  # the client is gone; the broker is only finishing what it had (close_upstream_gently)
        if self._stream_left:
            data = self._continue_stream(data)
            if not data:
                return
        reader = self.upstream_reader
        n = len(data)
        # Size and correlation id read with one Struct call, not ``int.from_bytes(data[:4], "big")``
        # and another for the id (no slice, no keyword): the size alone went 122 -> 54 ns pure,
        # ~1,100 -> ~500 user-space instructions compiled. A negative size fails the test as it
        # should (it never equals n - 4).
        if not reader.buffered and n >= 8:
            size, cid = _SIZE_CID.unpack_from(data)
            if size + 4 == n <= self._max_frame:
                # One whole answer in one read (see receive_client), next in line for the client: it
                # goes straight out, made by _response's own helper (_plain_answer), without
                # _response's checks and _flush's loop (the saving is in docs/performance.md); _flush
                # runs only when something more is ready or a pause may lift.
                waiting = self.upstream_waiting
                if waiting and self._observer is None and not self._client_done:
                    ex = waiting[0]
                    plan = ex.plan
                    pending = self.pending
                    if (
                        (
                            plan is _PASS
                            or plan is _BROKERS_ONLY
                            or plan is _CAP_VERSIONS
                            or plan is _TAIL
                            or plan is _SCREEN_ANSWER
                        )
                        and pending[0] is ex
                        and cid == ex.cid
                    ):
                        waiting.popleft()
                        answer: bytes | memoryview = data
                        if plan is not _PASS:  # PASS (Produce, Fetch...) first: it goes as it came
                            if plan is _BROKERS_ONLY:
                                # _plain_answer's Metadata branch, inline: the one copy kept, as the
                                # call costs the Metadata round trip measurably compiled (docs/performance.md)
                                try:
                                    made: bytes | memoryview | None = self._answers.metadata(
                                        data, ex.api_version, self._map_node, self.cluster.nodes_for_empty_answer
                                    )
                                except (HeaderError, api.CodecError) as exc:
                                    self._undecodable_metadata(ex, exc)
                                    return
                                self._metadata_rewrites.n += 1
                            elif plan is _SCREEN_ANSWER:
                                # a Metadata answer its hooks' screens decide from its bytes (their hooks
                                # run on the decoded answer, in the general path's order, when one declines)
                                made = self._screened_metadata(ex, data)
                                if made is None:
                                    if not self.closed:
                                        self._decoded_response(ex, memoryview(data), screened=False)
                                        self._flush()
                                    return
                            else:
                                made = self._plain_answer(ex, data)
                            if made is None:
                                return  # unreadable: the connection is closed
                            answer = made
                        pending.popleft()
                        self.write_client(answer)
                        if (
                            (pending and pending[0].response is not None)
                            or self._answers_paused
                            or self._inflight_paused
                        ):
                            self._flush()
                        return
                self._response(memoryview(data))
                self._flush()
                return
        if reader.buffered:
            frames = reader.feed(data)
            tail = len(data)
        else:
            frames, tail = reader.split(data)
        for frame in frames:
            if self.closed:
                return
            self._response(frame)
        if reader.error is not None:
            self.close(CloseReason.BAD_UPSTREAM_FRAME, f"bad frame from broker: {reader.error}")
            return
        self._flush()
        if tail < len(data) and not self.closed:
            rest = memoryview(data)[tail:]
            if not self._start_stream(rest):
                reader.feed(rest)

    def _start_stream(self, head: memoryview) -> bool:
        """Cut-through: forward a response's first bytes before the rest has arrived.

        Only for a response whose plan lets it stream (nobody needs to decode it) and that is next
        in line for the client; the rest of its bytes go straight on as they come
        (``_continue_stream``). This keeps a large Fetch response from being held whole in kgate,
        which would add its transfer time.
        """
        if len(head) < 8 or not self.upstream_waiting or self.client_gone:
            return False
        ex = self.upstream_waiting[0]
        if not self.pending or self.pending[0] is not ex:
            return False  # an earlier answer is still being prepared
        size = int.from_bytes(head[:4], "big", signed=True)
        if size < 4 or size > self.settings.max_frame_bytes:
            return False  # the reader reports the bad size
        plan = ex.plan
        if plan is not _RAW_SASL_PLAN and (not plan.streams or int.from_bytes(head[4:8], "big", signed=True) != ex.cid):
            return False
        self.upstream_waiting.popleft()
        self.pending.popleft()
        self._stream_left = size + 4 - len(head)
        if plan is _TAIL or plan is _WATCH_TAIL:
            # walked as it streams: what precedes the node endpoints goes now, the tail is held
            self._tail = response_tail.TailStream(response_tail.spec(ex.api_key, ex.api_version), size + 4)
            sent = self._tail_piece(head)
            if self.closed:
                return True
        else:
            self.write_client(head)
            sent = head
        if self._observer is not None and ex.api_key != RAW_SASL:
            # reported once its last byte went: observers get every piece (not copied)
            ex.up_ns = now = self.now_ns  # its first bytes arrived and went on at once
            self._streamed = (ex, [sent], size + 4, now)
        return True

    def _continue_stream(self, data: bytes | memoryview) -> bytes | memoryview:
        """Forward the next bytes of a streamed response; return what follows it in ``data``."""
        n = self._stream_left
        piece: bytes | memoryview
        rest: bytes | memoryview
        if len(data) <= n:
            self._stream_left = n - len(data)
            piece, rest = data, b""
        else:
            view = memoryview(data)
            piece, rest = view[:n], view[n:]
            self._stream_left = 0
        if self._tail is None:
            if not self.client_gone:
                self.write_client(piece)
        else:
            piece = self._tail_piece(piece)
            if self.closed:
                return b""
        if self._streamed is not None:
            self._streamed[1].append(piece)
        if self._stream_left == 0:
            if self._streamed is not None:
                self._end_stream()
            self._flush()  # answers that queued behind the streamed one
        return rest

    def _response(self, frame: memoryview) -> None:
        head = self.upstream_waiting[0] if self.upstream_waiting else None
        if head is None or head.plan is not _RAW_SASL_PLAN:
            try:
                got = peek_correlation_id(frame)
            except HeaderError as exc:
                self.close(CloseReason.BAD_UPSTREAM_FRAME, f"malformed response from broker: {exc}")
                return
            if (head is None or got != head.cid) and self._acks0 is not None and got in self._acks0:
                # Some brokers (Tansu) answer acks=0 Produce; the client expects nothing: drop it.
                log.debug("dropping the broker's answer to acks=0 Produce %d from %s", got, self.peer)
                return
            if head is None:
                self.close(CloseReason.UNEXPECTED_RESPONSE, "broker sent a response nobody asked for")
                return
            if got != head.cid:
                self.close(CloseReason.OUT_OF_ORDER, f"broker answered correlation id {got}, expected {head.cid}")
                return
        ex = self.upstream_waiting.popleft()
        if self._observer is not None:
            ex.up_ns = self.now_ns  # the upstream latency ends here (proxy/control/exchange_metrics.py)
        plan = ex.plan
        if plan is _PASS or plan is _RAW_SASL_PLAN:
            ex.response = frame
        elif plan is _WATCH_FETCH:
            if len(frame) <= OBSERVE_FETCH_MAX and may_carry_unknown_topic(frame):
                self._decoded_response(ex, frame)
            else:
                ex.response = frame
        elif plan is _BROKERS_ONLY or plan is _CAP_VERSIONS or plan is _TAIL:
            ex.response = self._plain_answer(ex, frame)
        elif plan is _WATCH_TAIL:
            if len(frame) <= OBSERVE_FETCH_MAX and may_carry_unknown_topic(frame):
                self._decoded_response(ex, frame)  # decoded whole: its endpoints are rewritten there
            else:
                ex.response = self._tail_whole(ex, frame)
        else:
            self._decoded_response(ex, frame)

    def _tail_whole(self, ex: Exchange, frame: memoryview) -> bytes | memoryview | None:
        """A whole answer with node endpoints in its tail, rewritten; None: unreadable, connection closed."""
        try:
            new = response_tail.spec(ex.api_key, ex.api_version).rewrite_frame(frame, self._map_node)
        except WalkError as exc:
            self._unwalkable(ex.api_key, ex.api_version, exc)
            return None
        if new is not frame and not response_tail.dropped_empty_hints(frame):
            self.cluster.metrics.count_rewrite(ex.api_key)
        return new

    def _tail_piece(self, piece: bytes | memoryview) -> bytes | memoryview:
        """Forward the part of a walked response's piece before its tail; at its end, the rewritten tail.

        Returns what went to the client (for observers). A piece that does not walk closes the
        connection: the client has a cut frame, and no address reached it.
        """
        ts = self._tail
        assert ts is not None
        try:
            sent = ts.piece(piece)
            end = ts.finish(self._map_node) if self._stream_left == 0 else b""
        except WalkError as exc:
            self._tail = None
            self._stream_left = 0
            api_key, version = ts.spec.api_key, ts.spec.version
            self._unwalkable(api_key, version, exc)
            return b""
        if not self.client_gone:
            if sent:
                self.write_client(sent)
            if end:
                self.write_client(end)
        if self._stream_left == 0:
            self._tail = None
            if ts.rewritten:
                self.cluster.metrics.count_rewrite(ts.spec.api_key)
            return b"".join((sent, end)) if self._streamed is not None else sent
        return sent

    def _unwalkable(self, api_key: int, version: int, exc: Exception) -> None:
        name = api.API_INFO[api_key].name
        detail = f"cannot walk {name} v{version} response to its node endpoints: {exc}"
        self.close(CloseReason.UNDECODABLE_RESPONSE, detail)

    def _plain_answer(self, ex: Exchange, frame: bytes | memoryview) -> bytes | memoryview | None:
        """The answer for a plan that needs no decoding beyond addresses and versions: BROKERS_ONLY
        (the broker list rewritten, the rest copied: proxy/sansio/metadata_brokers.py), CAP_VERSIONS, TAIL,
        PASS (as it came). None: unreadable, the connection is closed.

        The one implementation for both ways an answer arrives: whole in one read, next in line
        (``receive_broker``'s fast path) and any other (``_response``).
        """
        plan = ex.plan
        if plan is _BROKERS_ONLY:
            try:
                answer = self._answers.metadata(
                    frame, ex.api_version, self._map_node, self.cluster.nodes_for_empty_answer
                )
            except (HeaderError, api.CodecError) as exc:
                self._undecodable_metadata(ex, exc)
                return None
            self._metadata_rewrites.n += 1
            return answer
        if plan is _CAP_VERSIONS:
            return self._api_versions(frame, ex.api_version)
        if plan is _TAIL:
            return self._tail_whole(ex, frame if type(frame) is memoryview else memoryview(frame))
        return frame

    def _undecodable_metadata(self, ex: Exchange, exc: Exception) -> None:
        self.close(CloseReason.UNDECODABLE_RESPONSE, f"cannot decode Metadata v{ex.api_version} response: {exc}")

    def _api_versions(self, frame: bytes | memoryview, version: int) -> bytes | memoryview | None:
        """The capped ApiVersions answer; None (connection closed) if it cannot be read."""
        try:
            new = self._answers.api_versions(frame, version)
        except rewrite.RewriteError as exc:
            # uncapped ranges could let a client send what a filter must see but kgate cannot read
            self.close(CloseReason.UNDECODABLE_RESPONSE, str(exc))
            return None
        if new is None:
            return frame
        self._api_versions_rewrites.n += 1
        return new

    def _decoded_response(self, ex: Exchange, frame: memoryview, screened: bool = True) -> None:
        """Decode an answer: addresses rewritten, names learnt, response hooks run. A SCREEN answer
        (Metadata) is first offered to its hooks' screens, unless ``screened`` is False (they declined)."""
        api_key, version = ex.api_key, ex.api_version
        if screened and ex.plan is _SCREEN_ANSWER:
            answer = self._screened_metadata(ex, frame)
            if answer is not None:
                ex.response = answer
                return
            if self.closed:
                return
        chain = self.chain if self._old is None else self._chain_of(ex)  # the chain that saw its request
        hooks = chain.hooks("response", api_key, version, bool(ex.state)) if chain.has_response_hooks else ()
        must_rewrite = rewrite.needs_rewrite(api_key, version)
        try:
            offset = response_body_offset(frame, api.response_header_version(api_key, version))
            msg = api.decode_response(api_key, version, frame[offset:])
        except (HeaderError, api.CodecError) as exc:
            if must_rewrite or hooks:
                self.close(
                    CloseReason.UNDECODABLE_RESPONSE,
                    f"cannot decode {api_key} v{version} response kgate must inspect: {exc}",
                )
            else:
                ex.response = frame  # only watched for topic names: pass it on untouched
            return
        changed = must_rewrite and rewrite.rewrite_message(
            msg, api_key, version, self._map_node, self.cluster.nodes_for_empty_answer
        )
        if changed:
            self.cluster.metrics.count_rewrite(api_key)
        self.cluster.observe_response(api_key, version, msg, ex.request)
        if api_key == SASL_HANDSHAKE and version == 0 and getattr(msg, "error_code", None) == ErrorCode.NONE:
            self.own_sasl().handshake_v0_accepted()
        elif api_key == SASL_AUTHENTICATE:
            self.own_sasl().authenticate_response(getattr(msg, "error_code", ErrorCode.UNKNOWN_SERVER_ERROR))
            self.info.principal = self.sasl.principal
        if not hooks:
            ex.response = self._rewritten(ex, frame, offset, msg) if changed else self._as_sent(ex, frame)
            return
        ctx = MessageContext(self.cluster, self.info, api_key, version, ex.cid, ex.request, ex.state)
        decision = run_hooks(hooks, ctx, msg)
        suspension = Suspension(frame, msg, ctx, exchange=ex, offset=offset, changed=changed)
        if type(decision) is not Decision:  # run_hooks returned its coroutine (cheaper than isawaitable)
            self.out.spawn(decision, suspension)  # type: ignore[arg-type]
            if self._answers_waiting() > self._max_queued and not self._answers_paused:
                self._answers_paused = True
                self.out.pause_broker("answers-blocked")
            return
        self._apply_response(decision, suspension)

    def _screened_metadata(self, ex: Exchange, frame: bytes | memoryview) -> bytes | memoryview | None:
        """A Metadata answer its hooks' screens decide from its bytes (``on_response(screen=)``): topic
        names learnt from a walk of its topics, the screens' body sent with only the broker list
        rewritten (the answer memo's path); the answer. None: decode it and run the hooks, or (when
        ``closed``) it could not be read."""
        version = ex.api_version
        if self._old is None:
            screens = self.plans.answer_screening.get((version, bool(ex.state)))
        else:  # the chain that saw its request
            screens = self._chain_of(ex).screens("response", METADATA, version, bool(ex.state))
        if screens is None:
            return None
        try:
            # response header v0; v1 from v9, nearly always with no tagged fields
            offset = 8 if version < 9 else 9 if frame[8] == 0 else skip_tagged_fields(frame, 8)
            body = frame[offset:]
            walked = metadata_answer(body, version)
        except (HeaderError, api.CodecError, IndexError):
            return None  # the full path reports it
        ctx = MessageContext(self.cluster, self.info, METADATA, version, ex.cid, ex.request, ex.state)
        new: bytes | None = None  # the body a screen returned, if any did
        try:
            for screen in screens:
                result = screen(ctx, body if new is None else new)
                if result is FORWARD:
                    continue
                if type(result) is not Forward or not isinstance(result.message, bytes):
                    return None
                new = result.message
        except Exception:  # the hook will run on the decoded answer and report its failure
            return None
        self.cluster.observe_response(METADATA, version, walked, ex.request)
        answer: bytes | memoryview = frame if new is None else rewrite.reframe(frame, offset, new)  # type: ignore[arg-type]
        try:
            answer = self._answers.metadata(answer, version, self._map_node, self.cluster.nodes_for_empty_answer)
        except (HeaderError, api.CodecError) as exc:
            self._undecodable_metadata(ex, exc)
            return None
        self._metadata_rewrites.n += 1
        return answer

    def _apply_response(self, decision: Decision, s: Suspension) -> None:
        ex = s.exchange
        assert ex is not None
        verdict = decision.verdict
        name = api.API_INFO[ex.api_key].name
        if verdict is not Verdict.FORWARD:
            self.cluster.metrics.count_filter(decision.filter or "unknown", "response", verdict.value)
        if verdict is Verdict.FAILED:
            self._filter_failed(ex.api_key, ex.api_version, decision.error, " response")
            return
        if verdict is Verdict.TIMED_OUT:
            self.close(CloseReason.FILTER_CLOSE, f"filter timed out on a {name} response")
            return
        if verdict is Verdict.CLOSE:
            self.close(CloseReason.FILTER_CLOSE, f"closed by filter: {decision.result.reason}")  # type: ignore[union-attr]
            return
        if verdict is not Verdict.FORWARD:
            self.close(
                CloseReason.FILTER_MISUSE,
                f"a response hook returned {decision.result!r}; only forward or close apply to responses",
            )
            return
        try:
            if decision.changed:
                # A hook's changes must not undo the address rewrite, so the addresses are mapped
                # again, but only to what kgate already routes: the message was rewritten once, its
                # addresses are kgate's own now, and learning from them would route the node to
                # kgate itself.
                msg = decision.message
                cluster = self.cluster
                rewrite.rewrite_message(
                    msg, ex.api_key, ex.api_version, cluster.mapped_address, cluster.nodes_for_empty_answer
                )
                ex.response = rewrite.reframe(s.frame, s.offset, msg.encode(ex.api_version))
            elif s.changed:
                ex.response = self._rewritten(ex, s.frame, s.offset, decision.message)
            else:
                ex.response = self._as_sent(ex, s.frame)
        except Exception as exc:  # a hook's message that does not encode: this connection only
            self._filter_failed(ex.api_key, ex.api_version, exc, " response")

    def _as_sent(self, ex: Exchange, frame: memoryview) -> bytes | memoryview | None:
        """A decoded answer nothing changed, as the broker sent it; but an empty node-endpoint list
        is left out, as on the streamed path (proxy/sansio/response_tail.py), which decoding cannot see."""
        if response_tail.has_tail(ex.api_key, ex.api_version):
            return self._tail_whole(ex, frame)
        return frame

    def _rewritten(self, ex: Exchange, frame: memoryview, offset: int, msg: Any) -> bytes | memoryview:
        """The answer with only its addresses rewritten (``msg`` is the decoded, rewritten message).

        Metadata copies its topics as bytes and rewrites the broker list in place, instead of
        encoding every topic again (what a policy filter that reads Metadata paid per answer).
        """
        if ex.api_key == METADATA:
            try:
                cluster = self.cluster
                return rewrite_brokers(
                    frame, offset, ex.api_version, cluster.mapped_address, cluster.nodes_for_empty_answer
                )
            except HeaderError:
                pass  # decoded fine, so encoding it works too
        return rewrite.reframe(frame, offset, msg.encode(ex.api_version))

    def _flush(self) -> None:
        """Write every answer that is ready, in request order."""
        pending = self.pending
        if self.closed or self.client_gone or self._stream_left:
            if self.client_gone:  # answers to a client that left: nobody to give them to
                while pending and pending[0].response is not None:
                    gone = pending.popleft()
                    if self._observer is not None and gone.api_key != RAW_SASL:
                        self._observer(gone, self.info, None, None, self.now_ns)
            return  # while a response streams through, nothing else may be written
        send = self.write_client
        if self._observer is None:
            while pending and pending[0].response is not None:
                send(pending.popleft().response)  # type: ignore[arg-type]
        else:
            self._flush_observed(pending, send)
        if self._answers_paused and self._answers_waiting() <= self._max_queued:
            self._answers_paused = False
            self.out.resume_broker("answers-blocked")
        if self._inflight_paused and len(pending) < self._max_inflight:
            self._inflight_paused = False
            if self._kept is not None or self._kept_frames is not None:
                self._replay_kept()
                if self._inflight_paused or self.closed:
                    return  # stopped again at the limit: reading stays paused
            self.out.resume_client("inflight-limit")
        if self.half_closed:
            self._finish_if_half_closed()  # the last answer to a client that half-closed went

    def _answers_waiting(self) -> int:
        """Answers that arrived (or are being prepared) but cannot be delivered yet.

        Requests the broker has not answered do not count: pausing the broker for them would
        stop the very answers that drain the queue.
        """
        return len(self.pending) - len(self.upstream_waiting)

    # -- exchange observation (filters/exchanges.py): only called while an observer is installed
    def _observe_start(self, ex: Exchange, frame: memoryview | bytes, size: int, acks0: bool = False) -> None:
        """Stamp an exchange with what its observer reads: when, which bytes, how many.

        A request that has not wholly arrived (a large Produce streaming through) gets the list of
        the pieces it is forwarded in, completed by ``_request_piece`` (the buffers themselves,
        not copies).
        """
        ex.sent_ns = now = self.now_ns
        ex.t0_ns = self._arrived_ns or now  # a request that waited on a hook (or behind one): when it was read
        ex.up_ns = 0
        ex.req_bytes = size
        if len(frame) < size:
            pieces: list[bytes | memoryview] = [frame]
            ex.req = pieces
            self._req_observed = (ex, pieces, acks0)
        else:
            ex.req = frame

    def _request_piece(self, piece: bytes | memoryview, left: int) -> None:
        """The next piece of a request that streams through; ``left``: bytes of it still to come."""
        assert self._req_observed is not None
        ex, pieces, acks0 = self._req_observed
        pieces.append(piece)
        if left == 0:
            self._req_observed = None
            if acks0:
                self._observer(ex, self.info, None, None, ex.t0_ns)  # type: ignore[misc]
            else:
                ex.sent_ns = self.now_ns  # the broker can answer only once it has it all

    def _note_acks0(self, cid: int) -> None:
        """Remember an acks=0 Produce's correlation id: a broker that answers it anyway is not believed."""
        acks0 = self._acks0
        if acks0 is None:
            acks0 = self._acks0 = deque(maxlen=256)
        acks0.append(cid)

    def _observe_acks0(
        self,
        cid: int,
        version: int,
        frame: memoryview | bytes,
        size: int,
        request: Any = None,
        state: dict[str, Any] | None = None,
    ) -> None:
        """An acks=0 Produce is an exchange without an answer: reported as soon as it went."""
        ex = Exchange(cid, PRODUCE, version, request, state)
        self._observe_start(ex, frame, size, acks0=True)
        if self._req_observed is None:  # whole already; else reported once its last piece went
            self._observer(ex, self.info, None, None, ex.t0_ns)  # type: ignore[misc]

    def _flush_observed(self, pending: deque[Exchange], send: Any) -> None:
        """``_flush``'s loop, reporting each answer as it is handed to the client."""
        observe = self._observer
        assert observe is not None
        info = self.info
        while pending and pending[0].response is not None:
            ex = pending.popleft()
            answer = ex.response
            send(answer)
            if ex.api_key != RAW_SASL:
                observe(ex, info, answer, len(answer), self.now_ns)  # type: ignore[arg-type]

    def _end_stream(self) -> None:
        """A streamed answer's last byte went (or the connection closed first: pieces missing)."""
        assert self._streamed is not None
        assert self._observer is not None
        ex, pieces, size, end_ns = self._streamed
        self._streamed = None
        self._observer(ex, self.info, pieces, size, end_ns)

    def _unanswered(self) -> None:
        """The connection closes: exchanges still owed an answer end without one."""
        observe = self._observer
        assert observe is not None
        if self._streamed is not None:
            self._end_stream()
        if self._req_observed is not None and self._req_observed[2]:  # an acks=0 Produce cut short
            ex = self._req_observed[0]
            self._req_observed = None
            observe(ex, self.info, None, None, ex.t0_ns)
        now = self.now_ns
        for ex in self.pending:
            if ex.api_key != RAW_SASL and ex.response is None:
                observe(ex, self.info, None, None, now)
