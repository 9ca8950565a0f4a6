"""Configuration errors."""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid kgate configuration.

    The message has the form ``<source>: <key path>: <problem>``, e.g.
    ``kgate.yaml: virtual_clusters[0].listen: expected "host:port", got "9192"``.
    The parts are also available as attributes.
    """

    def __init__(self, source: str, path: str, problem: str) -> None:
        self.source = source
        self.path = path
        self.problem = problem
        parts = [p for p in (source, path) if p]
        super().__init__(": ".join([*parts, problem]))
