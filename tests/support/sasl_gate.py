"""A test-only SASL gate: a stand-in for a SASL-secured Kafka broker, in front of a real Tansu.

Tansu cannot be used with SASL in these tests (with ``--authentication`` the command that
creates its users needs authentication itself), so this gate plays the secured broker's part
of the protocol and relays everything else to a plain Tansu. It is NOT a security component
and NOT part of kgate: it exists so that kgate's SASL handling can be tested end to end.

Every accepted connection must authenticate before anything is relayed:

- ApiVersions before authentication is relayed to Tansu and its answer passed back (Tansu
  lists SaslHandshake and SaslAuthenticate).
- SaslHandshake v0 and v1, mechanisms PLAIN and SCRAM-SHA-256 (any other: error 33).
- After v1 the tokens come in SaslAuthenticate requests (a failure answers error 58 and
  closes the connection); after v0 they come as bare size-prefixed frames without Kafka
  headers, answered with bare frames (a failure closes the connection, as Kafka does).
- PLAIN checks user and password. SCRAM-SHA-256 is the server side of RFC 5802 / RFC 7677:
  per-user salt, 4096 iterations, only StoredKey/ServerKey kept, the client proof verified and
  the server signature sent as ``v=``; an unknown user or a bad proof is an error.
- Any other request before success closes the connection. After success bytes are relayed
  both ways to Tansu unchanged.

Each connection is recorded (``GateConnection``: mechanism, handshake version, authenticated
user, whether bare tokens were used, ...) for the tests' assertions. The gate runs on its own
thread and event loop, so blocking clients (confluent-kafka) and in-process kgate (also on its
own thread) can use it from a test running on pytest's loop.

To make Tansu's Metadata name the gate rather than Tansu itself, start Tansu with
``advertised_port`` = the gate's port (``SaslGate.reserve_port()`` before Tansu starts).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from struct import Struct
from typing import Any

from kgate.codec import api
from kgate.codec.generated.api_keys import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from kgate.codec.headers import parse_request_header, peek_request, response_frame
from support.ports import HOST, free_port

UNSUPPORTED_SASL_MECHANISM = 33
SASL_AUTHENTICATION_FAILED = 58
SCRAM_ITERATIONS = 4096
MECHANISMS = ("PLAIN", "SCRAM-SHA-256")

_INT32 = Struct(">i")


class AuthFailed(Exception):
    """The client's credentials or token were refused."""


@dataclass
class GateConnection:
    """What the gate saw on one accepted connection."""

    peer: tuple[str, int]
    mechanism: str | None = None  # from the SaslHandshake the gate accepted
    handshake_version: int | None = None
    raw_tokens: bool = False  # tokens came as bare frames (after SaslHandshake v0)
    tokens: int = 0  # SASL tokens received (bare or in SaslAuthenticate)
    claimed_user: str | None = None  # user named by the client's token, authenticated or not
    user: str | None = None  # set once authentication succeeded
    failure: str | None = None  # why authentication failed
    refused_api_key: int | None = None  # a non-SASL request before authentication (closed)
    requests_before_auth: list[int] = field(default_factory=list)  # api keys, in order
    open: bool = True

    @property
    def authenticated(self) -> bool:
        return self.user is not None


# ---------------------------------------------------------------------------------- mechanisms
class _Plain:
    def __init__(self, users: dict[str, str], rec: GateConnection) -> None:
        self.users = users
        self.rec = rec

    def step(self, token: bytes) -> tuple[bytes, bool]:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise AuthFailed("malformed PLAIN token")
        authzid, authcid, password = (p.decode("utf-8", "replace") for p in parts)
        self.rec.claimed_user = authcid
        if authzid and authzid != authcid:
            raise AuthFailed(f"authorization id {authzid!r} differs from user {authcid!r}")
        expected = self.users.get(authcid)
        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise AuthFailed(f"invalid username or password for {authcid!r}")
        self.rec.user = authcid
        return b"", True


@dataclass(frozen=True)
class ScramCredential:
    """What a SCRAM server stores per user (RFC 5802 section 3): never the password."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def make(cls, password: str, iterations: int = SCRAM_ITERATIONS) -> ScramCredential:
        salt = secrets.token_bytes(16)
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
        client_key = hmac.new(salted, b"Client Key", "sha256").digest()
        return cls(
            salt=salt,
            iterations=iterations,
            stored_key=hashlib.sha256(client_key).digest(),
            server_key=hmac.new(salted, b"Server Key", "sha256").digest(),
        )


def _attrs(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthFailed(f"malformed SCRAM attribute {part!r}")
        out[part[0]] = part[2:]
    return out


class _ScramSha256:
    """Server side of one SCRAM-SHA-256 exchange: client-first -> server-first, client-final -> server-final."""

    def __init__(self, creds: dict[str, ScramCredential], rec: GateConnection) -> None:
        self.creds = creds
        self.rec = rec
        self.state = "first"
        self._gs2 = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._cred: ScramCredential | None = None
        self._user = ""

    def step(self, token: bytes) -> tuple[bytes, bool]:
        try:
            text = token.decode()
        except UnicodeDecodeError as exc:
            raise AuthFailed("SCRAM message is not UTF-8") from exc
        if self.state == "first":
            return self._first(text), False
        if self.state == "final":
            return self._final(text), True
        raise AuthFailed("SCRAM exchange already finished")

    def _first(self, text: str) -> bytes:
        cbind, sep1, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not (sep1 and sep2) or cbind not in ("n", "y"):
            raise AuthFailed(f"unsupported GS2 header in {text!r}")
        attrs = _attrs(bare)
        if "m" in attrs or "n" not in attrs or "r" not in attrs:
            raise AuthFailed(f"malformed client-first-message {text!r}")
        user = attrs["n"].replace("=2C", ",").replace("=3D", "=")
        self.rec.claimed_user = user
        if authzid and authzid[2:] != user:
            raise AuthFailed(f"authorization id {authzid!r} differs from user {user!r}")
        cred = self.creds.get(user)
        if cred is None:
            raise AuthFailed(f"unknown user {user!r}")
        self._gs2 = f"{cbind},{authzid},"
        self._client_first_bare = bare
        self._nonce = attrs["r"] + base64.b64encode(secrets.token_bytes(18)).decode()
        self._server_first = f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},i={cred.iterations}"
        self._cred, self._user = cred, user
        self.state = "final"
        return self._server_first.encode()

    def _final(self, text: str) -> bytes:
        self.state = "done"
        cred = self._cred
        assert cred is not None
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        if not sep:
            raise AuthFailed("client-final-message without proof")
        attrs = _attrs(without_proof)
        if attrs.get("c") != base64.b64encode(self._gs2.encode()).decode():
            raise AuthFailed("channel binding does not match the GS2 header")
        if attrs.get("r") != self._nonce:
            raise AuthFailed("nonce mismatch")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.new(cred.stored_key, auth_message, "sha256").digest()
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except ValueError as exc:
            raise AuthFailed("proof is not base64") from exc
        if len(proof) != len(signature):
            raise AuthFailed("invalid proof")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), cred.stored_key):
            raise AuthFailed(f"invalid proof for {self._user!r} (wrong password)")
        self.rec.user = self._user
        server_signature = hmac.new(cred.server_key, auth_message, "sha256").digest()
        return b"v=" + base64.b64encode(server_signature)


# ---------------------------------------------------------------------------------- the gate
async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    """One size-prefixed frame, prefix included."""
    head = await reader.readexactly(4)
    size = _INT32.unpack(head)[0]
    if size < 0 or size > 64 << 20:
        raise ConnectionError(f"bad frame size {size}")
    return head + await reader.readexactly(size)


def _bare(payload: bytes) -> bytes:
    return _INT32.pack(len(payload)) + payload


class _Close(Exception):
    """End the connection before relaying."""


class SaslGate:
    """The gate on ``HOST:port`` relaying authenticated connections to ``upstream``."""

    def __init__(self, upstream: tuple[str, int], users: dict[str, str], port: int | None = None) -> None:
        self.upstream = upstream
        self.users = dict(users)
        self.scram = {u: ScramCredential.make(p) for u, p in self.users.items()}
        self.port = port or free_port()
        self.connections: list[GateConnection] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._error: BaseException | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._thread = threading.Thread(target=self._run, name="sasl-gate", daemon=True)

    @staticmethod
    def reserve_port() -> int:
        return free_port()

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    # -- assertions helpers ----------------------------------------------------------------
    def records(self) -> list[GateConnection]:
        with self._lock:
            return list(self.connections)

    def clear(self) -> None:
        with self._lock:
            self.connections.clear()

    def wait_for(self, predicate: Callable[[list[GateConnection]], bool], timeout: float = 10) -> list[GateConnection]:
        """Poll the records until ``predicate`` holds; AssertionError with the records otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            recs = self.records()
            if predicate(recs):
                return recs
            if time.monotonic() > deadline:
                raise AssertionError(f"gate records never satisfied the condition: {recs}")
            time.sleep(0.05)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> SaslGate:
        self._thread.start()
        if not self._ready.wait(10) or self._error is not None:
            raise RuntimeError(f"SASL gate did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._thread.is_alive() and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as exc:
            self._error = exc
            self._ready.set()
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._accept, HOST, self.port)
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            await server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        peer = writer.get_extra_info("peername")
        rec = GateConnection(peer=(peer[0], peer[1]))
        with self._lock:
            self.connections.append(rec)
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
            await self._authenticate(rec, reader, writer, up_reader, up_writer)
            await self._relay(reader, writer, up_reader, up_writer)
        except (_Close, ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        except asyncio.CancelledError:
            pass  # the gate stops; a cancelled connected-callback task upsets asyncio.streams
        finally:
            rec.open = False
            writer.close()
            if up_writer is not None:
                up_writer.close()
            self._tasks.discard(task)

    async def _authenticate(
        self,
        rec: GateConnection,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        """Return once the client authenticated; raise _Close otherwise."""
        session: _Plain | _ScramSha256 | None = None
        while True:
            frame = await _read_frame(reader)
            if rec.handshake_version == 0 and session is not None:
                # after SaslHandshake v0: a bare token, answered with a bare frame
                rec.raw_tokens = True
                rec.tokens += 1
                try:
                    reply, done = session.step(frame[4:])
                except AuthFailed as exc:
                    rec.failure = str(exc)
                    raise _Close from exc
                writer.write(_bare(reply))
                await writer.drain()
                if done:
                    return
                continue
            api_key, version, cid = peek_request(frame)
            rec.requests_before_auth.append(api_key)
            if api_key == API_VERSIONS:
                up_writer.write(frame)
                await up_writer.drain()
                writer.write(await _read_frame(up_reader))
                await writer.drain()
            elif api_key == SASL_HANDSHAKE and session is None:
                req = self._decode(frame, api_key, version)
                mechanism = str(req.mechanism)
                resp = api.API_INFO[api_key].response_class(error_code=0, mechanisms=list(MECHANISMS))
                if mechanism in MECHANISMS:
                    rec.mechanism, rec.handshake_version = mechanism, version
                    session = _Plain(self.users, rec) if mechanism == "PLAIN" else _ScramSha256(self.scram, rec)
                else:
                    resp.error_code = UNSUPPORTED_SASL_MECHANISM
                self._answer(writer, api_key, version, cid, resp)
                await writer.drain()
            elif api_key == SASL_AUTHENTICATE and session is not None and rec.handshake_version == 1:
                req = self._decode(frame, api_key, version)
                rec.tokens += 1
                resp = api.API_INFO[api_key].response_class(error_code=0, error_message=None, auth_bytes=b"")
                try:
                    reply, done = session.step(bytes(req.auth_bytes))
                except AuthFailed as exc:
                    rec.failure = str(exc)
                    resp.error_code = SASL_AUTHENTICATION_FAILED
                    resp.error_message = f"Authentication failed: {exc}"
                    self._answer(writer, api_key, version, cid, resp)
                    await writer.drain()
                    raise _Close from exc
                resp.auth_bytes = reply
                self._answer(writer, api_key, version, cid, resp)
                await writer.drain()
                if done:
                    return
            else:
                rec.refused_api_key = api_key
                rec.failure = f"api key {api_key} v{version} before authentication"
                raise _Close

    @staticmethod
    def _decode(frame: bytes, api_key: int, version: int) -> Any:
        header = parse_request_header(frame, api.request_header_version(api_key, version))
        return api.decode_request(api_key, version, memoryview(frame)[header.body_offset :])

    @staticmethod
    def _answer(writer: asyncio.StreamWriter, api_key: int, version: int, cid: int, resp: Any) -> None:
        writer.write(response_frame(cid, api.response_header_version(api_key, version), resp.encode(version)))

    @staticmethod
    async def _relay(
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            while data := await src.read(1 << 16):
                dst.write(data)
                await dst.drain()

        tasks = [asyncio.ensure_future(pump(reader, up_writer)), asyncio.ensure_future(pump(up_reader, writer))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
