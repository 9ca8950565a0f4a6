"""proxy/sansio/plans.py: what the plan caches remember, and that a client's garbage headers cannot grow them.

Driven sans-IO (tests/support/core_driver.py): the header an api key and version come from is
the client's, so these are the caches a hostile client could reach.
"""

from __future__ import annotations

from support.core_driver import make_core
from support.wire import frame, request_header

from kgate.api import ApiKey
from kgate.codec import api
from kgate.proxy.sansio.plans import RequestPlan


def _garbage_request(api_key: int, version: int, cid: int) -> bytes:
    """A request frame whose header names ``api_key`` and ``version`` (no body kgate reads)."""
    return frame(request_header(api_key, version, cid, client_id=None) + b"\x00" * 8)


def test_pairs_the_codec_knows_are_remembered_and_counted() -> None:
    core, _out = make_core()
    plans = core.plans
    plan, _answer, count = plans.route(int(ApiKey.PRODUCE), 9)
    assert plan is RequestPlan.TRACK
    assert count.n == 0
    assert (int(ApiKey.PRODUCE), 9) in plans.routes
    # equal, and the same counter: compiled (mypyc), a returned tuple is boxed anew on each call
    assert plans.route(int(ApiKey.PRODUCE), 9) == plans.routes[(int(ApiKey.PRODUCE), 9)]
    assert plans.route(int(ApiKey.PRODUCE), 9)[2] is count


def test_garbage_api_keys_and_versions_are_forwarded_and_counted_but_not_remembered() -> None:
    core, out = make_core()
    remembered = len(core.plans.routes), len(core.plans._requests), len(core.plans._responses)
    unknown_key = max(api.API_INFO) + 1
    pairs = [(unknown_key + i, i) for i in range(200)] + [(int(ApiKey.FETCH), 1000 + i) for i in range(200)]
    for cid, (key, version) in enumerate(pairs):
        core.receive_client(_garbage_request(key, version, cid))
    assert (len(core.plans.routes), len(core.plans._requests), len(core.plans._responses)) == remembered
    assert len(out.upstream.data) == sum(len(_garbage_request(k, v, 0)) for k, v in pairs)  # all forwarded
    counted = core.cluster.metrics.requests
    assert counted[(-1, -1)].n == 200  # unknown api keys share one label
    assert counted[(int(ApiKey.FETCH), -1)].n == 200  # unknown versions of a known key share one too
