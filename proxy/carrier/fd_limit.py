"""Raise the open-files limit at start-up: each client costs kgate two descriptors.

Every client connection holds one socket towards the client and one towards its broker, plus
kgate's listeners and its own lookup connection. Under the common default soft limit of 1,024,
only 503 of 1,000 concurrent clients were served (issue 7, item 14), while the hard limit is
usually far higher. The soft limit is raised to the hard one (what a process may do without
privileges) and both are logged, so an operator can see how many clients fit.
"""

from __future__ import annotations

import logging

log = logging.getLogger("kgate.limits")


def raise_open_files_limit() -> tuple[int, int] | None:
    """Set the soft RLIMIT_NOFILE to the hard limit; returns (soft, hard) now in force, or None."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on POSIX
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("open files limit: soft %d, hard %d; could not raise the soft limit: %s", soft, hard, exc)
            return soft, hard
        log.info(
            "open files limit: soft %d raised to %d (hard %d): about %d concurrent clients",
            soft,
            target,
            hard,
            target // 2,
        )
        return target, hard
    log.info("open files limit: soft %d, hard %d: about %d concurrent clients", soft, hard, soft // 2)
    return soft, hard
