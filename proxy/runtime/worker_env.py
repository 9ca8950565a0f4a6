"""Which worker this process is under ``kgate run --workers N`` (the parent sets ``KGATE_WORKER``).

Its own module, free of imports, so anything (a cluster's services, the CLI) can ask without
pulling in the supervisor and its admin server.
"""

from __future__ import annotations

import os

WORKER_ENV = "KGATE_WORKER"  # the worker's index: set, the process is a worker


def worker_index() -> int | None:
    """This process's worker index, or None when it is not a worker."""
    value = os.environ.get(WORKER_ENV)
    return int(value) if value is not None else None
