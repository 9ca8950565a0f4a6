"""kgate.api as a plugin sees it: what it exports, what importing it loads, and its constants.

``ApiKey`` and ``ErrorCode`` are generated (from Kafka's message specs and from Kafka's own
``Errors`` table); kio, an independent Python implementation of the protocol, is the oracle
for both here.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode

import kgate.api
from kgate.api import ApiKey, ErrorCode
from kgate.codec import api as codec_api


def test_importing_the_api_loads_no_proxy_config_or_filter_runtime() -> None:
    """A fresh interpreter: ``import kgate.api`` must not pull kgate's internals in (lazily or not)."""
    code = (
        "import sys, kgate.api; bad = sorted(m for m in sys.modules if m.split('.')[:2] in "
        "(['kgate', 'proxy'], ['kgate', 'config'], ['kgate', 'filters'])); print(bad); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_everything_exported_exists() -> None:
    missing = [name for name in kgate.api.__all__ if not hasattr(kgate.api, name)]
    assert not missing


def test_api_keys_cover_every_api_the_codec_knows() -> None:
    retired = {ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN}
    # the inter-broker RPCs KRaft removed keep their names (policy refuses them) but no message shapes
    assert {int(k) for k in ApiKey} - set(codec_api.API_INFO) == {int(k) for k in retired}
    assert set(codec_api.API_INFO) <= {int(k) for k in ApiKey}
    assert ApiKey.FETCH == 1
    assert ApiKey.METADATA == 3
    assert ApiKey.DESCRIBE_TOPIC_PARTITIONS == 75
    assert ApiKey.STREAMS_GROUP_HEARTBEAT == 88
    assert ApiKey.DELETE_SHARE_GROUP_OFFSETS == 92
    for key in codec_api.API_INFO:
        assert ApiKey(key).name.replace("_", "") == codec_api.API_INFO[key].name.upper()


def test_error_codes_agree_with_kio() -> None:
    """Same number, same name, same retriability for every code both know (kio may be newer)."""
    kio = {int(e): e for e in KioErrorCode}
    disagree = []
    for e in ErrorCode:
        k = kio.get(int(e))
        if k is None:
            disagree.append(f"{e.name} ({int(e)}) unknown to kio")
        elif k.name.upper() != e.name or bool(k.retriable) != e.retriable:
            disagree.append(f"{e.name}={int(e)} retriable={e.retriable} vs kio {k.name}={int(k)} {k.retriable}")
    assert not disagree, "\n".join(disagree)
    assert len(ErrorCode) > 120


def test_error_code_members_carry_retriability() -> None:
    assert ErrorCode.NOT_LEADER_OR_FOLLOWER.retriable
    assert not ErrorCode.TOPIC_AUTHORIZATION_FAILED.retriable
    assert ErrorCode(100) is ErrorCode.UNKNOWN_TOPIC_ID
    with pytest.raises(ValueError, match="30000"):
        ErrorCode(30000)


def test_the_package_says_it_is_typed() -> None:
    """PEP 561: without py.typed a filter author's mypy treats kgate.api as untyped (Any everywhere)."""
    import importlib.resources
    import tomllib

    assert (importlib.resources.files("kgate") / "py.typed").is_file()
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    assert "py.typed" in pyproject["tool"]["setuptools"]["package-data"]["kgate"]
