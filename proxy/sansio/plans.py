"""What kgate does with each request and each response, decided once per (api key, version).

The data path used to ask "must this be decoded?" in several places (when a response could
stream through, when it arrived, when a request could be tracked from its header) and they had
to agree. Here the answer is computed once from the filter chain and the cluster's needs, kept
in a dict, and carried on the exchange: a request's ``RequestPlan`` is looked up when its header
is read, and the ``ResponsePlan`` of its answer is fixed when the request goes upstream, so the
response path and the cut-through decision read the same value.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Final

from kgate.api import ApiKey
from kgate.codec import api
from kgate.codec.generated.api_keys import FETCH, METADATA, PRODUCE
from kgate.proxy.sansio import response_tail, rewrite

if TYPE_CHECKING:
    from collections.abc import Callable

    from kgate.filters.chain import FilterChain
    from kgate.proxy.sansio.counter import Count

#: requests read whole even without filters (SASL progress, CreateTopics' validate_only): small, rare
OBSERVED_REQUESTS: Final = frozenset(
    {int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE), int(ApiKey.CREATE_TOPICS)}
)
# UNKNOWN_TOPIC_OR_PARTITION (3) and UNKNOWN_TOPIC_ID (100) as the int16 bytes a response carries them in
_UNKNOWN_TOPIC_CODES: Final = (b"\x00\x03", b"\x00\x64")
# Small Fetch responses that may carry an unknown-topic error (errors, empty long polls) are decoded
# when filters use topic names, so a dead id's error evicts it; large ones stream through undecoded.
OBSERVE_FETCH_MAX: Final = 64 * 1024


class RequestPlan(enum.Enum):
    TRACK = "track"  # forwarded as it arrived; its header says what answer to wait for
    OBSERVE = "observe"  # forwarded as it arrived, and decoded for kgate's own bookkeeping
    FILTER = "filter"  # decoded and run through the request hooks
    PEEK = "peek"  # FILTER, but a single-topic Produce may be decided from its topic alone
    SCREEN = "screen"  # FILTER, but every request hook has a screen: tried on the body's bytes first
    REFUSE = "refuse"  # a version outside what the filters that must see it handle: close


class ResponsePlan(enum.Enum):
    PASS = "pass"  # forwarded as it arrives; may stream through before it is whole
    WATCH_FETCH = "watch-fetch"  # PASS, but a small whole one that may report a dead id is decoded
    TAIL = "tail"  # PASS, walked as it streams: only its node-endpoint tail is held and rewritten
    WATCH_TAIL = "watch-tail"  # TAIL, and a small whole Fetch that may report a dead id is decoded
    BROKERS_ONLY = "brokers-only"  # Metadata: only the broker list is rewritten, topics copied as bytes
    CAP_VERSIONS = "cap-versions"  # ApiVersions: version ranges capped to what kgate and filters handle
    DECODE = "decode"  # decoded: addresses rewritten, topic names learnt, response hooks run
    SCREEN = "screen"  # DECODE, but every response hook has a screen (Metadata): tried on the bytes first
    RAW_SASL = "raw-sasl"  # a bare SASL token after SaslHandshake v0 (no Kafka header)

    @property
    def streams(self) -> bool:
        """Whether its bytes may go on before the whole response has arrived."""
        return self in _STREAMING


_STREAMING: Final = frozenset({ResponsePlan.PASS, ResponsePlan.WATCH_FETCH, ResponsePlan.TAIL, ResponsePlan.WATCH_TAIL})


class Plans:
    """The plans of one virtual cluster (its filter chain is fixed for the cluster's life)."""

    __slots__ = (
        "_chain",
        "_count",
        "_limits",
        "_names_in_use",
        "_requests",
        "_responses",
        "answer_screening",
        "routes",
        "screening",
    )

    def __init__(
        self,
        chain: FilterChain,
        filter_limits: dict[int, tuple[int, int]],
        names_in_use: bool,
        request_count: Callable[[int, int], Count],
    ) -> None:
        self._chain = chain
        self._count = request_count  # ClusterMetrics.request_count: the cell a route's requests are counted in
        self._limits = filter_limits
        self._names_in_use = names_in_use
        self._requests: dict[tuple[int, int], RequestPlan] = {}
        self._responses: dict[tuple[int, int, bool], ResponsePlan] = {}
        #: what ``route`` found so far, by (api key, version): the header-only path reads it first
        #: and calls ``route`` only for a pair it has not seen (one call fewer per request). These
        #: caches remember only pairs the codec knows (``api.knows``): the pair comes from a client's
        #: header, and a client sending garbage headers (each on a new connection, as a broker closes
        #: on an unknown api key) grew them without bound. Any other pair's plan is worked out again
        #: each time (such a request is refused or forwarded as is, and rare).
        self.routes: dict[tuple[int, int], tuple[RequestPlan, ResponsePlan, Count]] = {}
        #: per (api key, version) planned SCREEN: its hooks' screens in chain order and its request
        #: header version, read by the header-only path for every screened request (filled by ``request``)
        self.screening: dict[tuple[int, int], tuple[tuple[Callable[..., Any], ...], int]] = {}
        #: per (Metadata version, request hooks kept state) planned SCREEN: its response hooks' screens
        self.answer_screening: dict[tuple[int, bool], tuple[Callable[..., Any], ...]] = {}

    def route(self, api_key: int, version: int) -> tuple[RequestPlan, ResponsePlan, Count]:
        """A request's plan, its answer's plan (no hook state), and its ``kgate_requests`` counter cell
        (``count.n += 1`` counts one), in one lookup: the header-only path runs this for every request."""
        key = (api_key, version)
        found = self.routes.get(key)
        if found is None:
            plan, answer_plan = self.request(api_key, version), self.response(api_key, version, False)
            found = (plan, answer_plan, self._count(api_key, version))
            if api.knows(api_key, version):  # (see routes)
                self.routes[key] = found
        return found

    def request(self, api_key: int, version: int) -> RequestPlan:
        key = (api_key, version)
        plan = self._requests.get(key)
        if plan is None:
            plan = self._request_plan(api_key, version)
            if api.knows(api_key, version):  # (see routes)
                self._requests[key] = plan
        return plan

    def response(self, api_key: int, version: int, has_state: bool) -> ResponsePlan:
        """The plan for the answer to a request; ``has_state``: its request hooks kept state."""
        key = (api_key, version, has_state)
        plan = self._responses.get(key)
        if plan is None:
            plan = self._response_plan(api_key, version, has_state)
            if api.knows(api_key, version):  # (see routes)
                self._responses[key] = plan
        return plan

    def _request_plan(self, api_key: int, version: int) -> RequestPlan:
        if api_key not in api.API_INFO and self._chain.refuses_unknown_api_keys:
            return RequestPlan.REFUSE
        limit = self._limits.get(api_key)
        if limit is not None and not limit[0] <= version <= limit[1]:
            return RequestPlan.REFUSE
        if api_key in api.API_INFO and self._chain.hooks("request", api_key, version):
            screens = self._chain.screens("request", api_key, version)
            if screens is not None and api.knows(api_key, version):
                # a peeked Produce's screens are asked before its peek (proxy/sansio/core.py, _peek_raw)
                self.screening[(api_key, version)] = (screens, api.request_header_version(api_key, version))
            if api_key == PRODUCE and self._chain.peek_hooks(api_key, version):
                return RequestPlan.PEEK
            return RequestPlan.SCREEN if (api_key, version) in self.screening else RequestPlan.FILTER
        return RequestPlan.OBSERVE if api_key in OBSERVED_REQUESTS else RequestPlan.TRACK

    def _response_plan(self, api_key: int, version: int, has_state: bool) -> ResponsePlan:
        chain = self._chain
        hooks = chain.has_response_hooks and bool(chain.hooks("response", api_key, version, has_state))
        if api_key == METADATA and not hooks and not self._names_in_use:
            return ResponsePlan.BROKERS_ONLY
        if api_key == rewrite.API_VERSIONS:
            return ResponsePlan.CAP_VERSIONS
        if not hooks and response_tail.has_tail(api_key, version):
            # node endpoints come last: walked to as it streams, records never held (proxy/sansio/response_tail.py)
            if api_key == FETCH and self._names_in_use:
                return ResponsePlan.WATCH_TAIL
            return ResponsePlan.TAIL
        if hooks and api_key == METADATA:
            screens = chain.screens("response", api_key, version, has_state)
            if screens is not None and api.knows(api_key, version):
                self.answer_screening[(version, has_state)] = screens
                return ResponsePlan.SCREEN
        if hooks or api_key in rewrite.OBSERVED_KEYS or rewrite.needs_rewrite(api_key, version):
            return ResponsePlan.DECODE
        if api_key == FETCH and version >= 13 and self._names_in_use:
            return ResponsePlan.WATCH_FETCH
        return ResponsePlan.PASS


def may_carry_unknown_topic(frame: memoryview) -> bool:
    """Whether a Fetch response could report an id as unknown (so decoding it may teach the resolver).

    An error code sits in the response as two bytes; a response in which neither code's bytes occur
    anywhere cannot carry it and needs no decode. The bytes also occur by chance (small integers,
    record data): such false positives cost only the decode every small Fetch response used to get.
    Most answers of a tailing consumer contain neither, and skip the decode (docs/performance.md,
    "Figures moved out of code comments").
    """
    data = bytes(frame)
    return _UNKNOWN_TOPIC_CODES[0] in data or _UNKNOWN_TOPIC_CODES[1] in data
