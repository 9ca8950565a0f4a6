"""What a virtual cluster derives from its filter chain, made in one place (no I/O).

``VirtualCluster`` (proxy/runtime/cluster.py) makes these at start and on every reload, and the core's
test fake (tests/support/fake_cluster.py) makes the very same, so the core under test reads the
plans, version limits and answer memo kgate would run with.
"""

from __future__ import annotations

from collections.abc import Callable

from kgate.codec import api
from kgate.filters.chain import FilterChain
from kgate.proxy.sansio import rewrite
from kgate.proxy.sansio.answer_memo import AnswerMemo
from kgate.proxy.sansio.counter import Count
from kgate.proxy.sansio.plans import Plans


class ChainTables:
    """One chain's plans, version limits and remembered answers."""

    __slots__ = ("answers", "chain", "filter_limits", "plans", "version_limits")

    def __init__(self, chain: FilterChain, request_count: Callable[[int, int], Count]) -> None:
        self.chain = chain
        #: per api key, the versions clients may use through this cluster (ApiVersions is capped to it)
        self.version_limits = rewrite.version_limits(chain.version_limits())
        #: ApiVersions and Metadata broker-list rewrites, remembered (proxy/sansio/answer_memo.py)
        self.answers = AnswerMemo(self.version_limits, chain.refuses_unknown_api_keys)
        #: api keys filters must see -> the versions they (and the codec) handle; others are refused
        self.filter_limits = {
            key: (max(lo, api.API_INFO[key].min_version), min(hi, api.API_INFO[key].max_version))
            for key, (lo, hi) in chain.version_limits().items()
        }
        #: what the data path does with each request and response (decided once per api key and version)
        self.plans = Plans(chain, self.filter_limits, names_in_use(chain), request_count)


def names_in_use(chain: FilterChain) -> bool:
    """Whether any filter may ask for topic names (passive learning is worth its cost)."""
    return (chain.has_request_hooks or chain.has_response_hooks) and chain.uses_topic_names
