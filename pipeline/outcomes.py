"""Which answer codes are the protocol's normal course, not failures.

A consumer joining a group is first answered MEMBER_ID_REQUIRED (79) and, while the group
rebalances, REBALANCE_IN_PROGRESS (27): every healthy JoinGroup round has them, so counting them as
errors made JoinGroup look half broken. Leader and coordinator moves (NOT_LEADER_OR_FOLLOWER 6,
NOT_COORDINATOR 16, ...) are retriable answers clients act on (refresh metadata, retry), and a
transaction coordinator answers CONCURRENT_TRANSACTIONS (51) until the previous transaction is
complete. These are reported as *normal* answers, apart from *failures* (every other non-zero code).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from kgate.codec.error_codes import ErrorCode
from kgate.codec.generated.api_keys import ApiKey

if TYPE_CHECKING:
    from pyspark.sql import Column

#: Codes that are normal for any api key: retriable answers about where a leader or coordinator is.
ANY_API: frozenset[int] = frozenset(
    int(c)
    for c in (
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.FENCED_LEADER_EPOCH,
        ErrorCode.UNKNOWN_LEADER_EPOCH,
    )
)
_REBALANCE = int(ErrorCode.REBALANCE_IN_PROGRESS)
_TXN = int(ErrorCode.CONCURRENT_TRANSACTIONS)
#: Codes normal for one api key: the steps of a group's rebalance, a transaction still completing.
PER_API: dict[int, frozenset[int]] = {
    int(ApiKey.JOIN_GROUP): frozenset({int(ErrorCode.MEMBER_ID_REQUIRED), _REBALANCE}),
    int(ApiKey.SYNC_GROUP): frozenset({_REBALANCE}),
    int(ApiKey.HEARTBEAT): frozenset({_REBALANCE}),
    int(ApiKey.OFFSET_COMMIT): frozenset({_REBALANCE}),
    int(ApiKey.INIT_PRODUCER_ID): frozenset({_TXN}),
    int(ApiKey.ADD_PARTITIONS_TO_TXN): frozenset({_TXN}),
    int(ApiKey.ADD_OFFSETS_TO_TXN): frozenset({_TXN}),
    int(ApiKey.END_TXN): frozenset({_TXN}),
    int(ApiKey.TXN_OFFSET_COMMIT): frozenset({_TXN}),
}
#: The ``outcome`` of an answer in ``api_errors``.
OK, NORMAL, FAILURE = "ok", "normal", "failure"


def is_normal(api_key: int, code: int) -> bool:
    """A non-zero ``code`` that is part of ``api_key``'s normal course."""
    return code in ANY_API or code in PER_API.get(api_key, ())


def normal_mask(keys: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """:func:`is_normal` over arrays of api keys and codes."""
    out = np.isin(codes, list(ANY_API))
    for key, normal in PER_API.items():
        out |= (keys == key) & np.isin(codes, list(normal))
    return out


def outcome(api_key: Column, code: Column) -> Column:
    """:data:`OK`, :data:`NORMAL` or :data:`FAILURE` of an answer code (null: no answer, null)."""
    from pyspark.sql import functions as F

    normal = code.isin(*sorted(ANY_API))
    for key, codes in PER_API.items():
        normal = normal | ((api_key == key) & code.isin(*sorted(codes)))
    ok = code == int(ErrorCode.NONE)
    return F.when(ok, F.lit(OK)).when(normal, F.lit(NORMAL)).when(code.isNotNull(), F.lit(FAILURE))
