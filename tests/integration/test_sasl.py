"""SASL through kgate, against a SASL-secured cluster: kgate's own connection and clients' ones.

Tansu cannot be used with SASL here (with ``--authentication`` its user-creation command
itself needs authentication), so a **test-only SASL gate** (``support/sasl_gate.py``) stands in
for a secured broker: it sits in front of a real Tansu, demands SaslHandshake v0/v1 + PLAIN or
SCRAM-SHA-256 on every connection, and relays bytes unchanged once a connection authenticated.
Tansu advertises the gate's port, so Metadata names the gate as the broker.

    client --> kgate (in-process, bootstrap port + node ports) --> SASL gate --> Tansu

What is proven:

1. kgate's own connection (node discovery, topic-id lookups) authenticates with
   ``upstream_auth`` (PLAIN, SCRAM-SHA-256) and the gate saw it as kgate's user; with a wrong
   password lookups fail with a retriable -1, the failure is logged with mechanism and user,
   and kgate keeps serving.
2. confluent-kafka clients authenticate *through* kgate (SaslHandshake v1 + SaslAuthenticate)
   and produce and consume exact messages via kgate's bootstrap and node ports; the gate only
   ever sees kgate's sockets; a wrong password fails the client, not kgate.
3. SaslHandshake v0 with bare tokens (PLAIN: one, SCRAM-SHA-256: two round trips) passes
   through kgate untouched and kgate resumes parsing afterwards (Metadata is rewritten).
4. The principal is visible to filters (``ctx.connection.principal``) after v1 and v0.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from struct import Struct
from typing import Any

import pytest
from support import procs
from support.inproc_kgate import InprocKgate
from support.ports import HOST, free_port, free_port_range
from support.sasl_gate import SaslGate
from support.workloads import assert_exact, payloads, unique

from kgate.api import FORWARD, LOOKUP_FAILED, ApiKey, ErrorCode, Filter, FilterContext, TopicNameError, on_request
from kgate.codec import api
from kgate.codec.generated.admin.create_topics import CreatableTopic, CreateTopicsRequest
from kgate.codec.generated.api_keys import API_VERSIONS, CREATE_TOPICS, METADATA, SASL_AUTHENTICATE, SASL_HANDSHAKE
from kgate.codec.generated.data.metadata import MetadataRequest
from kgate.codec.generated.session.sasl_authenticate import SaslAuthenticateRequest
from kgate.codec.generated.session.sasl_handshake import SaslHandshakeRequest
from kgate.codec.headers import peek_correlation_id, request_frame, response_body_offset
from kgate.config import parse_config
from kgate.filters.registry import register_filter
from kgate.proxy.carrier.sasl_client import ScramClient, plain_token
from kgate.proxy.carrier.upstream_client import UpstreamClient

pytestmark = pytest.mark.timeout(120)

SASL_AUTHENTICATION_FAILED = ErrorCode.SASL_AUTHENTICATION_FAILED
TANSU_NODE = 111
SVC, SVC_PASSWORD = "kgate-svc", "svc-secret"
USERS = {SVC: SVC_PASSWORD, "alice": "alice-secret", "bob": "bob-secret"}
MECHS = ["PLAIN", "SCRAM-SHA-256"]
_INT32 = Struct(">i")


# ---------------------------------------------------------------------------------- principal filter
SEEN: list[tuple[str | None, str | None]] = []  # (client_id, principal) per Metadata request


class PrincipalRecorder(Filter):
    """Records the SASL principal kgate reports for every Metadata request."""

    name = "test-sasl-principal"

    @on_request(ApiKey.METADATA)
    def metadata(self, ctx: FilterContext, request: Any) -> Any:
        SEEN.append((ctx.connection.client_id, ctx.connection.principal))
        return FORWARD


register_filter("test-sasl-principal", PrincipalRecorder)


# ---------------------------------------------------------------------------------- fixtures
class Secured:
    def __init__(self, tansu: procs.Tansu, gate: SaslGate) -> None:
        self.tansu = tansu
        self.gate = gate


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[Secured]:
    """Tansu advertising the gate's port, and the gate in front of it."""
    gate_port = free_port()
    tansu = procs.Tansu(tmp_path_factory.mktemp("tansu-sasl") / "tansu.log", advertised_port=gate_port)
    tansu.start()
    gate = SaslGate((HOST, tansu.port), USERS, port=gate_port)
    try:
        gate.start()
        yield Secured(tansu, gate)
    finally:
        gate.stop()
        tansu.kill()


@pytest.fixture
def gate(secured) -> SaslGate:
    secured.gate.clear()
    return secured.gate


def kgate_config(gate: SaslGate, auth: dict[str, str] | None, filters: list[dict[str, Any]] | None = None) -> Any:
    cluster: dict[str, Any] = {
        "name": "default",
        "listen": f"{HOST}:{free_port()}",
        "advertised_host": HOST,
        "upstream": [gate.address],
        "node_ports": {"base": free_port_range(256), "count": 256},
        "bootstrap_serves_node": False,  # clients use the bootstrap port AND node 111's own port
    }
    if auth is not None:
        cluster["upstream_auth"] = auth
    data = {
        "log_level": "debug",
        "proxy": {"drain_timeout_s": 2},
        "virtual_clusters": [cluster],
        "filters": filters or [],
    }
    return parse_config(data, "test")


def svc_auth(mechanism: str = "PLAIN", password: str = SVC_PASSWORD) -> dict[str, str]:
    return {"mechanism": mechanism, "username": SVC, "password": password}


@pytest.fixture
def kgate_factory(gate):
    started: list[InprocKgate] = []

    def make(auth: dict[str, str] | None = None, filters: list[dict[str, Any]] | None = None) -> InprocKgate:
        k = InprocKgate(kgate_config(gate, auth if auth is not None else svc_auth(), filters)).start()
        started.append(k)
        return k

    yield make
    for k in started:
        k.stop()


# ---------------------------------------------------------------------------------- helpers
def node_port(k: InprocKgate) -> int:
    """kgate's port for Tansu's node, once discovery (through the gate) learnt the node."""
    deadline = time.monotonic() + 10
    while True:
        ports = k.call(lambda: dict(k.cluster.listening_ports))
        if TANSU_NODE in ports:
            return int(ports[TANSU_NODE])
        assert time.monotonic() < deadline, f"node {TANSU_NODE} never discovered: {ports}"
        time.sleep(0.05)


async def on_kgate(k: InprocKgate, coro: Any, timeout: float = 15) -> Any:
    return await asyncio.wait_for(asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, k.loop)), timeout)


async def create_topic(tansu: procs.Tansu, name: str) -> Any:
    """Created straight at Tansu (setup, not under test); returns the topic id."""
    client = UpstreamClient(lambda: [(HOST, tansu.port)], client_id="sasl-setup")
    try:
        req = CreateTopicsRequest(
            topics=[CreatableTopic(name=name, num_partitions=1, replication_factor=1)], timeout_ms=20000
        )
        _v, resp = await client.request(CREATE_TOPICS, req, lo=7)
    finally:
        client.close()
    (t,) = resp.topics
    assert t.error_code == 0, t
    assert t.topic_id.int != 0
    return t.topic_id


class Wire:
    """A hand-driven Kafka connection: requests built with kgate's codec, bare SASL frames too."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self.reader, self.writer, self.client_id = reader, writer, client_id
        self.cid = 0

    @classmethod
    async def open(cls, port: int, client_id: str = "sasl-wire") -> Wire:
        reader, writer = await asyncio.open_connection(HOST, port)
        return cls(reader, writer, client_id)

    def close(self) -> None:
        self.writer.close()

    async def _frame(self) -> bytes:
        head = await asyncio.wait_for(self.reader.readexactly(4), 10)
        return head + await asyncio.wait_for(self.reader.readexactly(_INT32.unpack(head)[0]), 10)

    async def request(self, api_key: int, version: int, msg: Any) -> Any:
        self.cid += 1
        hv = api.request_header_version(api_key, version)
        self.writer.write(request_frame(api_key, version, self.cid, self.client_id, hv, msg.encode(version)))
        frame = await self._frame()
        assert peek_correlation_id(frame) == self.cid
        offset = response_body_offset(frame, api.response_header_version(api_key, version))
        return api.decode_response(api_key, version, memoryview(frame)[offset:])

    async def token(self, payload: bytes) -> bytes:
        """A bare SASL token frame (after SaslHandshake v0) and the bare frame answering it."""
        self.writer.write(_INT32.pack(len(payload)) + payload)
        return (await self._frame())[4:]

    async def is_closed(self, timeout: float = 5) -> bool:
        try:
            data = await asyncio.wait_for(self.reader.read(1), timeout)
        except ConnectionError:
            return True
        except TimeoutError:
            return False
        return data == b""

    async def metadata(self) -> Any:
        return await self.request(METADATA, 12, MetadataRequest(topics=[], allow_auto_topic_creation=False))


async def sasl_v1(w: Wire, mechanism: str, user: str, password: str) -> Any:
    """SaslHandshake v1 + SaslAuthenticate v2; returns the last SaslAuthenticate response."""
    hs = await w.request(SASL_HANDSHAKE, 1, SaslHandshakeRequest(mechanism=mechanism))
    assert hs.error_code == 0, hs
    assert mechanism in hs.mechanisms, hs

    async def step(token: bytes) -> Any:
        return await w.request(SASL_AUTHENTICATE, 2, SaslAuthenticateRequest(auth_bytes=token))

    if mechanism == "PLAIN":
        return await step(plain_token(user, password))
    scram = ScramClient(mechanism, user, password)
    first = await step(scram.first())
    if first.error_code:
        return first
    final = await step(scram.final(bytes(first.auth_bytes)))
    if final.error_code == 0:
        scram.verify(bytes(final.auth_bytes))  # the gate proved it knows the credentials
    return final


async def sasl_v0(w: Wire, mechanism: str, user: str, password: str) -> None:
    """SaslHandshake v0, then bare token frames (one for PLAIN, two round trips for SCRAM)."""
    hs = await w.request(SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism=mechanism))
    assert hs.error_code == 0, hs
    assert mechanism in hs.mechanisms, hs
    if mechanism == "PLAIN":
        assert await w.token(plain_token(user, password)) == b""  # Kafka answers PLAIN with an empty frame
        return
    scram = ScramClient(mechanism, user, password)
    server_first = await w.token(scram.first())
    assert server_first.startswith(b"r="), server_first
    scram.verify(await w.token(scram.final(server_first)))


def assert_points_at_kgate(resp: Any, k: InprocKgate, gate: SaslGate) -> None:
    brokers = [(b.node_id, b.host, b.port) for b in resp.brokers]
    assert brokers == [(TANSU_NODE, HOST, node_port(k))], brokers
    assert all(b.port != gate.port for b in resp.brokers)  # what Tansu itself advertises


def sasl_conf(mechanism: str, user: str, password: str) -> dict[str, str]:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


# ---------------------------------------------------------------------------------- the gate itself
async def test_gate_demands_authentication(gate) -> None:
    """The stand-in broker really is secured: otherwise every test below would prove nothing."""
    w = await Wire.open(gate.port)
    try:
        av = await w.request(API_VERSIONS, 0, api.API_INFO[API_VERSIONS].request_class())
        assert {SASL_HANDSHAKE, SASL_AUTHENTICATE} <= {a.api_key for a in av.api_keys}
        w.writer.write(request_frame(METADATA, 12, 9, "x", 2, MetadataRequest(topics=[]).encode(12)))
        assert await w.is_closed()
    finally:
        w.close()
    bad = await Wire.open(gate.port)
    try:
        resp = await sasl_v1(bad, "SCRAM-SHA-256", "alice", "not-her-password")
        assert resp.error_code == SASL_AUTHENTICATION_FAILED
        assert await bad.is_closed()
    finally:
        bad.close()
    recs = gate.wait_for(lambda rs: len(rs) == 2 and not any(r.open for r in rs))
    assert recs[0].refused_api_key == METADATA
    assert not recs[0].authenticated
    assert recs[1].claimed_user == "alice"
    assert not recs[1].authenticated
    assert "invalid proof" in (recs[1].failure or "")


# ---------------------------------------------------------------------------------- 1. kgate's own connection
@pytest.mark.parametrize("mechanism", MECHS)
async def test_own_connection_authenticates_with_upstream_auth(gate, secured, kgate_factory, mechanism) -> None:
    k = kgate_factory(svc_auth(mechanism))
    node_port(k)  # node discovery went through the gate
    nodes = k.call(lambda: dict(k.cluster.upstream_nodes))
    assert nodes == {TANSU_NODE: (HOST, gate.port)}

    name = unique("sasl-own")
    tid = await create_topic(secured.tansu, name)
    lookups = k.call(lambda: k.cluster.topic_names.stats.lookups)
    result = await on_kgate(k, k.cluster.topic_names.resolve([tid]))
    assert result == {tid: name}
    assert k.call(lambda: k.cluster.topic_names.stats.lookups) > lookups  # asked upstream, not a cache hit

    recs = gate.records()
    assert recs, "the gate saw no connection"
    assert all(r.claimed_user == SVC for r in recs), recs  # only kgate's own connection so far
    assert any(r.user == SVC for r in recs)
    for r in recs:
        assert r.authenticated, r
        assert r.mechanism == mechanism, r
        assert r.handshake_version == 1, r
        assert not r.raw_tokens, r
        assert r.requests_before_auth[-1] == SASL_AUTHENTICATE, r
        assert r.refused_api_key is None, r


@pytest.mark.parametrize("mechanism", MECHS)
async def test_own_connection_wrong_password(gate, secured, kgate_factory, caplog, mechanism) -> None:
    caplog.set_level(logging.WARNING, logger="kgate")
    k = kgate_factory(svc_auth(mechanism, password="wrong"))
    tid = await create_topic(secured.tansu, unique("sasl-own-bad"))
    # Node discovery fails first; wait for its log line before looking anything up, so that no two
    # of kgate's own requests share a connection attempt (see test_own_requests_wait_for_authentication).
    expected = f"SASL {mechanism} as {SVC}: authentication failed"
    deadline = time.monotonic() + 5
    while not any(expected in r.getMessage() for r in caplog.records):
        assert time.monotonic() < deadline, [r.getMessage() for r in caplog.records]
        await asyncio.sleep(0.01)
    assert any("discovery failed" in r.getMessage() and expected in r.getMessage() for r in caplog.records)

    for attempt in range(2):  # twice: a failed lookup leaves the resolver usable
        result = await on_kgate(k, k.cluster.topic_names.resolve([tid]))
        err = result[tid]
        assert isinstance(err, TopicNameError), result
        assert err.code == LOOKUP_FAILED, err
        assert err.retriable, err
        if attempt == 0:
            assert expected in err.message, err.message
    assert k.call(lambda: dict(k.cluster.upstream_nodes)) == {}  # discovery could not succeed
    assert all(r.exc_info is None for r in caplog.records)  # failures are logged, nothing raised

    recs = gate.records()
    assert recs, recs
    assert all(not r.authenticated for r in recs), recs
    assert any(r.claimed_user == SVC and r.mechanism == mechanism and r.failure for r in recs), recs

    # kgate is still up and serving clients, who authenticate themselves
    w = await Wire.open(k.port)
    try:
        assert (await sasl_v1(w, "PLAIN", "alice", USERS["alice"])).error_code == 0
        assert (await w.metadata()).brokers
    finally:
        w.close()
    assert k._thread.is_alive()


async def test_own_requests_wait_for_authentication(gate, secured, kgate_factory) -> None:
    """A request made while kgate's own connection is still authenticating must wait for it.

    E.g. node discovery retrying while a topic-id lookup (re)connects. Sending it at once puts a
    Metadata request between SASL steps, which a secured broker answers by closing the connection.
    """
    k = kgate_factory(svc_auth("SCRAM-SHA-256"))
    node_port(k)
    name = unique("sasl-concurrent")
    tid = await create_topic(secured.tansu, name)
    client = k.cluster.own_client
    metadata = MetadataRequest(topics=[], allow_auto_topic_creation=False)

    async def scenario() -> tuple[Any, Any]:  # runs on kgate's loop
        client.close()  # the next request reconnects and authenticates again
        gate.clear()
        first = asyncio.ensure_future(client.request(METADATA, metadata, lo=1))
        # the gate got the new connection's ApiVersions: kgate is connected, not yet authenticated
        while not any(r.requests_before_auth for r in gate.records()):  # noqa: ASYNC110 - another thread's records
            await asyncio.sleep(0.0005)
        second = asyncio.ensure_future(client.request(METADATA, metadata, lo=1))
        lookup = asyncio.ensure_future(k.cluster.topic_names.resolve([tid]))
        results = await asyncio.gather(first, second, lookup, return_exceptions=True)
        return results, [list(r.requests_before_auth) for r in gate.records()]

    results, seen = await on_kgate(k, scenario())
    first, second, lookup = results
    assert not isinstance(first, BaseException), (first, seen)
    assert not isinstance(second, BaseException), (second, seen)
    assert lookup == {tid: name}, (lookup, seen)
    recs = gate.records()
    assert all(r.refused_api_key is None for r in recs), recs


# ---------------------------------------------------------------------------------- 2. real clients through kgate
def _consume(bootstrap: str, topic: str, n: int, conf: dict[str, str], during: Any) -> tuple[list[bytes], Any, Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("g"),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.queue.backoff.ms": 10,
            **conf,
        }
    )
    got: list[bytes] = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append(msg.value())
        md = c.list_topics(topic, timeout=10)
        seen = during()  # while the consumer's connections are open
    finally:
        c.close()
    return got, md, seen


def _produce(bootstrap: str, topic: str, values: list[bytes], conf: dict[str, str]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    errors: list[Any] = []
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(30) == 0
    assert not errors, errors


@pytest.mark.parametrize("mechanism", MECHS)
async def test_clients_authenticate_through_kgate(gate, secured, kgate_factory, mechanism) -> None:
    k = kgate_factory()
    kport = node_port(k)
    topic = unique("sasl-clients")
    await create_topic(secured.tansu, topic)
    values = payloads(20, 100, tag=mechanism)
    conf = sasl_conf(mechanism, "alice", USERS["alice"])

    await asyncio.to_thread(_produce, k.bootstrap, topic, values, conf)

    def during() -> tuple[list[Any], set[Any], set[Any]]:
        recs = [r for r in gate.records() if r.open and r.claimed_user == "alice"]
        conns = k.call(
            lambda: [
                (c.node_id, c.upstream.get_extra_info("sockname"))
                for c in k.cluster.connections
                if c.upstream is not None
            ]
        )
        return recs, {tuple(s[:2]) for _n, s in conns}, {n for n, _s in conns}

    got, md, (open_recs, kgate_socks, node_ids) = await asyncio.to_thread(
        _consume, k.bootstrap, topic, len(values), conf, during
    )
    assert_exact(values, got)
    assert [(b.id, b.host, b.port) for b in md.brokers.values()] == [(TANSU_NODE, HOST, kport)]
    assert TANSU_NODE in node_ids  # the consumer's node connection runs over kgate's node port
    # the gate only ever talks to kgate: every open client connection it has is one of kgate's sockets
    assert open_recs
    assert {r.peer for r in open_recs} <= kgate_socks, (open_recs, kgate_socks)

    alice = [r for r in gate.records() if r.claimed_user == "alice"]
    assert len(alice) >= 4  # producer and consumer, bootstrap and node connection each
    for r in alice:
        assert r.user == "alice", r
        assert r.mechanism == mechanism, r
        assert r.handshake_version == 1, r
        assert not r.raw_tokens, r
        assert r.failure is None, r  # librdkafka: v1
        assert r.tokens == (1 if mechanism == "PLAIN" else 2), r


async def test_client_wrong_password_fails_and_kgate_stays_up(gate, secured, kgate_factory) -> None:
    from confluent_kafka import KafkaError, Producer

    k = kgate_factory()
    node_port(k)
    errors: list[Any] = []
    p = Producer(
        {
            "bootstrap.servers": k.bootstrap,
            "error_cb": errors.append,
            **sasl_conf("SCRAM-SHA-256", "bob", "not-bobs-password"),
        }
    )

    def wait_auth_error() -> None:
        deadline = time.monotonic() + 15
        while not any(e.code() == KafkaError._AUTHENTICATION for e in errors) and time.monotonic() < deadline:
            p.poll(0.1)

    await asyncio.to_thread(wait_auth_error)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    bob = [r for r in gate.records() if r.claimed_user == "bob"]
    assert bob, bob
    assert all(not r.authenticated and "invalid proof" in (r.failure or "") for r in bob), bob
    p.flush(0)

    # kgate is unharmed: a client with the right password works through the same kgate
    w = await Wire.open(k.port)
    try:
        assert (await sasl_v1(w, "SCRAM-SHA-256", "bob", USERS["bob"])).error_code == 0
        assert_points_at_kgate(await w.metadata(), k, gate)
    finally:
        w.close()
    assert k._thread.is_alive()


# ---------------------------------------------------------------------------------- 3. SaslHandshake v0, bare tokens
@pytest.mark.parametrize("mechanism", MECHS)
async def test_handshake_v0_bare_tokens_pass_through(gate, kgate_factory, mechanism) -> None:
    k = kgate_factory()
    w = await Wire.open(k.port)
    try:
        av = await w.request(API_VERSIONS, 0, api.API_INFO[API_VERSIONS].request_class())
        assert av.error_code == 0
        await sasl_v0(w, mechanism, "alice", USERS["alice"])
        # back to Kafka framing: kgate parses and rewrites the Metadata answer
        assert_points_at_kgate(await w.metadata(), k, gate)
        assert_points_at_kgate(await w.metadata(), k, gate)
    finally:
        w.close()
    (rec,) = [r for r in gate.records() if r.claimed_user == "alice"]
    assert rec.user == "alice", rec
    assert rec.mechanism == mechanism, rec
    assert rec.handshake_version == 0, rec
    assert rec.raw_tokens, rec
    assert rec.tokens == (1 if mechanism == "PLAIN" else 2), rec
    assert rec.requests_before_auth == [API_VERSIONS, SASL_HANDSHAKE], rec


async def test_handshake_v0_wrong_password_closes_the_client(gate, kgate_factory) -> None:
    k = kgate_factory()
    w = await Wire.open(k.port)
    try:
        hs = await w.request(SASL_HANDSHAKE, 0, SaslHandshakeRequest(mechanism="PLAIN"))
        assert hs.error_code == 0
        token = plain_token("alice", "nope")
        w.writer.write(_INT32.pack(len(token)) + token)  # bare, as after SaslHandshake v0
        assert await w.is_closed()  # the broker closed; kgate passes that on
    finally:
        w.close()
    (rec,) = [r for r in gate.records() if r.claimed_user == "alice"]
    assert not rec.authenticated, rec
    assert rec.raw_tokens, rec
    assert k._thread.is_alive()


# ---------------------------------------------------------------------------------- 4. principal for filters
@pytest.mark.parametrize("mechanism", MECHS)
@pytest.mark.parametrize("handshake", [1, 0])
async def test_principal_visible_to_filters(gate, kgate_factory, handshake, mechanism) -> None:
    k = kgate_factory(filters=[{"name": "test-sasl-principal"}])
    client_id = unique("principal")
    w = await Wire.open(k.port, client_id)
    try:
        if handshake == 1:
            assert (await sasl_v1(w, mechanism, "alice", USERS["alice"])).error_code == 0
        else:
            await sasl_v0(w, mechanism, "alice", USERS["alice"])
        assert_points_at_kgate(await w.metadata(), k, gate)
        assert_points_at_kgate(await w.metadata(), k, gate)
    finally:
        w.close()
    seen = [principal for cid, principal in SEEN if cid == client_id]
    assert seen == ["alice", "alice"], f"filter saw principals {seen} after SaslHandshake v{handshake} {mechanism}"
