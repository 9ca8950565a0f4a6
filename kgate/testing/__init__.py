"""Test kit for filter authors: a scripted context, frame round trips, and real processes.

* :class:`FakeContext` - a scripted :class:`kgate.api.FilterContext` (names, lookups, upstream
  answers), so a hook is unit-tested by calling it;
* :func:`round_trip_request` / :func:`round_trip_response` - a message through real wire bytes
  and kgate's decoder; :func:`run_hook` calls a hook as kgate's chain does;
* :mod:`kgate.testing.processes` - Tansu and kgate as subprocesses;
  :mod:`kgate.testing.pytest_plugin` - the ``tansu_bootstrap`` and ``kgate_proxy`` fixtures
  (``pytest_plugins = ["kgate.testing.pytest_plugin"]``).

Like :mod:`kgate.api`, this package imports nothing from kgate's proxy runtime: a plugin's tests
exercise the plugin, and kgate itself only as a separate process.
"""

from kgate.testing.context import FakeContext
from kgate.testing.frames import (
    request_bytes,
    request_class,
    response_bytes,
    response_class,
    round_trip_request,
    round_trip_response,
    run_hook,
)

__all__ = [
    "FakeContext",
    "request_bytes",
    "request_class",
    "response_bytes",
    "response_class",
    "round_trip_request",
    "round_trip_response",
    "run_hook",
]
