"""kgate's own connection to a cluster, for requests kgate makes itself.

kgate asks the cluster things on its own behalf: node discovery at start-up (so that an
instance of an HA fleet serves every node's port before any client showed it Metadata) and,
with the filter framework, topic-id lookups. These requests go over a connection kgate owns
rather than a client's, so they never queue behind a client's long-poll Fetch and never
disturb a client's correlation ids.

The client negotiates versions with ApiVersions once per connection and picks, for each
request, the highest version both the broker and kgate's codec know within the caller's range.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import Any

from kgate.codec import api
from kgate.codec.framing import FrameReader
from kgate.codec.generated.api_keys import API_VERSIONS, SASL_AUTHENTICATE, SASL_HANDSHAKE
from kgate.codec.headers import HeaderError, peek_correlation_id, request_frame, response_body_offset
from kgate.config import UpstreamAuth
from kgate.proxy.carrier.own_listeners import OWN_LISTENERS
from kgate.proxy.carrier.sasl_client import SaslError, ScramClient, plain_token
from kgate.proxy.carrier.tls import ReloadingContext, tls_problem

log = logging.getLogger("kgate.upstream")


class UpstreamError(Exception):
    """kgate's own request could not be answered (no broker reachable, closed, timed out)."""


class _Protocol(asyncio.Protocol):
    def __init__(self, owner: UpstreamClient) -> None:
        self.owner = owner
        self.reader = FrameReader(owner.max_frame_bytes)

    def data_received(self, data: bytes) -> None:
        for frame in self.reader.feed(data):
            self.owner._on_frame(frame)
        if self.reader.error is not None:
            self.owner._fail(UpstreamError(f"bad frame from broker: {self.reader.error}"), self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner._fail(UpstreamError(f"connection to broker lost: {exc or 'closed'}"), self)


class UpstreamClient:
    """One lazily (re)connected connection; requests are pipelined and matched by correlation id."""

    def __init__(
        self,
        targets: Callable[[], Sequence[tuple[str, int]]],
        *,
        client_id: str = "kgate",
        connect_timeout_s: float = 10.0,
        max_frame_bytes: int = 100 * 1024 * 1024,
        auth: UpstreamAuth | None = None,
        refuse_own_listeners: bool = False,
        tls: ReloadingContext | None = None,
        server_hostname: str | None = None,
        on_tls_failure: Callable[[], None] | None = None,
    ) -> None:
        #: TLS towards the brokers (the cluster's ``upstream_tls``, reloaded as its files change)
        self.tls = tls
        #: called per failed TLS handshake (kgate_tls_handshake_failures_total{side="upstream"})
        self.on_tls_failure = on_tls_failure
        self.server_hostname = server_hostname
        self._targets = targets
        #: kgate's own connection never goes to one of its listeners (a loop); other users of this
        #: client in the same process (tests, tools talking to an embedded kgate) may
        self.refuse_own_listeners = refuse_own_listeners
        self.auth = auth
        self.client_id = client_id
        self.connect_timeout_s = connect_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self._transport: asyncio.Transport | None = None
        self._protocol: _Protocol | None = None
        self._handshaking: _Protocol | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._pending: dict[int, tuple[asyncio.Future[Any], int, int]] = {}
        self._cids = itertools.count(1)
        self.versions: dict[int, tuple[int, int]] = {}  # api key -> broker's (min, max)

    async def _ensure_connected(self) -> asyncio.Transport:
        if self._transport is not None and not self._transport.is_closing():
            return self._transport
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.get_running_loop().create_task(self._connect())
            # Its callers may all be gone (cancelled at shutdown) when it fails: retrieve the exception
            # so asyncio does not log it as never retrieved; a caller still waiting gets it all the same.
            self._connecting.add_done_callback(lambda t: t.cancelled() or t.exception())
        await asyncio.shield(self._connecting)
        assert self._transport is not None
        return self._transport

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        errors = []
        for host, port in self._targets():
            if self.refuse_own_listeners and OWN_LISTENERS.known_self_target(host, port):
                errors.append(f"{host}:{port}: leads back to one of kgate's own listeners")
                continue
            tls = self.tls
            try:
                if tls is None:
                    connecting = loop.create_connection(lambda: _Protocol(self), host, port)
                else:
                    connecting = loop.create_connection(
                        lambda: _Protocol(self),
                        host,
                        port,
                        ssl=tls.current,
                        server_hostname=self.server_hostname or host,
                        ssl_handshake_timeout=self.connect_timeout_s,
                    )
                transport, protocol = await asyncio.wait_for(connecting, self.connect_timeout_s)
            except (OSError, TimeoutError) as exc:
                if isinstance(exc, ssl.SSLError) and self.on_tls_failure is not None:
                    self.on_tls_failure()
                why = tls_problem(exc) if isinstance(exc, ssl.SSLError) else exc or type(exc).__name__
                errors.append(f"{host}:{port}: {why}")
                continue
            if self.refuse_own_listeners and OWN_LISTENERS.connected_to_self(transport):
                transport.abort()  # kgate's own listener: asking itself would loop
                OWN_LISTENERS.mark_self_target(host, port)
                errors.append(f"{host}:{port}: is one of kgate's own listeners, refusing to connect to itself")
                continue
            # Published only once usable: a request never sees a half set-up connection.
            self._handshaking = protocol
            try:
                await asyncio.wait_for(self._handshake(transport), self.connect_timeout_s)
            except (UpstreamError, SaslError, TimeoutError) as exc:
                what = "no answer" if isinstance(exc, TimeoutError) else str(exc)
                errors.append(f"{host}:{port}: {what}")
                transport.close()
                continue
            finally:
                self._handshaking = None
            self._transport, self._protocol = transport, protocol
            return
        raise UpstreamError("no broker reachable: " + "; ".join(errors))

    async def _handshake(self, transport: asyncio.Transport) -> None:
        resp = await self._send(transport, API_VERSIONS, 0, api.API_INFO[API_VERSIONS].request_class())
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        if self.auth is not None:
            try:
                await self._authenticate(transport)
            except (UpstreamError, SaslError) as exc:
                raise UpstreamError(f"SASL {self.auth.mechanism} as {self.auth.username}: {exc}") from exc

    async def _authenticate(self, transport: asyncio.Transport) -> None:
        """SaslHandshake v1 + SaslAuthenticate, before any other request on this connection."""
        auth = self.auth
        assert auth is not None
        hs_version = self.pick_version(SASL_HANDSHAKE, 1)
        au_version = self.pick_version(SASL_AUTHENTICATE)
        if hs_version is None or au_version is None:
            raise UpstreamError("broker does not support SaslHandshake v1 / SaslAuthenticate")
        hs = await self._send(
            transport, SASL_HANDSHAKE, hs_version, api.API_INFO[SASL_HANDSHAKE].request_class(mechanism=auth.mechanism)
        )
        if hs.error_code:
            raise UpstreamError(f"mechanism not enabled (broker offers {', '.join(hs.mechanisms)})")

        async def step(token: bytes) -> bytes:
            req = api.API_INFO[SASL_AUTHENTICATE].request_class(auth_bytes=token)
            resp = await self._send(transport, SASL_AUTHENTICATE, au_version, req)
            if resp.error_code:
                raise UpstreamError(f"authentication failed: {resp.error_message or resp.error_code}")
            return bytes(resp.auth_bytes)

        if auth.mechanism == "PLAIN":
            await step(plain_token(auth.username, auth.password))
            return
        scram = ScramClient(auth.mechanism, auth.username, auth.password)
        server_first = await step(scram.first())
        scram.verify(await step(scram.final(server_first)))

    def pick_version(self, api_key: int, lo: int = 0, hi: int | None = None) -> int | None:
        """Highest version within [lo, hi] that the broker and kgate's codec both know."""
        info = api.API_INFO[api_key]
        broker = self.versions.get(api_key)
        if broker is None:
            return None
        top = min(broker[1], info.max_version, hi if hi is not None else info.max_version)
        bottom = max(broker[0], info.min_version, lo)
        return top if top >= bottom else None

    async def request(
        self,
        api_key: int,
        message: Any,
        version: int | None = None,
        *,
        lo: int = 0,
        hi: int | None = None,
        timeout_s: float = 10.0,
    ) -> tuple[int, Any]:
        """Send ``message`` and return (version used, decoded response)."""
        transport = await self._ensure_connected()
        if version is None:
            version = self.pick_version(api_key, lo, hi)
            if version is None:
                raise UpstreamError(f"broker supports no version of api {api_key} in [{lo}, {hi}]")
        try:
            resp = await asyncio.wait_for(self._send(transport, api_key, version, message), timeout_s)
        except TimeoutError as exc:
            raise UpstreamError(f"api {api_key} v{version}: no answer within {timeout_s}s") from exc
        return version, resp

    def _send(self, transport: asyncio.Transport, api_key: int, version: int, message: Any) -> asyncio.Future[Any]:
        """Write one request; the future of its answer.

        The transport can be closed by the time a request is written: a broker that resets every
        connection right after accepting it closes the transport before the ApiVersions handshake
        is written, and a request's write runs a loop turn after ``_ensure_connected`` returned.
        uvloop then raises RuntimeError ("the handler is closed"), which no caller expects: it went
        through the readiness probe and ended kgate's shutdown with exit 1 (seen in a full test run,
        tests/e2e/test_upstream_resets.py). Raised as the UpstreamError it is.
        """
        if transport.is_closing():
            raise UpstreamError(f"api {api_key} v{version}: the connection to the broker is closed")
        cid = next(self._cids) & 0x7FFFFFFF
        body = message.encode(version)
        hv = api.request_header_version(api_key, version)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        try:
            transport.write(request_frame(api_key, version, cid, self.client_id, hv, body))
        except RuntimeError as exc:  # closed between the check and the write (uvloop)
            raise UpstreamError(f"api {api_key} v{version}: the connection to the broker is closed") from exc
        self._pending[cid] = (fut, api_key, version)
        return fut

    def _on_frame(self, frame: memoryview) -> None:
        try:
            cid = peek_correlation_id(frame)
        except HeaderError as exc:
            self._fail(UpstreamError(str(exc)))
            return
        entry = self._pending.pop(cid, None)
        if entry is None:
            return  # answer to a request that timed out
        fut, api_key, version = entry
        if fut.done():
            return
        try:
            offset = response_body_offset(frame, api.response_header_version(api_key, version))
            fut.set_result(api.decode_response(api_key, version, frame[offset:]))
        except (api.CodecError, HeaderError, ValueError) as exc:
            fut.set_exception(UpstreamError(f"undecodable response to api {api_key} v{version}: {exc}"))

    def _fail(self, exc: UpstreamError, protocol: _Protocol | None = None) -> None:
        if protocol is not None and protocol is not self._protocol and protocol is not self._handshaking:
            return  # an old connection's late goodbye: nothing of ours waits on it
        transport, self._transport = self._transport, None
        self._protocol = None
        if transport is not None:
            transport.close()
        pending, self._pending = self._pending, {}
        for fut, _k, _v in pending.values():
            if not fut.done():
                fut.set_exception(exc)
                # Its waiter may be gone (timed out, cancelled at shutdown): mark the exception seen so
                # asyncio does not log "exception was never retrieved"; a live waiter still gets it.
                fut.exception()

    def close(self) -> None:
        if self._connecting is not None and not self._connecting.done():
            # At shutdown nobody waits for a connect in progress, and the loop may stop before a
            # failed task's exception is read: cancel it rather than let it fail unseen.
            self._connecting.cancel()
        self._fail(UpstreamError("closed by kgate"))
