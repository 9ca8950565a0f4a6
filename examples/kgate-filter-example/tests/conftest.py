"""The example's end-to-end fixtures come from kgate's test kit: a Tansu broker and kgate itself.

``kgate.testing.pytest_plugin`` starts both as real subprocesses, kgate exactly as a user would
(``python -m kgate run -c kgate.yaml``), so the filter named in the YAML is found through its
installed entry point.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import pytest

pytest_plugins = ["kgate.testing.pytest_plugin"]


def plugin_installed() -> bool:
    return any(ep.name == "client-id-policy" for ep in entry_points(group="kgate.filters"))


requires_plugin = pytest.mark.skipif(
    not plugin_installed(),
    reason="kgate-filter-example is not installed, so kgate cannot discover it by entry point "
    "(pip install -e examples/kgate-filter-example, or run kgate's dev/setup)",
)
