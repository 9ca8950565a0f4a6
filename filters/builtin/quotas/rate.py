"""The quota filter's pure parts: token buckets, rules and which rule applies to a client.

No I/O and no clock of its own: every call takes ``now`` (seconds, any monotonic origin), so the
rate math is tested with a fake clock (tests/filters/builtin/quotas/test_quotas_rate.py).

**Measuring a rate.** A Kafka broker measures a client's rate over ``quota.window.num`` (11)
samples of ``quota.window.size.seconds`` (1 s) and, when the rate is over the quota, answers
with ``throttle_time_ms = (rate - quota) / quota * window``: the time the client must stay quiet
for its rate over the window to come back to the quota. kgate keeps a token bucket per client
and quota kind instead (Kafka's own choice for its controller mutation quota, KIP-599): the bucket
holds at most ``burst_s`` seconds of the rate, fills at the rate, and every request takes its
bytes (or one request, or one connection) out of it, possibly below zero. The throttle time is
how long the bucket takes to climb back to zero, ``-tokens / rate``. Same long-run bound (over
any interval T a client gets at most ``rate * (T + burst_s)``), O(1) state, no window to rotate,
and a throttle that ends exactly when the client may send again.

**Which rule.** Rules match a principal, a client id and a client address block (CIDR); a rule
names any of them and leaves the rest open. As Kafka does, the most specific match wins, and it
is chosen per quota kind (the most specific rule that sets that kind). Kafka's order, for
users and client ids with ``<default>`` entries, is: user + client id, user + default client id,
user, default user + client id, default user + default client id, default user, client id,
default client id. A rule's principal and client id are each exact (rank 2), ``"*"`` (Kafka's
``<default>``, rank 1) or absent (rank 0); the rank pair ordered principal first reproduces
Kafka's order exactly. A CIDR comes third: below anything about the principal and the client id
(Kafka's IP quotas cover connection rates only and stand apart), above a rule without one; a
longer prefix is more specific. Rules that tie keep their configured order (the first wins).

**Who shares a budget.** As Kafka's quota entities: an exact principal or client id is one budget
for every connection that matches it; ``"*"`` gives each distinct value its own budget (Kafka's
``<default>``: every user gets the default quota, not a share of it); a CIDR is one budget for
the whole block.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: the quota kinds a rule may set, per second
KINDS = ("produce_bytes_per_s", "fetch_bytes_per_s", "requests_per_s", "connections_per_s")
PRODUCE_BYTES, FETCH_BYTES, REQUESTS, CONNECTIONS = range(4)
ANY = "*"  # Kafka's <default>: each distinct value its own budget


class TokenBucket:
    """At most ``rate`` a second on average, bursts up to ``burst`` (see the module doc)."""

    __slots__ = ("burst", "last", "rate", "tokens")

    def __init__(self, rate: float, burst: float, now: float) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.burst = max(burst, 0.0)
        self.tokens = self.burst  # a new client starts with a full bucket
        self.last = now

    def _refill(self, now: float) -> None:
        elapsed = now - self.last
        if elapsed > 0:
            self.tokens = min(self.burst, self.tokens + elapsed * self.rate)
            self.last = now

    def record(self, amount: float, now: float) -> float:
        """Take ``amount`` out; the throttle it leaves, in seconds (0: within the quota)."""
        self._refill(now)
        self.tokens -= amount
        return -self.tokens / self.rate if self.tokens < 0 else 0.0

    def throttle(self, now: float) -> float:
        """Seconds until the bucket is back to zero (0: the client may send now)."""
        self._refill(now)
        return -self.tokens / self.rate if self.tokens < 0 else 0.0

    def available(self, now: float) -> float:
        """What may be taken now without a throttle (0 while throttled)."""
        self._refill(now)
        return max(self.tokens, 0.0)


@dataclass(frozen=True, slots=True)
class Rule:
    """One configured rule: what it matches and the limits it sets (None: not set by this rule)."""

    index: int
    principal: str | None
    client_id: str | None
    cidr: ipaddress.IPv4Network | ipaddress.IPv6Network | None
    limits: tuple[float | None, float | None, float | None, float | None]

    @property
    def rank(self) -> tuple[int, int, int]:
        """Kafka's precedence (module doc): higher wins."""

        def of(value: str | None) -> int:
            return 0 if value is None else 1 if value == ANY else 2

        return (of(self.principal), of(self.client_id), -1 if self.cidr is None else self.cidr.prefixlen)

    def matches(self, principal: str | None, client_id: str | None, address: Any) -> bool:
        if self.principal is not None and (
            principal is None or (self.principal != ANY and self.principal != principal)
        ):
            return False
        if self.client_id is not None and self.client_id != ANY and self.client_id != client_id:
            return False
        if self.cidr is not None and (
            address is None or address.version != self.cidr.version or address not in self.cidr
        ):
            return False
        return True

    def entity(self, principal: str | None, client_id: str | None) -> tuple[Any, ...]:
        """Who shares this rule's budget (module doc): the rule, and the values a ``"*"`` matched."""
        return (
            self.index,
            principal if self.principal == ANY else None,
            client_id if self.client_id == ANY else None,
        )


class RuleError(ValueError):
    """A rule that cannot be used; the message starts with the key at fault."""


def parse_rules(raw: Any) -> list[Rule]:
    """``rules`` from the filter's config, checked; errors name ``rules[i].key``."""
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise RuleError(f"rules: expected a list of rules, got {type(raw).__name__}")
    rules: list[Rule] = []
    for i, item in enumerate(raw):
        where = f"rules[{i}]"
        if not isinstance(item, Mapping):
            raise RuleError(f"{where}: expected a mapping, got {type(item).__name__}")
        allowed = {"principal", "client_id", "client_cidr", *KINDS}
        unknown = set(item) - allowed
        if unknown:
            raise RuleError(f"{where}: unknown keys {sorted(unknown)} (allowed: {', '.join(sorted(allowed))})")
        strings: dict[str, str | None] = {}
        for key in ("principal", "client_id"):
            value = item.get(key)
            if value is not None and (not isinstance(value, str) or not value):
                raise RuleError(
                    f'{where}.{key}: expected a non-empty string (or "*" for each distinct one), got {value!r}'
                )
            strings[key] = value
        cidr = None
        if item.get("client_cidr") is not None:
            try:
                cidr = ipaddress.ip_network(str(item["client_cidr"]), strict=False)
            except ValueError as exc:
                raise RuleError(f"{where}.client_cidr: {exc}") from None
        limits: list[float | None] = []
        for key in KINDS:
            value = item.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or value <= 0):
                raise RuleError(f"{where}.{key}: expected a positive number, got {value!r}")
            limits.append(float(value) if value is not None else None)
        if all(v is None for v in limits):
            raise RuleError(f"{where}: sets no limit (one of {', '.join(KINDS)})")
        rules.append(Rule(i, strings["principal"], strings["client_id"], cidr, tuple(limits)))  # type: ignore[arg-type]
    return rules


def client_ip(client_address: str) -> Any:
    """The address part of ``"host:port"`` (``"[v6]:port"`` too) as an ip_address; None if it is not one."""
    host = client_address.rsplit(":", 1)[0] if client_address.count(":") == 1 else client_address
    if host.startswith("["):
        host = host[1 : host.find("]")]
    elif client_address.count(":") > 1:  # a bare v6 address with a port: the last part is the port
        host = client_address.rsplit(":", 1)[0]
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def resolve(
    rules: Sequence[Rule], principal: str | None, client_id: str | None, address: Any
) -> list[tuple[Rule, tuple[Any, ...]] | None]:
    """Per quota kind (``KINDS`` order): the most specific matching rule that sets it, and its entity."""
    ordered = sorted(
        (r for r in rules if r.matches(principal, client_id, address)), key=lambda r: (r.rank, -r.index), reverse=True
    )
    out: list[tuple[Rule, tuple[Any, ...]] | None] = []
    for kind in range(len(KINDS)):
        chosen = next((r for r in ordered if r.limits[kind] is not None), None)
        out.append(None if chosen is None else (chosen, chosen.entity(principal, client_id)))
    return out


def frame_client_id(req: Any) -> str | None:
    """The client id in a request frame's header (size prefix included), or None (null, cut short).

    ``req`` is the frame or the pieces it streamed through in (the header is in the first one).
    Request headers v1 and v2 put it right after the correlation id; only ControlledShutdown v0
    uses header v0, without one.
    """
    head = req[0] if type(req) is list else req
    if len(head) < 14 or (head[4:8] == b"\x00\x07\x00\x00"):
        return None
    n = int.from_bytes(head[12:14], "big", signed=True)
    if n < 0 or len(head) < 14 + n:
        return None
    return bytes(head[14 : 14 + n]).decode("utf-8", "replace")
