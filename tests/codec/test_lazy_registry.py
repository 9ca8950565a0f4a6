"""The api registry (codec.api.API_INFO) imports a generated module only when its api is used.

Every kgate process and every test subprocess paid ~0.8 s importing all ~90 generated modules
at start-up; a process now imports the ones for the api keys it meets.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from kgate.codec import api
from kgate.codec.generated.index import APIS

_COUNT = """
import json, sys
{imports}
mods = sorted(m for m in sys.modules if m.startswith("kgate.codec.generated."))
print(json.dumps(mods))
"""


def _generated_after(imports: str) -> list[str]:
    """The generated modules a fresh interpreter holds after running ``imports``."""
    out = subprocess.run(
        [sys.executable, "-c", _COUNT.format(imports=imports)], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_importing_the_public_api_loads_few_generated_modules() -> None:
    mods = _generated_after("import kgate.api")
    assert len(mods) <= 10, mods


def test_names_and_membership_import_nothing_and_one_key_imports_its_module() -> None:
    mods = _generated_after(
        "from kgate.codec import api\n"
        "assert 0 in api.API_INFO and 4242 not in api.API_INFO\n"
        "names = {i.name for i in api.API_INFO.values()}\n"
        "assert 'ShareFetch' in names\n"
        "assert api.API_INFO[78].max_version >= 0\n"
    )
    assert "kgate.codec.generated.share.share_fetch" in mods
    # names, membership and iteration come from the index: no other api module was imported
    # (the api's own subpackage, ``share``, is loaded with it: a package, not an api module)
    apis = [m for m in mods if m.rsplit(".", 1)[1] not in ("api_keys", "index", "share")]
    assert apis == ["kgate.codec.generated.share.share_fetch"], apis


def test_every_entry_matches_its_generated_classes() -> None:
    """The lazy entries say what the generated classes say, for every api key."""
    assert sorted(api.API_INFO) == sorted(APIS)
    for key, (name, module, req_name, resp_name) in APIS.items():
        info = api.API_INFO[key]
        mod = importlib.import_module(f"kgate.codec.generated.{module}")
        req, resp = getattr(mod, req_name), getattr(mod, resp_name)
        assert (info.key, info.name) == (key, name)
        assert info.request_class is req
        assert info.response_class is resp
        assert info.min_version == max(req.MIN_VERSION, resp.MIN_VERSION)
        assert info.max_version == min(req.MAX_VERSION, resp.MAX_VERSION)
        assert info.request_flexible_min == req.FLEXIBLE_MIN
        assert info.response_flexible_min == resp.FLEXIBLE_MIN


def test_entries_are_read_only() -> None:
    info = api.API_INFO[0]
    with pytest.raises(AttributeError):
        info.max_version = 99
    assert info.max_version != 99


def test_flat_path_is_the_package_module_and_loads_only_it() -> None:
    """``kgate.codec.generated.<api>`` (docs/filters.md's promise) is the subpackage's module."""
    mods = _generated_after(
        "from kgate.codec.generated.produce import ProduceRequest\n"
        "from kgate.codec.generated import fetch\n"
        "import kgate.codec.generated.metadata as flat_md\n"
        "from kgate.codec.generated.data import fetch as real_fetch, metadata, produce\n"
        "assert ProduceRequest is produce.ProduceRequest and fetch is real_fetch and flat_md is metadata\n"
        "assert produce.__spec__.name == 'kgate.codec.generated.data.produce', produce.__spec__\n"
        "assert produce.__name__ == 'kgate.codec.generated.data.produce'\n"
    )
    loaded = {m.rsplit(".", 1)[1] for m in mods} - {"data", "produce", "fetch", "metadata"}
    assert not loaded, mods
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("kgate.codec.generated.no_such_api")
