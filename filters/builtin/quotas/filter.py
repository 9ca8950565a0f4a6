"""The ``quotas`` filter: produce and fetch bytes, requests and connections per second, per client.

Enforced as a Kafka broker enforces its quotas (KIP-219): the client is not refused anything; the
answer carries ``throttle_time_ms`` (the larger of the broker's and kgate's) and kgate stops
reading the client's connection for the throttle time, so a client that ignores the field is
slowed all the same. Which rule applies to whom and how rates are measured: rate.py.

**Recording.** A Produce is charged its frame's bytes when kgate reads it (from the header: the
records still stream through): a producer keeps many requests in flight, and the connection must
stop being read the moment the budget is spent (a Kafka broker reads one request per connection
at a time, so it gets this for free). A fetch-limited client's Fetch answer is charged by the
answer's hook (below). Requests are counted when their answer has been handed to the client
(``observe_exchanges``: nothing decoded), one each, and a new connection at its first request.
A client in debt gets its connection muted for the throttle time, as a broker mutes the channel
of a throttled client.
The throttle time a Produce or Fetch answer carries is the client's debt when that answer
passes, so pipelined requests (a producer keeps five in flight) report it too. Only Produce and
Fetch answers carry it (kgate decodes no other answers for it); a request-rate throttle reaches
other apis as the muted connection.

**Fetch.** Bytes are known only once the broker answered, so a Fetch is bounded two ways: a
fetch-limited client's request asks for at most one burst (``burst_s`` of its rate; Kafka still
returns the first record batch whole, so a client always makes progress), and its answer is
charged its record bytes by the answer's hook, as a Kafka broker charges a fetch when it builds
the answer: the answer that puts the client in debt carries the throttle time. Those answers are
decoded (a fetch-limited client's are held whole, at most one burst each); everyone else's stream
through as before.

**Fleets.** Budgets are per kgate instance (and per ``--workers`` worker): N instances behind a
load balancer let a client through at up to N times the rate. ``instances: N`` divides every
rate (and burst) by N, for a fleet whose clients spread evenly over N instances.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client.core import REGISTRY, CounterMetricFamily
from prometheus_client.registry import Collector

from kgate.api import (
    FORWARD,
    ApiKey,
    ConnectionInfo,
    Filter,
    FilterConfigError,
    FilterContext,
    forward,
    on_request,
    on_response,
)
from kgate.codec.api import api_name
from kgate.codec.generated.api_keys import FETCH, PRODUCE
from kgate.filters.builtin.quotas.rate import (
    CONNECTIONS,
    FETCH_BYTES,
    PRODUCE_BYTES,
    REQUESTS,
    Rule,
    RuleError,
    TokenBucket,
    client_ip,
    frame_client_id,
    parse_rules,
    resolve,
)
from kgate.filters.exchanges import Answer, ExchangeObserver, ExchangeServices, FinishedExchange

log = logging.getLogger("kgate.quotas")

_STATE = "quotas.client"  # ctx.state key: the client's budgets, for the answer's hook
#: clients (principal, client id, address) whose budgets are remembered; past this the oldest go
MAX_CLIENTS = 100_000
#: (principal, client id) pairs with a throttle series of their own; the rest count as "other"
MAX_THROTTLE_SERIES = 1000
LOG_EVERY_S = 10.0  # one throttle line per client per this


class Client:
    """One connection's view of its budgets, cached on the connection (re-resolved if its ids change)."""

    __slots__ = ("address", "buckets", "charged_cid", "client_id", "owner", "principal")

    def __init__(
        self,
        owner: Quotas,
        principal: str | None,
        client_id: str | None,
        address: str,
        buckets: list[TokenBucket | None],
    ) -> None:
        self.owner = owner
        self.principal = principal
        self.client_id = client_id
        self.address = address
        self.buckets = buckets
        self.charged_cid: int | None = None  # the last Produce charged (its correlation id)

    def debt(self, kind: int, now: float) -> float:
        """The throttle, in seconds, an answer of ``kind`` (Produce or Fetch bytes) carries now."""
        worst = 0.0
        for bucket in (self.buckets[kind], self.buckets[REQUESTS]):
            if bucket is not None:
                worst = max(worst, bucket.throttle(now))
        return worst


def _number(config: Mapping[str, Any], key: str, default: float, minimum: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise FilterConfigError(f"{key}: expected a number >= {minimum}, got {value!r}")
    return float(value)


class Quotas(Filter):
    """Kafka-style client quotas at the proxy (see the module doc and docs/quotas.md)."""

    name = "quotas"
    uses_topic_names = False  # budgets are per client, never per topic

    @classmethod
    def validate_config(cls, config: Mapping[str, Any]) -> Mapping[str, Any]:
        allowed = {"rules", "instances", "burst_s", "max_throttle_ms"}
        unknown = set(config) - allowed
        if unknown:
            raise FilterConfigError(f"unknown keys {sorted(unknown)} (allowed: {', '.join(sorted(allowed))})")
        if "rules" not in config:
            raise FilterConfigError(
                "rules: required key is missing (a list of {client_id|principal|client_cidr, limits})"
            )
        try:
            parse_rules(config["rules"])
        except RuleError as exc:
            raise FilterConfigError(str(exc)) from None
        instances = config.get("instances", 1)
        if isinstance(instances, bool) or not isinstance(instances, int) or instances < 1:
            raise FilterConfigError(f"instances: expected an integer >= 1, got {instances!r}")
        return {
            "rules": [dict(r) for r in config["rules"]],
            "instances": instances,
            "burst_s": _number(config, "burst_s", 1.0, 0.0),
            "max_throttle_ms": int(_number(config, "max_throttle_ms", 10_000, 1)),
        }

    def __init__(self, config: Mapping[str, Any], clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(config)
        self.rules: list[Rule] = parse_rules(config["rules"])
        self.share = 1.0 / config["instances"]
        self.burst_s = float(config["burst_s"])
        self.max_throttle_s = config["max_throttle_ms"] / 1000.0
        self.clock = clock
        #: (kind, entity) -> its bucket; entity as quotas_rate.Rule.entity
        self.buckets: dict[tuple[int, tuple[Any, ...]], TokenBucket] = {}
        #: clients by (principal, client id, address), for connections without a slot of their own
        self.clients: dict[tuple[str | None, str | None, str], Client] = {}
        self.cluster = ""
        #: (principal, client id) -> seconds of throttle kgate applied (kgate_client_throttle_seconds_total)
        self.throttled: defaultdict[tuple[str, str], float] = defaultdict(float)
        self._logged: dict[tuple[Any, ...], float] = {}
        self._retiring: weakref.finalize | None = None
        _LIVE.add(self)

    # -- budgets ---------------------------------------------------------------------------
    def client(self, info: ConnectionInfo, now: float) -> Client:
        """The budgets of ``info``'s client, resolved once per connection (again if its ids change)."""
        cached: Client | None = getattr(info, "quota_client", None)
        if (
            cached is not None
            and cached.owner is self
            and cached.client_id == info.client_id
            and cached.principal == info.principal
        ):
            return cached
        key = (info.principal, info.client_id, info.client_address)
        found = self.clients.get(key)
        first = cached is None and found is None  # a connection not seen before: counts as a new one
        if found is None:
            found = Client(self, info.principal, info.client_id, info.client_address, self._budgets(info, now))
            if len(self.clients) >= MAX_CLIENTS:
                self.clients.pop(next(iter(self.clients)))
            self.clients[key] = found
        try:
            info.quota_client = found  # type: ignore[attr-defined]  # kgate's ClientInfo has the slot
        except AttributeError:
            pass  # a ConnectionInfo without it (tests): looked up by key each time
        if first:
            bucket = found.buckets[CONNECTIONS]
            if bucket is not None:
                self._throttle(info, found, bucket.record(1, now), "connections_per_s")
        return found

    def _budgets(self, info: ConnectionInfo, now: float) -> list[TokenBucket | None]:
        chosen = resolve(self.rules, info.principal, info.client_id, client_ip(info.client_address))
        out: list[TokenBucket | None] = []
        for kind, match in enumerate(chosen):
            if match is None:
                out.append(None)
                continue
            rule, entity = match
            key = (kind, entity)
            bucket = self.buckets.get(key)
            if bucket is None:
                limit = rule.limits[kind]
                assert limit is not None
                rate = limit * self.share
                bucket = TokenBucket(rate, rate * self.burst_s, now)
                if len(self.buckets) >= MAX_CLIENTS:
                    self.buckets.pop(next(iter(self.buckets)))
                self.buckets[key] = bucket
            out.append(bucket)
        return out

    # -- recording: every finished exchange -------------------------------------------------
    def observe_exchanges(self, services: ExchangeServices) -> ExchangeObserver:
        self.cluster = services.cluster
        if not self._retiring:
            # a reload replaces the filter: its seconds join the retired ones, so the counter never goes down
            self._retiring = weakref.finalize(self, _retire, services.cluster, self.throttled)
        return self.record

    def record(
        self, ex: FinishedExchange, info: ConnectionInfo, answer: Answer | None, answer_bytes: int | None, end_ns: int
    ) -> None:
        """Count one finished exchange's request; mute the connection if that puts its client in debt."""
        if info.client_id is None:
            info.client_id = frame_client_id(ex.req)  # raw mode parses no header: the first request's id
        now = self.clock()
        client = self.client(info, now)  # a connection's first exchange also counts the connection
        bucket = client.buckets[REQUESTS]
        if bucket is not None:
            self._throttle(info, client, bucket.record(1, now), "requests_per_s", ex.api_key)

    def _throttle(self, info: ConnectionInfo, client: Client, seconds: float, why: str, api_key: int = -1) -> None:
        """Stop reading the client for ``seconds`` (at most ``max_throttle_ms``); count and log it."""
        if seconds <= 0:
            return
        seconds = min(seconds, self.max_throttle_s)
        pause = getattr(info, "pause_reading_for", None)
        if pause is not None:
            pause(seconds)
        series = (info.principal or "", info.client_id or "")
        throttled = self.throttled
        if series not in throttled and len(throttled) >= MAX_THROTTLE_SERIES:
            series = ("other", "other")
        throttled[series] += seconds
        if log.isEnabledFor(logging.INFO):
            self._log_throttle(info, seconds, why, api_key)

    def _log_throttle(self, info: ConnectionInfo, seconds: float, why: str, api_key: int) -> None:
        key = (info.principal, info.client_id, why)
        now = time.monotonic()
        if now - self._logged.get(key, -LOG_EVERY_S) < LOG_EVERY_S:
            return
        if len(self._logged) >= MAX_CLIENTS:
            self._logged.clear()
        self._logged[key] = now
        log.info(
            "client %s (client id %r, principal %r, cluster %s) over %s: throttled %d ms",
            info.client_address,
            info.client_id,
            info.principal,
            self.cluster or info.virtual_cluster,
            why,
            round(seconds * 1000),
            extra={
                "event": "quota_throttle",
                "cluster": info.virtual_cluster,
                "connection": info.client_address,
                "principal": info.principal,
                "client_id": info.client_id,
                "api": api_name(api_key),
                "resource": why,
                "decision": "throttle",
                "throttle_ms": round(seconds * 1000),
            },
        )

    # -- what clients see: the throttle field, bounded fetches --------------------------------
    @on_request(ApiKey.PRODUCE, peek=True)
    def produce(self, ctx: FilterContext, request: Any) -> Any:
        """Charge a Produce's bytes as it is read; mark a limited client's Produce for its answer's hook.

        Charged here, not when answered: a producer keeps many requests in flight, and kgate must
        stop reading the moment the budget is spent, not once the broker has answered what it
        already read (a Kafka broker reads one request per connection at a time). Decided from
        the frame's header alone, so the records still stream through.
        """
        now = self.clock()
        info = ctx.connection
        client = self.client(info, now)
        bucket = client.buckets[PRODUCE_BYTES]
        if bucket is not None:
            size = getattr(ctx, "frame_bytes", 0)
            if size and client.charged_cid != ctx.correlation_id:  # a peeked request may be seen twice
                client.charged_cid = ctx.correlation_id
                self._throttle(info, client, bucket.record(size, now), "produce_bytes_per_s", PRODUCE)
        if bucket is not None or client.buckets[REQUESTS] is not None:
            ctx.state[_STATE] = client
        return FORWARD

    @on_request(ApiKey.FETCH)
    def fetch(self, ctx: FilterContext, request: Any) -> Any:
        """A fetch-limited client asks for at most one burst, and its answer is charged by its hook."""
        now = self.clock()
        client = self.client(ctx.connection, now)
        bucket = client.buckets[FETCH_BYTES]
        if bucket is not None or client.debt(FETCH_BYTES, now) > 0:
            ctx.state[_STATE] = client
        if bucket is not None and ctx.api_version >= 3:  # max_bytes from v3
            cap = max(int(bucket.burst), 1)
            if request.max_bytes > cap:
                request.max_bytes = cap
                return forward(request)
        return FORWARD

    @on_response(ApiKey.PRODUCE, needs_state=True)
    def produce_answer(self, ctx: FilterContext, response: Any) -> Any:
        return self._answer(ctx, response, PRODUCE_BYTES)

    @on_response(ApiKey.FETCH, needs_state=True)
    def fetch_answer(self, ctx: FilterContext, response: Any) -> Any:
        """Charge a fetch-limited client's answer here, as Kafka does: the answer that puts it in debt says so."""
        client = ctx.state.get(_STATE)
        if isinstance(client, Client):
            bucket = client.buckets[FETCH_BYTES]
            if bucket is not None:
                size = _records_bytes(response)
                if size:
                    t = bucket.record(size, self.clock())
                    self._throttle(ctx.connection, client, t, "fetch_bytes_per_s", FETCH)
        return self._answer(ctx, response, FETCH_BYTES)

    def _answer(self, ctx: FilterContext, response: Any, kind: int) -> Any:
        """``throttle_time_ms``: the larger of the broker's and the client's debt now (v1+)."""
        client = ctx.state.get(_STATE)
        if not isinstance(client, Client) or ctx.api_version < 1:
            return FORWARD
        debt = min(client.debt(kind, self.clock()), self.max_throttle_s)
        ms = int(debt * 1000 + 0.999)
        if ms <= response.throttle_time_ms:
            return FORWARD
        response.throttle_time_ms = ms
        return forward(response)


def _records_bytes(response: Any) -> int:
    """The record bytes a decoded Fetch answer carries (what its frame size is made of)."""
    total = 0
    for topic in getattr(response, "responses", None) or ():
        for partition in getattr(topic, "partitions", None) or ():
            records = getattr(partition, "records", None)
            if records:
                total += len(records)
    return total


_LIVE: weakref.WeakSet[Quotas] = weakref.WeakSet()
#: (cluster, principal, client id) -> seconds throttled by instances no longer alive
_RETIRED: defaultdict[tuple[str, str, str], float] = defaultdict(float)


def _retire(cluster: str, throttled: dict[tuple[str, str], float]) -> None:
    for (principal, client_id), seconds in list(throttled.items()):
        _RETIRED[(cluster, principal, client_id)] += seconds


class _ThrottleCollector(Collector):
    def collect(self) -> Iterator[Any]:
        family = CounterMetricFamily(
            "kgate_client_throttle_seconds",
            "Time kgate stopped reading clients over a quota (the quotas filter), per principal and client id",
            labels=["cluster", "principal", "client_id"],
        )
        totals: dict[tuple[str, str, str], float] = defaultdict(float)
        for q in list(_LIVE):
            for (principal, client_id), seconds in list(q.throttled.items()):
                totals[(q.cluster, principal, client_id)] += seconds
        for labels, seconds in list(_RETIRED.items()):
            totals[labels] += seconds
        for labels, seconds in sorted(totals.items()):
            family.add_metric(list(labels), seconds)
        yield family


REGISTRY.register(_ThrottleCollector())
