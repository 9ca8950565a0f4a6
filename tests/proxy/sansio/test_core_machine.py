"""The connection core under hypothesis state machines: no sockets, no event loop.

A model client pipelines Metadata requests (hooked by a test filter: some suspend until the test
settles them, as forward, kgate's own answer, or a timeout) and Produce requests (acks=1 and
acks=0), fed in arbitrary chunks; a model broker answers in order, also in arbitrary chunks;
the client may leave and the broker may close at any point. After every step the machine checks
what a client and a broker could observe:

- the broker has received exactly the forwarded requests, in the client's order, up to the first
  request still held by a suspended hook (nothing overtakes a suspended request);
- the client has received exactly the answers that are ready, in request order, and none for
  acks=0 Produce;
- the per-connection limits hold (backlog and in-flight pause reading from the client);
- a client that leaves while a request is suspended loses nothing it sent: the suspended request
  and those queued behind it still go upstream, then the connection closes;
- a client that half-closes (its FIN, perhaps in the middle of a request) still gets every answer
  to every whole request it sent, in order, and the connection closes once it owes nothing; the
  request the FIN cut short never reaches the broker whole;
- after a close, nothing more is sent either way.

The machine runs twice: with the filter (filter mode, frames decoded where hooked) and without
any filter (raw mode: bytes forwarded as they arrive, bookkeeping from headers only).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from support.core_driver import RecordingActions, make_core

from kgate.api import ApiKey, ErrorCode, Filter, FilterContext, Respond, error_response, on_request, on_response
from kgate.codec import api
from kgate.codec.framing import FrameReader
from kgate.codec.generated.data import metadata as mm
from kgate.codec.generated.data import produce as pm
from kgate.codec.headers import request_frame, response_frame
from kgate.filters.chain import Decision, FilterChain, Verdict
from kgate.proxy.sansio.chain_handover import RetiredChain
from kgate.proxy.sansio.close_reason import CloseReason
from kgate.proxy.sansio.core import ConnectionCore
from kgate.proxy.sansio.states import State

# Produce v12: its answers end with KIP-951 node endpoints, which stream through the tail walker
METADATA_V, PRODUCE_V = 12, 12
BROKER_HOST = "broker-7.internal.example"  # in every Produce answer; must never reach the client
MAX_QUEUED, MAX_INFLIGHT = 3, 6


class Lookup:
    """An awaitable that never runs here: the test settles the hook run itself (``hook_done``)."""

    def __await__(self) -> Any:
        yield None


class Suspender(Filter):
    """Suspends Metadata requests that name a topic starting with "wait" (a lookup, say)."""

    name = "test-suspender"

    @on_request(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, request: Any) -> Any:
        if any((t.name or "").startswith("wait") for t in request.topics or ()):
            return Lookup()  # an awaitable: the core suspends this message
        return None


@dataclass
class Sent:
    cid: int
    kind: str  # "metadata", "produce", "produce-acks0"
    frame: bytes
    suspends: bool
    fate: str = "undecided"  # "forward" | "kgate" (kgate answered) | "undecided" (suspended, unsettled)
    answered: bool = False  # the broker's answer has been fed whole
    cut: bool = False  # the client half-closed before sending all of it


def metadata_request(cid: int, suspends: bool) -> bytes:
    req = mm.MetadataRequest(topics=[mm.MetadataRequestTopic(name=f"{'wait' if suspends else 'go'}-{cid}")])
    hv = api.request_header_version(int(ApiKey.METADATA), METADATA_V)
    return request_frame(int(ApiKey.METADATA), METADATA_V, cid, "m", hv, req.encode(METADATA_V))


def produce_request(cid: int, acks: int) -> bytes:
    req = pm.ProduceRequest(acks=acks, timeout_ms=1000, transactional_id=None)
    req.topic_data = [pm.TopicProduceData(name="t", partition_data=[pm.PartitionProduceData(index=0, records=None)])]
    hv = api.request_header_version(int(ApiKey.PRODUCE), PRODUCE_V)
    return request_frame(int(ApiKey.PRODUCE), PRODUCE_V, cid, "m", hv, req.encode(PRODUCE_V))


def broker_answer(s: Sent) -> bytes:
    key, version = (int(ApiKey.METADATA), METADATA_V) if s.kind == "metadata" else (int(ApiKey.PRODUCE), PRODUCE_V)
    msg = api.API_INFO[key].response_class()
    if key == int(ApiKey.PRODUCE):
        msg.node_endpoints = [pm.NodeEndpoint(node_id=7, host=BROKER_HOST, port=9092)]
    body = msg.encode(version)
    return response_frame(s.cid, api.response_header_version(key, version), body)


def cids(data: bytes | bytearray, first: int) -> list[int]:
    """Correlation ids of the whole frames in ``data`` (requests: ``first``=8, responses: 4)."""
    frames, _end = FrameReader(1 << 30).split(bytes(data))
    return [int.from_bytes(f[first : first + 4], "big", signed=True) for f in frames]


class CoreMachine(RuleBasedStateMachine):
    filters: tuple[Filter, ...] = (Suspender({}),)

    def __init__(self) -> None:
        super().__init__()
        self.core: ConnectionCore
        self.out: RecordingActions
        self.core, self.out = make_core(
            self.filters, max_queued_requests=MAX_QUEUED, max_inflight_requests=MAX_INFLIGHT
        )
        self.core.cluster.node_ports[7] = 20007  # node 7's listener is bound (no socket in this test)
        self.sent: list[Sent] = []
        self.client_bytes = b""  # sent by the model client, not yet fed to the core
        self.broker_bytes = b""  # answered by the model broker, not yet fed to the core
        self.next_cid = 1
        self.client_left = False
        self.half_closed = False
        self.broker_closed = False
        self.client_bytes_at_leave = 0
        self.fed = 0  # client bytes fed to the core
        self.fed_broker = b""  # broker bytes fed to the core
        self.queued_answers: set[int] = set()

    # -- the model client ----------------------------------------------------------------------
    @precondition(
        lambda self: not self.client_left and not self.half_closed and not self.core.closed and len(self.sent) < 40
    )
    @rule(kind=st.sampled_from(["metadata", "metadata-wait", "metadata-wait", "produce", "produce-acks0"]))
    def client_writes(self, kind: str) -> None:
        cid = self.next_cid
        self.next_cid += 1
        suspends = kind == "metadata-wait" and bool(self.filters)
        if kind.startswith("metadata"):
            frame = metadata_request(cid, kind == "metadata-wait")
            kind = "metadata"
        else:
            frame = produce_request(cid, 0 if kind == "produce-acks0" else 1)
        s = Sent(cid, kind, frame, suspends, fate="undecided" if suspends else "forward")
        self.sent.append(s)
        self.client_bytes += frame

    @precondition(lambda self: self.client_bytes and not self.client_left and not self.half_closed)
    @rule(cut=st.integers(min_value=1, max_value=400))
    def client_bytes_arrive(self, cut: int) -> None:
        data, self.client_bytes = self.client_bytes[:cut], self.client_bytes[cut:]
        self.fed += len(data)
        self.core.receive_client(data)
        if not self.core.closed and len(self.core.pending) >= MAX_INFLIGHT:
            assert "inflight-limit" in self.out.client_paused

    @precondition(lambda self: not self.client_left and not self.core.closed and len(self.sent) >= 2)
    @rule(now=st.integers(0, 3))
    def client_leaves(self, now: int) -> None:
        if now:
            return  # an ending: rarer than the other steps, so the runs get somewhere first
        self.client_left = True
        self.client_bytes_at_leave = len(self.out.client.data)
        # what the client sent before leaving but the socket had not delivered is lost with it
        self.client_bytes = b""
        suspended = self.core.suspended
        event(f"client leaves: suspended={suspended}, backlog={bool(self.core.backlog)}")
        self.core.client_closed()
        if suspended:
            assert not self.core.closed, "a suspended request keeps the connection to finish it"
        # requests the in-flight limit kept go when the client leaves; one a hook suspends keeps the
        # connection too, and otherwise it ends
        assert self.core.closed != self.core.suspended, "the connection ends unless a request is suspended"

    @precondition(lambda self: not self.client_left and not self.half_closed and not self.core.closed and self.sent)
    @rule(
        now=st.integers(0, 2),
        cut_kind=st.sampled_from(["", "", "metadata", "metadata-wait", "produce", "produce-acks0"]),
        cut_at=st.integers(min_value=1, max_value=10_000),
    )
    def client_half_closes(self, now: int, cut_kind: str, cut_at: int) -> None:
        """The client sends its FIN (``shutdown(SHUT_WR)``): everything it wrote arrives first, perhaps
        ending with the start of a request it never finishes (``cut_kind``)."""
        if now:
            return  # an ending: rarer than the other steps
        if self.client_bytes:
            data, self.client_bytes = self.client_bytes, b""
            self.fed += len(data)
            self.core.receive_client(data)
        if cut_kind and not self.core.closed:
            cid = self.next_cid
            self.next_cid += 1
            if cut_kind.startswith("metadata"):
                frame, kind = metadata_request(cid, cut_kind == "metadata-wait"), "metadata"
            else:
                frame, kind = produce_request(cid, 0 if cut_kind == "produce-acks0" else 1), cut_kind
            part = frame[: 1 + cut_at % (len(frame) - 1)]
            self.sent.append(Sent(cid, kind, frame, False, fate="cut", cut=True))
            self.fed += len(part)
            self.core.receive_client(part)
        self.half_closed = True
        event(f"client half-closes: cut={cut_kind or 'no'}, suspended={self.core.suspended}")
        self.core.client_eof()
        if not self.core.closed:
            assert self.core.half_closed
            assert self.core.suspended or self.core.pending or self.core._stream_left, "owes nothing, yet open"

    # -- hooks -----------------------------------------------------------------------------------
    @precondition(lambda self: self.out.spawned and not self.core.closed)
    @rule(how=st.sampled_from(["forward", "respond", "timeout"]))
    def hook_settles(self, how: str) -> None:
        event(f"hook settles ({how}) after the client left: {self.client_left}")
        suspension = self.out.spawned.pop(0)
        cid = suspension.ctx.correlation_id
        s = next(x for x in self.sent if x.cid == cid)
        msg = suspension.message
        if how == "forward":
            decision = Decision(Verdict.FORWARD, msg)
            s.fate = "forward"
        elif how == "respond":
            answer = error_response(int(ApiKey.METADATA), METADATA_V, msg, int(ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            decision = Decision(Verdict.RESPOND, msg, result=Respond(answer))
            s.fate = "kgate"
        else:
            decision = Decision(Verdict.TIMED_OUT, msg)  # the core answers REQUEST_TIMED_OUT
            s.fate = "kgate"
        self.core.hook_done(suspension, decision)

    # -- the model broker ------------------------------------------------------------------------
    @precondition(lambda self: not self.broker_closed and not self.core.closed)
    @rule()
    def broker_answers_next(self) -> None:
        """The broker answers the oldest request it has received and not answered (acks=0: never)."""
        received = set(cids(self.out.upstream.data, 8))
        for s in self.sent:
            if s.cid in received and s.cid not in self.queued_answers and s.kind != "produce-acks0":
                self.queued_answers.add(s.cid)
                self.broker_bytes += broker_answer(s)
                return

    @precondition(lambda self: self.broker_bytes and not self.core.closed)
    @rule(cut=st.integers(min_value=1, max_value=300))
    def broker_bytes_arrive(self, cut: int) -> None:
        data, self.broker_bytes = self.broker_bytes[:cut], self.broker_bytes[cut:]
        self.core.receive_broker(data)
        # every answer whose bytes have now all been fed is answered
        self.fed_broker += data
        fed_whole = set(cids(self.fed_broker, 4))
        for s in self.sent:
            if s.cid in fed_whole:
                s.answered = True

    @precondition(lambda self: not self.core.closed and len(self.sent) >= 2)
    @rule(now=st.integers(0, 5))
    def broker_closes(self, now: int) -> None:
        if now:
            return
        self.broker_closed = True
        self.core.close(CloseReason.BROKER_CLOSED, "broker closed the connection")

    @precondition(lambda self: self.core.closed)
    @rule(data=st.binary(min_size=1, max_size=64))
    def late_events_change_nothing(self, data: bytes) -> None:
        """After a close, bytes from either side and hook runs ending are ignored."""
        before = (bytes(self.out.client.data), bytes(self.out.upstream.data), self.out.close_reason)
        self.core.receive_client(data)
        self.core.receive_broker(data)
        for suspension in self.out.spawned:
            self.core.hook_done(suspension, Decision(Verdict.FORWARD, suspension.message))
        self.core.client_eof()
        self.core.client_closed()
        self.core.close(CloseReason.SHUTDOWN)
        assert (bytes(self.out.client.data), bytes(self.out.upstream.data), self.out.close_reason) == before

    # -- what peers can observe ------------------------------------------------------------------
    def _expected_upstream(self) -> list[int]:
        expected = []
        pos = 0
        for s in self.sent:
            pos += len(s.frame)
            if pos > self.fed:
                break  # not wholly delivered to kgate yet
            if s.fate == "undecided":
                break  # nothing overtakes a suspended request
            if s.fate == "forward":
                expected.append(s.cid)
        return expected

    @invariant()
    def broker_sees_requests_in_order(self) -> None:
        got = cids(self.out.upstream.data, 8)
        expected = self._expected_upstream()
        if (self.client_left or self.half_closed) and self.out.close_reason is CloseReason.CLIENT_LEFT:
            assert got == expected, "a departed client's requests were lost"
        elif self.half_closed and not self.client_left and not self.core.closed:
            assert got == expected, "a request read before the client's FIN waits"
        elif self.core.closed or self.client_left:
            assert got == expected[: len(got)]  # a close may stop the rest; a departed client's are on the way
        else:
            assert got == expected[: len(got)]
            if len(got) < len(expected):  # the in-flight limit keeps the rest, within a read too
                # (an answer streaming to the client frees its place once it has gone whole)
                assert len(self.core.pending) >= MAX_INFLIGHT or self.core._stream_left, (got, expected)
                assert "inflight-limit" in self.out.client_paused

    @invariant()
    def client_gets_answers_in_order(self) -> None:
        got = cids(self.out.client.data, 4)
        owed = [s for s in self.sent if s.kind != "produce-acks0" and not s.cut]
        expected = []
        for s in owed:
            if s.fate == "kgate" or (s.fate == "forward" and s.answered):
                expected.append(s.cid)
            else:
                break
        if self.client_left:
            assert len(self.out.client.data) == self.client_bytes_at_leave, "wrote to a client that left"
            assert got == expected[: len(got)]
        elif self.core.closed:
            assert got == expected[: len(got)]
        else:
            assert got == expected
        acks0 = {s.cid for s in self.sent if s.kind == "produce-acks0"}
        assert not acks0 & set(got), "answered an acks=0 Produce"
        assert BROKER_HOST.encode() not in self.out.client.data, "a broker address reached the client"

    @invariant()
    def limits_hold(self) -> None:
        if self.core.closed:
            return
        assert len(self.core.backlog or ()) <= MAX_QUEUED + 40  # reading pauses; frames of one read may still queue
        if len(self.core.backlog or ()) >= MAX_QUEUED:
            assert "backlog-full" in self.out.client_paused
        if not self.core.client_gone and not self.core.half_closed:  # exact, within a read and after a suspension too
            assert len(self.core.pending) <= MAX_INFLIGHT

    @invariant()
    def state_is_consistent(self) -> None:
        core = self.core
        assert core.closed == (core.state is State.CLOSED)
        assert core.closed == (self.out.close_reason is not None)
        if core.suspended:
            assert self.out.spawned, "suspended without a hook run to wait for"
        if self.client_left and not core.suspended and not core.backlog:
            assert core.closed, "a departed client's connection lingers"
        if (self.client_left or self.half_closed) and core.closed and not self.broker_closed:
            assert self.out.close_reason is CloseReason.CLIENT_LEFT
        if self.half_closed and not self.client_left and not core.closed:
            assert core.half_closed
            assert core.suspended or core.pending or core._stream_left, "a half-closed connection owing nothing lingers"
            # what the model still owes its client: a hook not settled, an answer not fed whole (the
            # request the FIN cut short is owed nothing: the broker never had it whole)
            owed = [
                s
                for s in self.sent
                if not s.cut
                and s.kind != "produce-acks0"
                and (s.fate == "undecided" or (s.fate == "forward" and not s.answered))
            ]
            assert owed, "every answer went to the half-closed client, yet the connection is open"
            assert not core.mid_frame, "a request the FIN cut short is still held"


class RawCoreMachine(CoreMachine):
    """No filter hooks requests: raw mode (bytes forwarded as they arrive)."""

    filters = ()


class TracingSuspender(Suspender):
    """The Suspender, remembering the requests its hook saw and the answers its response hook saw."""

    name = "test-tracing-suspender"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.requests: set[int] = set()
        self.answers: list[int] = []

    @on_request(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, request: Any) -> Any:
        self.requests.add(ctx.correlation_id)
        return Suspender.metadata(self, ctx, request)

    @on_response(ApiKey.METADATA)
    def answer(self, ctx: FilterContext, response: Any) -> Any:
        self.answers.append(ctx.correlation_id)
        return None


class ReloadingCoreMachine(CoreMachine):
    """The same peers, and reloads at any point (proxy/sansio/chain_handover.py): each installs a new chain
    of the same behaviour, so every invariant above still holds, and these too: an answer runs the
    response hooks of the chain that saw its request, each replaced chain is held exactly by its
    exchanges still open (and a connection mid-hook on it), and is released once, at the latest
    when the connection closes."""

    def __init__(self) -> None:
        self.filters = tuple(self.new_filters())  # fresh per run: they remember what they saw
        super().__init__()
        self.chains: list[Any] = list(self.core.chain.filters)
        self.retired: list[RetiredChain] = []
        self.released: list[RetiredChain] = []

    def new_filters(self) -> list[Filter]:
        return [TracingSuspender({})]

    @precondition(lambda self: not self.core.closed and len(self.retired) < 8)
    @rule()
    def reload(self) -> None:
        cluster = self.core.cluster
        old = RetiredChain(cluster.chain, cluster.exchange_observer, self.released.append)
        filters = self.new_filters()
        cluster.use_chain(FilterChain(filters))
        self.core.switch_chain(old)
        old.release()
        event(f"reload: suspended={self.core.suspended}, in flight={len(self.core.pending)}")
        self.retired.append(old)
        self.chains += filters
        assert not self.out.client_paused - {"inflight-limit", "backlog-full"}, "a reload paused reading"

    @invariant()
    def answers_run_on_the_chain_that_saw_the_request(self) -> None:
        answered = [cid for f in self.chains for cid in f.answers]
        assert len(answered) == len(set(answered)), "an answer ran response hooks twice"
        for f in self.chains:
            assert set(f.answers) <= f.requests, "a response hook ran for a request its chain never saw"

    @invariant()
    def replaced_chains_are_held_by_their_open_exchanges(self) -> None:
        core = self.core
        assert len({id(r) for r in self.released}) == len(self.released), "a chain released twice"
        held = Counter(core._old.values()) if core._old is not None else Counter()
        for r in self.retired:
            users = held[r] + (1 if core._behind is r else 0)
            assert r.users == users
            assert r.done == (users == 0) == (r in self.released)
        if core.closed:
            assert all(r.done for r in self.retired), "a closed connection still holds a replaced chain"
        if core._old is None:
            assert core._observer is None, "the routing observer outlived the old exchanges"


class RawReloadingCoreMachine(ReloadingCoreMachine):
    """Reloads between chains that hook nothing: raw mode throughout."""

    def new_filters(self) -> list[Filter]:
        return []


# max_examples from the loaded profile (tests/conftest.py): 100 runs of up to 40 steps each by
# default, 1000 with KGATE_HYPOTHESIS=deep
SETTINGS = settings(stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck))
TestCoreWithFilter = CoreMachine.TestCase
TestCoreWithFilter.settings = SETTINGS
TestCoreRaw = RawCoreMachine.TestCase
TestCoreRaw.settings = SETTINGS
TestCoreReloading = ReloadingCoreMachine.TestCase
TestCoreReloading.settings = SETTINGS
TestCoreRawReloading = RawReloadingCoreMachine.TestCase
TestCoreRawReloading.settings = SETTINGS
