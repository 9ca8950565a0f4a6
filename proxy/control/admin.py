"""The admin listener: ``/livez``, ``/readyz``, ``/metrics`` and ``POST /reload`` over a tiny HTTP/1.1 server.

It runs on kgate's event loop (an asyncio server) rather than prometheus_client's own HTTP
server (a thread), because ``/readyz`` reads loop state (the probe results, the drain flag,
the listeners) that is only safe to read on the loop, and because an answer from the loop
itself is what "alive" should mean: a wedged loop stops answering ``/livez`` too. Building the
``/metrics`` text is the one slow part (every collector runs), so it runs in the loop's
default executor as it did under prometheus' threaded server: the collectors were already
written to be read from another thread (they copy the plain-int tables before iterating).

HTTP support is the minimum a probe, a scraper and a human with curl need: one request per
connection (``Connection: close``), GET and HEAD, 404 for any other path, 405 for any other
method, 400 for what does not parse, and a bounded head (8 KiB, 5 s). No new dependency.

``POST /reload`` re-reads the config (proxy/runtime/reload.py) and answers once the reload is done: 200
and ``{"result": "success", "message": <what changed>}``, or 500 and ``{"result": "failure",
"message": <the error>}`` (Prometheus' ``/-/reload`` convention, so ``curl -f`` fails on a bad
config). Only a loopback peer may ask (403 otherwise): the admin listener may be bound to a pod
address for probes and scrapes, and a reload is an operator's act on the host, not a scraper's.
``GET /config`` (the running configuration, secrets redacted: proxy/runtime/config_view.py) is loopback-only
for the same reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder

from kgate.config import HostPort

log = logging.getLogger("kgate.admin")

MAX_HEAD_BYTES = 8192
HEAD_TIMEOUT_S = 5.0
TEXT = "text/plain; charset=utf-8"
_REASONS = {
    200: "OK",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
JSON = "application/json"

Answer = tuple[int, str, bytes]
#: what builds ``/metrics``: given the Accept header, (content type, body); replaceable (workers aggregate)
MetricsSource = Callable[[str], Awaitable[tuple[str, bytes]]]
#: what ``GET /config`` answers: the running configuration as JSON (proxy/runtime/config_view.py)
ConfigView = Callable[[], Awaitable[bytes]]
#: what ``POST /reload`` runs: (ok, what changed or the error)
ReloadAction = Callable[[], Awaitable["ReloadOutcome"]]


class ReloadOutcome(Protocol):
    """What a reload reports back (proxy/runtime/reload.py ``ReloadResult``)."""

    @property
    def ok(self) -> bool: ...

    @property
    def message(self) -> str: ...


class ReadinessReport(Protocol):
    """What ``/readyz`` asks: proxy/control/readiness.py in one process, the supervisor with ``--workers``."""

    def report(self) -> tuple[bool, list[str]]: ...


async def registry_metrics(accept: str) -> tuple[str, bytes]:
    """This process's Prometheus registry, encoded as the scraper asked (text or OpenMetrics)."""
    encoder, content_type = choose_encoder(accept)
    body = await asyncio.get_running_loop().run_in_executor(None, encoder, REGISTRY)
    return content_type, body


class AdminServer:
    """Serves the admin paths on ``listen`` until ``close``."""

    def __init__(
        self,
        listen: HostPort,
        readiness: ReadinessReport,
        metrics: MetricsSource = registry_metrics,
        reload: ReloadAction | None = None,
        config: ConfigView | None = None,
    ) -> None:
        self.listen = listen
        self.readiness = readiness
        self.metrics = metrics
        self.reload = reload
        self.config = config
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(
                self._handle, self.listen.host, self.listen.port, limit=MAX_HEAD_BYTES, reuse_address=True
            )
        except OSError as exc:
            raise OSError(exc.errno, f"admin: cannot listen on {self.listen}: {exc.strerror or exc}") from exc
        log.info("admin listener on http://%s (/livez, /readyz, /metrics, /config, POST /reload)", self.listen)

    @property
    def port(self) -> int:
        """The bound port (the configured one, or the one the OS chose for port 0)."""
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
            method, path, accept = _parse_head(head)
            if method is None:
                answer: Answer = (400, TEXT, b"bad request\n")
            else:
                answer = await self._answer(method, path, accept, writer.get_extra_info("peername"))
            status, content_type, body = answer
            headers = [
                f"HTTP/1.1 {status} {_REASONS[status]}",
                f"Content-Type: {content_type}",
                f"Content-Length: {len(body)}",
                "Connection: close",
                "Cache-Control: no-store",
            ]
            if status == 405:
                headers.append("Allow: POST" if path == "/reload" else "Allow: GET, HEAD")
            writer.write(("\r\n".join(headers) + "\r\n\r\n").encode("latin-1"))
            if method != "HEAD":
                writer.write(body)
            await writer.drain()
        except ConnectionError:
            pass
        except asyncio.CancelledError:
            # shutdown cancels a handler still waiting: end it normally, for Python 3.11's stream
            # callback calls task.exception() on a cancelled task and logs the raise as a traceback
            pass
        except Exception:  # a bug here must not take the listener down
            log.exception("admin request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _answer(self, method: str, path: str, accept: str, peer: object = None) -> Answer:
        if path == "/reload" and self.reload is not None:
            return await self._reload(method, peer)
        if path not in ("/livez", "/readyz", "/metrics", "/config") or (path == "/config" and self.config is None):
            return 404, TEXT, b"not found: kgate serves /livez, /readyz, /metrics, /config and POST /reload\n"
        if method not in ("GET", "HEAD"):
            return 405, TEXT, b"method not allowed: use GET or HEAD\n"
        if path == "/config":
            if not is_loopback(peer):  # redacted, but policies and topology are still an operator's to read
                return 403, TEXT, b"forbidden: GET /config is answered to loopback only\n"
            assert self.config is not None
            return 200, JSON, await self.config()
        if path == "/livez":
            return 200, TEXT, b"ok\n"
        if path == "/readyz":
            ready, lines = self.readiness.report()
            body = "\n".join(["ready" if ready else "not ready", *lines]) + "\n"
            return (200 if ready else 503), TEXT, body.encode()
        content_type, data = await self.metrics(accept)
        return 200, content_type, data

    async def _reload(self, method: str, peer: object) -> Answer:
        if method != "POST":
            return 405, TEXT, b"method not allowed: use POST /reload\n"
        if not is_loopback(peer):
            log.warning("POST /reload from %s refused: only a loopback peer may reload", _host(peer))
            return 403, TEXT, b"forbidden: POST /reload is accepted from loopback only\n"
        assert self.reload is not None
        result = await self.reload()
        body = json.dumps({"result": "success" if result.ok else "failure", "message": result.message})
        return (200 if result.ok else 500), JSON, (body + "\n").encode()


def _host(peer: object) -> str:
    return str(peer[0]) if isinstance(peer, tuple) and peer else "?"


def is_loopback(peer: object) -> bool:
    """Whether a socket peer (``peername``) is this host's loopback, IPv4-mapped IPv6 included."""
    try:
        addr = ipaddress.ip_address(_host(peer).split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped.is_loopback
    return addr.is_loopback


def _parse_head(head: bytes) -> tuple[str | None, str, str]:
    """(method, path without query, Accept header) of a request head; method None if it does not parse."""
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes every byte
        return None, "", ""
    request_line, _, rest = text.partition("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[0].isalpha():
        return None, "", ""
    accept = ""
    for line in rest.split("\r\n"):
        name, sep, value = line.partition(":")
        if sep and name.strip().lower() == "accept":
            accept = value.strip()
    return parts[0], parts[1].split("?", 1)[0], accept
