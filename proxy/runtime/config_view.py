"""``GET /config``: the configuration a kgate process is running, as JSON, with secrets redacted.

An operator debugging a fleet needs to see what an instance actually runs after reloads (which
chain each cluster has, which limits are in force), not what the file on disk says now. Values
under a key that names a secret (passwords, tokens, JAAS configs, ...) are replaced, at any depth
and inside filter configs too, since plugins name their secrets the same way.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import kgate
from kgate.config import KgateConfig

REDACTED = "<redacted>"
#: a key containing one of these (case-insensitive, any separator) holds a secret
SECRET_WORDS = ("password", "passwd", "secret", "token", "jaas", "credential", "private_key")


def is_secret_key(key: str) -> bool:
    flat = key.lower().replace("-", "_").replace(".", "_")
    return any(word in flat for word in SECRET_WORDS)


def redact(value: Any) -> Any:
    """``value`` as plain JSON-able data with every secret-named entry replaced."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if type(value).__str__ is not object.__str__:
            return str(value)  # a value with a text form of its own (an address): as the file wrote it
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): (REDACTED if is_secret_key(str(k)) and v is not None else redact(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [redact(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)  # addresses, paths, networks: their text form is what the file had


def config_document(config: KgateConfig) -> dict[str, Any]:
    """What ``GET /config`` answers: kgate's version, each cluster's filter chain, the whole config."""
    return {
        "version": kgate.__version__,
        "chains": {vc.name: [f.name for f in config.chain_for(vc)] for vc in config.virtual_clusters},
        "config": redact(config),
    }


def config_json(config: KgateConfig) -> bytes:
    return (json.dumps(config_document(config), indent=2, sort_keys=False) + "\n").encode()
