"""One virtual cluster at runtime: its listeners, the node map and its client connections.

Port-per-broker: clients reach every upstream node through a kgate listener of its own.
The port for node N is ``node_ports.base + N - node_ports.first_node_id``: a pure function
of the config, so every instance of an HA fleet hands clients the same address for the
same node, whichever instance served their Metadata. One exception keeps single-broker
setups to one port: with ``bootstrap_serves_node`` and exactly one upstream bootstrap
server that is itself an advertised broker, that broker's node is served on the bootstrap
port (the bootstrap connection goes to that very broker, so it is the same route).

A node's listener is bound synchronously the moment a response first names the node,
before the rewritten response reaches the client, so the client's next connect never races
the bind.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from kgate.api import TopicNameError
from kgate.codec import api
from kgate.codec.generated.api_keys import METADATA
from kgate.config import (
    ClientMetricsConfig,
    ProxySettings,
    TopicMetricsConfig,
    TopicNamesConfig,
    VirtualClusterConfig,
)
from kgate.config.tls_context import TlsFileError
from kgate.filters.chain import FilterChain
from kgate.filters.exchanges import ExchangeObserver, fan_out
from kgate.proxy.carrier.connect_deadlines import ConnectDeadlines
from kgate.proxy.carrier.front_door import FrontDoor, RefusalLog
from kgate.proxy.carrier.gentle_close import GentleCloser
from kgate.proxy.carrier.held_bytes import HELD
from kgate.proxy.carrier.own_listeners import OWN_LISTENERS
from kgate.proxy.carrier.proxy_protocol import SourceFilter
from kgate.proxy.carrier.timeouts import sweep_forever
from kgate.proxy.carrier.tls import ReloadingContext
from kgate.proxy.carrier.upstream_client import UpstreamClient, UpstreamError
from kgate.proxy.control.client_metrics import ClientMetrics
from kgate.proxy.control.exchange_metrics import ExchangeMetrics
from kgate.proxy.control.metrics import ClusterMetrics
from kgate.proxy.control.topic_metrics import TopicMetrics
from kgate.proxy.runtime import frozen_heap
from kgate.proxy.runtime.cluster_services import ClusterServicesImpl
from kgate.proxy.runtime.worker_env import worker_index
from kgate.proxy.sansio.chain_handover import RetiredChain
from kgate.proxy.sansio.chain_tables import ChainTables, names_in_use
from kgate.proxy.sansio.close_reason import CloseReason
from kgate.proxy.sansio.cluster_port import OPEN_LISTENER, OpenListener
from kgate.topic_ids import TopicNameResolver

if TYPE_CHECKING:
    from kgate.proxy.carrier.connection import ClientConnection

log = logging.getLogger("kgate.cluster")

LISTEN_BACKLOG = 1024
DISCOVERY_RETRY_S = (0.5, 1, 2, 5, 10, 30)
REFUSAL_LOG_EVERY_S = 10.0  # connections refused at max_connections: one log line per listener per this
FILLED_LOG_EVERY_S = 10.0  # "a Metadata answer named no broker": one line per cluster per this
BIND_RETRY_S = (0.5, 1, 2, 5, 10, 30)  # a node port that cannot be bound: retried after these, then every 30 s


#: ``--workers``: every worker binds the same ports (SO_REUSEPORT; the kernel spreads new connections).
#: Off otherwise, so a second kgate on the same ports still fails with "address in use".
SHARED_LISTENERS = False


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if SHARED_LISTENERS:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class VirtualCluster:
    """Runtime state of one configured virtual cluster."""

    def __init__(
        self,
        cfg: VirtualClusterConfig,
        settings: ProxySettings,
        chain: FilterChain | None = None,
        topic_names: TopicNamesConfig | None = None,
        exchange_metrics: bool = False,
        topic_metrics: TopicMetricsConfig | None = None,
        client_metrics: ClientMetricsConfig | None = None,
    ) -> None:
        self.cfg = cfg
        #: per finished exchange (filters/exchanges.py): set in ``start`` from the filters that ask
        #: and the per-exchange metrics; None (the core's zero-cost case) when nobody observes
        self.exchange_observer: ExchangeObserver | None = None
        self.exchange_metrics = ExchangeMetrics(cfg.name) if exchange_metrics else None
        cm = client_metrics or ClientMetricsConfig()
        #: per-client counters (proxy/control/client_metrics.py): only with the admin listener, and when enabled
        self.client_metrics = (
            ClientMetrics(cfg.name, cm.max_clients, lambda: [c.info for c in self.connections])
            if exchange_metrics and cm.enabled
            else None
        )
        self.settings = settings
        self.name = cfg.name
        self.metrics = ClusterMetrics(cfg.name)  # before the chain: its plans count requests in it
        self._use_chain(chain if chain is not None else FilterChain([]))
        #: chains a reload replaced that exchanges still use (closed once none does: proxy/sansio/chain_handover.py)
        self.retired_chains: list[RetiredChain] = []
        self._handovers: dict[RetiredChain, asyncio.TimerHandle] = {}  # the warning if one retires slowly
        self._closing: set[asyncio.Task[None]] = set()  # replaced chains being closed
        HELD.cap = settings.max_held_bytes  # process-wide: proxy settings are global
        self.gentle = GentleCloser()  # broker connections whose client left: FIN, then a full close
        self.connect_deadlines = ConnectDeadlines()  # one timer for the upstream connects under way
        self.connections: set[ClientConnection] = set()
        self.upstream_nodes: dict[int, tuple[str, int]] = {}  # node id -> broker's own address
        self._servers: list[asyncio.base_events.Server] = []
        self._node_ports: dict[int, int] = {}  # node id -> kgate port, once bound
        self._refused: set[int] = set()  # node ids already logged as unservable
        self._bootstrap_node: int | None = None
        self._filled_logged = -FILLED_LOG_EVERY_S  # monotonic time of the last "no broker" line
        self._filled_since = 0  # such answers completed since that line
        self._rr = 0
        #: the bootstrap targets, in configured order (a cluster's config is fixed for its life)
        self._boot = tuple((u.host, u.port) for u in cfg.upstream)
        single = cfg.upstream[0] if len(cfg.upstream) == 1 else None
        self._bootstrap_addr = (single.host.lower(), single.port) if single and cfg.bootstrap_serves_node else None
        self._setup_tls_and_proxy_protocol(cfg)
        self.own_client = UpstreamClient(
            lambda: self.upstream_targets(None),
            connect_timeout_s=settings.connect_timeout_s,
            max_frame_bytes=settings.max_frame_bytes,
            auth=cfg.upstream_auth,
            refuse_own_listeners=True,
            tls=self.upstream_tls,
            server_hostname=self.upstream_server_hostname,
            on_tls_failure=lambda: self.metrics.tls_handshake_failed("upstream"),
        )
        self._discovery: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None  # idle, frame and upstream timeouts
        self.stopping = False
        self._serve_tasks: set[asyncio.Task[None]] = set()
        self._unserved: set[socket.socket] = set()  # bound node sockets whose server is starting
        self._bind_attempts: dict[int, int] = {}  # node id -> failed binds in a row
        self._bind_retry: dict[int, asyncio.TimerHandle] = {}  # node id -> scheduled retry
        self._listener_conns: dict[int | None, int] = {}  # listener (node id, None = bootstrap) -> open
        self._refused_conns: dict[int | None, int] = {}  # refusals not logged yet, per listener
        self._refusal_logged: dict[int | None, float] = {}  # when each listener last logged refusals
        self._own_keys: list[tuple[str, int]] = []  # this cluster's entries in OWN_LISTENERS
        self._self_refused: set[tuple[int, str, int]] = set()  # (node, host, port) logged as kgate's own
        tn = topic_names or TopicNamesConfig()
        self.topic_names = TopicNameResolver(
            self.own_client,
            cluster=cfg.name,
            batch_window_s=tn.batch_window_ms / 1000,
            negative_ttl_s=tn.negative_ttl_s,
            max_entries=tn.max_entries,
            idle_revalidate_s=tn.idle_revalidate_s,
            sweep_interval_s=tn.sweep_interval_s,
            lookup_timeout_s=tn.lookup_timeout_s,
        )
        tm = topic_metrics or TopicMetricsConfig()
        if self.exchange_metrics is not None and tm.enabled:
            self.exchange_metrics.topics = TopicMetrics(cfg.name, tm.max_topics, self.topic_names)
        #: what filters use outside a message (Filter.start): own requests, topic names
        self.services = ClusterServicesImpl(self)

    def _use_chain(self, chain: FilterChain) -> None:
        """Make ``chain`` the one new connections (and connections handed over) use, with what derives from it."""
        tables = ChainTables(chain, self.metrics.request_count)
        self.chain = chain
        self.version_limits = tables.version_limits
        self.answers = tables.answers
        self.filter_limits = tables.filter_limits
        self.plans = tables.plans

    def replace_chain(self, chain: FilterChain) -> None:
        """Configuration reload: ``chain`` for every request read from now on (proxy/sansio/chain_handover.py).

        The new filters start (``Filter.start``, exchange observers) before any request can reach
        them; every open connection reads its next request with them at once, while each exchange
        already started finishes on the old chain (its response hooks, state and observers). The
        old chain's filters close once its last exchange has ended, so no audit event of the old
        chain is lost and no connection is closed or paused.
        """
        old = RetiredChain(self.chain, self.exchange_observer, self._retired_idle)
        self._use_chain(chain)
        self._install_exchange_observers()
        for f in chain.filters:
            f.start(self.services)
        self.retired_chains.append(old)
        for conn in list(self.connections):
            conn.switch_chain(old)
        old.release()  # the reload's own hold: the chain closes now if no exchange had started on it
        if not old.done:
            loop = asyncio.get_running_loop()
            self._handovers[old] = loop.call_later(self.settings.drain_timeout_s, self._still_retiring, old)

    def _still_retiring(self, old: RetiredChain) -> None:
        self._handovers.pop(old, None)
        if not old.done:
            log.warning(
                "cluster %s: %d exchange(s) still on the replaced filter chain after %gs; "
                "its filters close when the last one ends",
                self.name,
                old.users,
                self.settings.drain_timeout_s,
            )

    def _retired_idle(self, old: RetiredChain) -> None:
        """No exchange uses a replaced chain any more: close its filters (unless shutdown took it)."""
        if old in self.retired_chains:
            self.retired_chains.remove(old)
        handle = self._handovers.pop(old, None)
        if handle is not None:
            handle.cancel()
        log.info(
            "cluster %s: the replaced filter chain's last exchange ended after %.0f ms; closing its filters",
            self.name,
            (time.monotonic() - old.retired_at) * 1000,
        )
        closing = asyncio.get_running_loop().create_task(old.chain.close())
        self._closing.add(closing)
        closing.add_done_callback(self._closed_retired)

    def _closed_retired(self, task: asyncio.Task[None]) -> None:
        self._closing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("cluster %s: closing a replaced filter chain failed: %r", self.name, task.exception())
        freed = frozen_heap.release_retired()  # the old chain was built before gc.freeze()
        if freed:
            log.debug("cluster %s: the replaced filter chain's cycles collected (%d objects)", self.name, freed)

    def _setup_tls_and_proxy_protocol(self, cfg: VirtualClusterConfig) -> None:
        """Contexts (reloaded as their files change) and the PROXY protocol's trusted sources.

        The loader built both contexts once already, so a failure here means the files changed
        between load and start: a start-up failure (exit 1) naming the key, never a half-TLS cluster.
        """
        #: client-facing TLS; None: plaintext listeners
        self.client_tls: ReloadingContext | None = None
        #: TLS towards the brokers, for client connections and kgate's own; None: plaintext
        self.upstream_tls: ReloadingContext | None = None
        self.upstream_server_hostname = cfg.upstream_tls.server_hostname if cfg.upstream_tls else None
        self.proxy_protocol = cfg.proxy_protocol
        self.proxy_sources = SourceFilter(cfg.proxy_protocol.trusted_sources if cfg.proxy_protocol else ())
        self.doors: set[FrontDoor] = set()  # connections still in their PROXY header or TLS handshake
        self.refusals = RefusalLog()
        try:
            if cfg.tls is not None:
                self.client_tls = ReloadingContext.for_clients(cfg.name, cfg.tls)
            if cfg.upstream_tls is not None:
                self.upstream_tls = ReloadingContext.for_brokers(cfg.name, cfg.upstream_tls)
        except TlsFileError as exc:
            which = "tls" if self.client_tls is None and cfg.tls is not None else "upstream_tls"
            raise OSError(f"cluster {cfg.name}: {which}.{exc.key}: {exc.problem}") from None
        if cfg.upstream_tls is not None and not cfg.upstream_tls.verify:
            log.warning(
                "cluster %s: upstream_tls.verify is false: broker certificates are NOT checked "
                "(anyone on the path can pose as the brokers)",
                cfg.name,
            )

    # -- listeners -------------------------------------------------------------------------
    def _bind(self, port: int) -> socket.socket:
        """Bind a listener of this cluster and record it as one of kgate's own addresses."""
        sock = _bind(self.cfg.listen.host, port)
        self._own_keys.append(OWN_LISTENERS.add(sock, self.cfg.advertised_host))
        return sock

    async def start(self) -> None:
        self._install_exchange_observers()
        try:
            sock = self._bind(self.cfg.listen.port)
        except OSError as exc:
            # The bare "[Errno 98] Address already in use" names nothing; an operator needs which one.
            raise OSError(
                exc.errno, f"cluster {self.name}: cannot listen on {self.cfg.listen}: {exc.strerror or exc}"
            ) from exc
        await self._serve(sock, None)
        log.info(
            "cluster %s: bootstrap listener %s -> upstream %s",
            self.name,
            self.cfg.listen,
            ", ".join(str(u) for u in self.cfg.upstream),
        )
        for tls in (self.client_tls, self.upstream_tls):
            if tls is not None:
                tls.start()
        self._discovery = asyncio.get_running_loop().create_task(self._discover_nodes())
        self._sweeper = asyncio.get_running_loop().create_task(sweep_forever(self))
        self.topic_names.start()
        for f in self.chain.filters:
            f.start(self.services)

    def _install_exchange_observers(self) -> None:
        """Ask the filters that observe exchanges (``observe_exchanges``) for their observers.

        Before any listener opens: a connection reads ``exchange_observer`` once, when it starts.
        """
        observers: list[ExchangeObserver] = []
        if self.exchange_metrics is not None:
            observers.append(self.exchange_metrics.observe)
        if self.client_metrics is not None:
            observers.append(self.client_metrics.observe)
        for f in self.chain.filters:
            attach = getattr(f, "observe_exchanges", None)
            if attach is not None:
                found = attach(ClusterExchangeServices(self, asyncio.get_running_loop()))
                if found is not None:
                    observers.append(found)
        self.exchange_observer = fan_out(observers)

    async def _discover_nodes(self) -> None:
        """Learn every node and open its listener before any client asks (HA fleets).

        A client may hold Metadata that another kgate instance served and connect straight to
        a node port of this one; without discovery that port would not be open yet. Retried
        with backoff until the cluster answers once; clients' own Metadata keeps it fresh after.
        """
        request = api.API_INFO[METADATA].request_class(topics=[], allow_auto_topic_creation=False)
        for delay in (0, *DISCOVERY_RETRY_S):
            await asyncio.sleep(delay)
            try:
                _version, resp = await self.own_client.request(METADATA, request, lo=1)
            except UpstreamError as exc:
                log.warning("cluster %s: node discovery failed (%s); retrying", self.name, exc)
                continue
            for broker in resp.brokers:
                self.client_address(broker.node_id, broker.host, broker.port)
            log.info("cluster %s: discovered nodes %s", self.name, sorted(b.node_id for b in resp.brokers))
            return
        log.error("cluster %s: node discovery gave up; node ports open as clients' Metadata names them", self.name)

    async def _serve(self, sock: socket.socket, node_id: int | None) -> None:
        from kgate.proxy.carrier.connection import ClientConnection

        loop = asyncio.get_running_loop()
        if self.proxy_protocol is not None or self.client_tls is not None:
            # the PROXY header first if any, then the TLS handshake if any (proxy/carrier/front_door.py)
            server = await loop.create_server(lambda: FrontDoor(self, node_id, loop), sock=sock, backlog=LISTEN_BACKLOG)
        else:
            server = await loop.create_server(
                lambda: ClientConnection(self, node_id, loop), sock=sock, backlog=LISTEN_BACKLOG
            )
        self._servers.append(server)
        if self.stopping:
            server.close()  # bound just before shutdown began

    def stop_accepting(self) -> None:
        """Close every listener; no new node listener opens from now on."""
        self.stopping = True
        if self._discovery is not None:
            self._discovery.cancel()
        for handle in self._bind_retry.values():
            handle.cancel()
        self._bind_retry.clear()
        for server in self._servers:
            server.close()
        for sock in self._unserved:
            sock.close()
        self.metrics.node_listeners.set(0)  # all closed (a cluster a reload removed keeps its series at 0)
        self._forget_own_listeners()

    def _forget_own_listeners(self) -> None:
        """Take this cluster's listeners out of OWN_LISTENERS (idempotent): they are closed."""
        for key in self._own_keys:
            OWN_LISTENERS.remove(key, self.cfg.advertised_host)
        self._own_keys.clear()

    def begin_drain(self) -> None:
        """Stop reading new requests; connections close as soon as they owe nothing."""
        for conn in list(self.connections):
            conn.begin_drain()

    def close_drained(self) -> None:
        for conn in list(self.connections):
            if conn.drained:
                conn.close(CloseReason.DRAINED, "drained for shutdown")

    def listening(self) -> bool:
        """Whether the bootstrap listener is open (``/readyz``)."""
        return bool(self._servers) and self._servers[0].is_serving()

    def unbound_nodes(self) -> set[int]:
        """Node ids whose listener kgate tried to open and could not yet (retrying; ``/readyz``)."""
        return set(self._bind_attempts)

    @property
    def listening_ports(self) -> dict[int | None, int]:
        """kgate port per node id (None = bootstrap); for tests and the startup log."""
        ports: dict[int | None, int] = {None: self.cfg.listen.port}
        ports.update(self._node_ports.items())
        return ports

    # -- connection limit ------------------------------------------------------------------
    def admit(self, node_id: int | None, peer: str) -> bool:
        """Whether a new connection to a listener fits under ``max_connections``.

        A refused connection is closed at once (Kafka does the same at ``max.connections``), counted,
        and logged at most once per ``REFUSAL_LOG_EVERY_S`` per listener with the number refused
        meanwhile, so a flood cannot flood the log too.
        """
        count = self._listener_conns.get(node_id, 0)
        if count < self.cfg.max_connections:
            self._listener_conns[node_id] = count + 1
            return True
        self.metrics.refused_connection("max_connections")
        refused = self._refused_conns.get(node_id, 0) + 1
        now = asyncio.get_running_loop().time()
        if now - self._refusal_logged.get(node_id, -REFUSAL_LOG_EVERY_S) >= REFUSAL_LOG_EVERY_S:
            port = self.listening_ports.get(node_id, 0)
            log.warning(
                "cluster %s: listener port %d holds max_connections (%d); refused %s and %d more since the last report",
                self.name,
                port,
                self.cfg.max_connections,
                peer,
                refused - 1,
            )
            self._refusal_logged[node_id] = now
            refused = 0
        self._refused_conns[node_id] = refused
        return False

    def release(self, node_id: int | None) -> None:
        """An admitted connection closed."""
        self._listener_conns[node_id] = self._listener_conns.get(node_id, 1) - 1

    # -- node map --------------------------------------------------------------------------
    def client_address(self, node_id: int, host: str, port: int) -> tuple[str, int] | None:
        """Learn a node's broker address and return the address clients must use for it, binding
        its listener now if it needs one (discovery and readiness; a connection's core asks
        ``learn_node`` and has its carrier bind: ``ClientConnection.open_listener``)."""
        addr = self.learn_node(node_id, host, port)
        return self.open_node_listener(node_id) if addr is OPEN_LISTENER else addr  # type: ignore[return-value]

    def learn_node(self, node_id: int, host: str, port: int) -> tuple[str, int] | OpenListener | None:
        """Learn a node's broker address; the address clients must use for it, ``OPEN_LISTENER`` when
        its listener is not bound yet (the caller binds it: ``open_node_listener``), or None.

        Only ever called with addresses a broker sent (never with a message kgate already
        rewrote: see ``mapped_address``). An address that is one of kgate's own listeners or
        client-facing addresses is refused and not learned: routing the node there would make
        kgate connect to itself, connection after connection.
        """
        if OWN_LISTENERS.learned_is_own(host, port):
            key = (node_id, host, port)
            if key not in self._self_refused:
                self._self_refused.add(key)
                log.error(
                    "cluster %s: a response names %s:%d, one of kgate's own addresses, as node %d; "
                    "not learned (kgate would connect to itself) and left out of responses",
                    self.name,
                    host,
                    port,
                    node_id,
                )
            self.metrics.self_address_refused.inc()
            return None
        self.upstream_nodes[node_id] = (host, port)
        advertised = self.cfg.advertised_host
        if node_id == self._bootstrap_node:
            return advertised, self.cfg.listen.port
        if (
            self._bootstrap_addr is not None
            and self._bootstrap_node is None
            and (host.lower(), port) == self._bootstrap_addr
        ):
            self._bootstrap_node = node_id
            log.info(
                "cluster %s: node %d is the bootstrap server; served on the bootstrap port %d",
                self.name,
                node_id,
                self.cfg.listen.port,
            )
            return advertised, self.cfg.listen.port
        kport = self._node_ports.get(node_id)
        if kport is not None:
            return advertised, kport
        return OPEN_LISTENER

    def mapped_address(self, node_id: int, host: str, port: int) -> tuple[str, int] | None:
        """The client-facing address of a node kgate already routes, learning nothing.

        For a response that was rewritten once already and then changed by a filter: its
        addresses are kgate's own by now, and learning from them would route the node to kgate
        itself. A node kgate does not route yet (a hook added it) is left out.
        """
        if node_id not in self.upstream_nodes:
            return None
        if node_id == self._bootstrap_node:
            return self.cfg.advertised_host, self.cfg.listen.port
        kport = self._node_ports.get(node_id)
        return None if kport is None else (self.cfg.advertised_host, kport)

    def nodes_for_empty_answer(self) -> list[tuple[int, str, int]]:
        """A Metadata answer named no broker (a fenced broker's, at the end of its controlled
        shutdown): every node kgate routes, at its client-facing address, to complete it with
        (proxy/sansio/rewrite.py, ``fill_brokers``). Counted, and logged at most once per
        ``FILLED_LOG_EVERY_S``: called only for such answers, so the count is theirs."""
        nodes = []
        for node_id, (host, port) in self.upstream_nodes.items():
            addr = self.mapped_address(node_id, host, port)
            if addr is not None:
                nodes.append((node_id, *addr))
        self._filled_since += 1
        now = time.monotonic()
        if now - self._filled_logged >= FILLED_LOG_EVERY_S:
            log.info(
                "cluster %s: a Metadata answer named no broker (a broker fenced while it stops?); "
                "kgate answered with the %d node(s) it serves (%d such answer(s) since the last line)",
                self.name,
                len(nodes),
                self._filled_since,
            )
            self._filled_logged, self._filled_since = now, 0
        return nodes

    def _served(self, task: asyncio.Task[None], sock: socket.socket, node_id: int) -> None:
        self._serve_tasks.discard(task)
        self._unserved.discard(sock)
        if not task.cancelled() and task.exception() is not None and not self.stopping:
            log.error("cluster %s: node %d listener failed to start: %s", self.name, node_id, task.exception())

    def open_node_listener(self, node_id: int) -> tuple[str, int] | None:
        if self.stopping:
            return None  # shutting down: no new listeners
        if node_id in self._bind_retry:
            return None  # its port failed to bind: the scheduled retry binds it, not every Metadata answer
        kport = self.cfg.node_ports.port_for(node_id)
        if kport is None:
            if node_id not in self._refused:
                self._refused.add(node_id)
                np = self.cfg.node_ports
                log.error(
                    "cluster %s: node id %d is outside node_ports (first_node_id %d, count %d); "
                    "clients cannot be routed to it and it is left out of responses",
                    self.name,
                    node_id,
                    np.first_node_id,
                    np.count,
                )
            return None
        try:
            sock = self._bind(kport)
        except OSError as exc:
            self._bind_failed(node_id, kport, exc)
            return None
        self._node_ports[node_id] = kport
        self._refused.discard(node_id)
        if self._bind_attempts.pop(node_id, 0):
            log.info(
                "cluster %s: node %d listener bound on %s:%d after retrying",
                self.name,
                node_id,
                self.cfg.listen.host,
                kport,
            )
        self._unserved.add(sock)
        task = asyncio.get_running_loop().create_task(self._serve(sock, node_id))
        self._serve_tasks.add(task)
        task.add_done_callback(lambda t: self._served(t, sock, node_id))
        self.metrics.node_listeners.set(len(self._node_ports))
        log.info(
            "cluster %s: node %d served on port %d -> %s:%d",
            self.name,
            node_id,
            kport,
            *self.upstream_nodes[node_id],
        )
        return self.cfg.advertised_host, kport

    def _bind_failed(self, node_id: int, kport: int, exc: OSError) -> None:
        """A node port that cannot be bound now is retried with backoff until it can.

        The cause is often passing (a port in TIME_WAIT, another process about to exit): giving up
        would leave the node unservable while kgate looks healthy. Each failure is counted; the
        log line comes once per attempt, and attempts slow to one per ``BIND_RETRY_S[-1]`` seconds.
        While unbound the node is left out of responses (clients cannot be routed to it).
        """
        self.metrics.node_listener_bind_failures.inc()
        attempt = self._bind_attempts.get(node_id, 0) + 1
        self._bind_attempts[node_id] = attempt
        delay = BIND_RETRY_S[min(attempt - 1, len(BIND_RETRY_S) - 1)]
        log.error(
            "cluster %s: cannot listen on %s:%d for node %d: %s (attempt %d; retrying in %gs)",
            self.name,
            self.cfg.listen.host,
            kport,
            node_id,
            exc.strerror or exc,
            attempt,
            delay,
        )
        if node_id not in self._bind_retry:
            self._bind_retry[node_id] = asyncio.get_running_loop().call_later(delay, self._retry_bind, node_id)

    def _retry_bind(self, node_id: int) -> None:
        self._bind_retry.pop(node_id, None)
        if self.stopping or node_id in self._node_ports:
            return
        addr = self.upstream_nodes.get(node_id)
        if addr is not None:
            self.open_node_listener(node_id)

    def observe_response(self, api_key: int, version: int, msg: Any, request: Any = None) -> None:
        """Let the topic-name service learn from a decoded response passing by.

        What each api key's response teaches is ``kgate.topic_ids.observers.OBSERVERS``; ``request``
        is the decoded request where kgate has it (CreateTopics' validate_only, Fetch positions).
        """
        self.topic_names.observe(api_key, version, msg, request)

    @property
    def names_in_use(self) -> bool:
        """Whether any filter may ask for topic names (passive learning is worth its cost)."""
        return names_in_use(self.chain)

    def upstream_targets(self, node_id: int | None) -> Sequence[tuple[str, int]]:
        """Where a client connection of this listener goes, in the order to try."""
        if node_id is not None:
            addr = self.upstream_nodes.get(node_id)
            if addr is not None:
                return (addr,)
        boot = self._boot
        if len(boot) == 1:
            return boot  # the usual case: nothing to rotate
        self._rr = (self._rr + 1) % len(boot)
        return boot[self._rr :] + boot[: self._rr]

    # -- shutdown --------------------------------------------------------------------------
    def inflight(self) -> int:
        return sum(c.inflight_count for c in self.connections)

    def close_connections(self) -> None:
        for door in list(self.doors):
            door.close()
        for conn in list(self.connections):
            conn.close(CloseReason.SHUTDOWN, "kgate is shutting down")

    async def wait_closed(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for tls in (self.client_tls, self.upstream_tls):
            if tls is not None:
                tls.stop()
        for task in list(self._serve_tasks):
            task.cancel()
        # filters first: one may still need names while it finishes (the audit log resolves the ids
        # of its last events) and their background tasks may still use the clients; then the
        # resolver, then the filters' own connections and kgate's own connection
        for handle in self._handovers.values():
            handle.cancel()
        self._handovers.clear()
        retired, self.retired_chains = self.retired_chains, []
        for old in retired:
            if old.take():  # exactly once: never again when its last connection closes below
                await old.chain.close()
        if self._closing:
            await asyncio.wait(set(self._closing))
        await self.chain.close()
        await self.topic_names.close()
        self.services.close()
        self.own_client.close()
        for server in self._servers:
            server.close()
            await server.wait_closed()
        self._forget_own_listeners()


class ClusterExchangeServices:
    """What a filter observing exchanges gets of its cluster (``filters.exchanges.ExchangeServices``)."""

    def __init__(self, cluster: VirtualCluster, loop: asyncio.AbstractEventLoop) -> None:
        self._cluster = cluster
        self._loop = loop

    @property
    def cluster(self) -> str:
        return self._cluster.name

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    @property
    def worker(self) -> int | None:
        return worker_index()

    def cached_topic_name(self, topic_id: UUID) -> str | None:
        return self._cluster.topic_names.cached(topic_id)

    async def topic_names(self, topic_ids: Iterable[UUID]) -> dict[UUID, str | TopicNameError]:
        return await self._cluster.topic_names.resolve(topic_ids)
