"""Every response field that can carry a broker or controller address is handled (issue 12, item 2).

Walks every ``*Response.json`` in Kafka's message specs (``../shared/kafka-message-specs``),
recursively through nested structs, for fields that can carry a network address (``Host``,
``Port``, ``Listeners``, ``NodeEndpoints``, ``Endpoints``, ``Coordinators``, ``Brokers``). Each api
key that has one must be either rewritten by kgate (``proxy.sansio.rewrite``), answered only by
controllers or other brokers (its request spec's ``listeners`` exclude ``broker``, so a broker
listener, the only thing kgate fronts, never answers it), or listed in ``NOT_ADDRESSES`` with the
reason. A new spec with an address field that is none of these fails this test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from kgate.proxy.sansio import rewrite

SPECS = Path(__file__).resolve().parents[4] / "shared" / "kafka-message-specs"
ADDRESS_FIELDS = {"Host", "Port", "Listeners", "NodeEndpoints", "Endpoints", "Coordinators", "Brokers"}

#: api key -> (why its address-looking fields are not broker addresses, exactly those fields): a new
#: address-looking field in one of these responses fails the test until someone has looked at it
NOT_ADDRESSES = {
    29: ("DescribeAcls: Host is an ACL's host pattern, not a network address", ["Resources.Acls.Host"]),
    31: ("DeleteAcls: Host is an ACL's host pattern, not a network address", ["FilterResults.MatchingAcls.Host"]),
    # KIP-1071: a Streams member's ``application.server`` (interactive queries), which the members
    # themselves send in StreamsGroupHeartbeat; the broker only hands them around. They name
    # application instances, never a broker, so kgate leaves them alone.
    88: ("StreamsGroupHeartbeat: members' own application.server endpoints", ["Endpoint.Host", "Endpoint.Port"]),
    89: ("StreamsGroupDescribe: members' own application.server endpoints", ["Endpoint.Host", "Endpoint.Port"]),
}

pytestmark = pytest.mark.skipif(
    not SPECS.is_dir(), reason=f"{SPECS} not present (../shared is beside the repository in CI)"
)


def _load(path: Path) -> dict[str, Any]:
    text = re.sub(r"^\s*//.*$", "", path.read_text(), flags=re.M)  # the specs carry // comments
    return json.loads(text)


def _address_paths(fields: list[dict[str, Any]], prefix: str = "") -> list[str]:
    out = []
    for f in fields:
        path = f"{prefix}{f['name']}"
        if f["name"] in ADDRESS_FIELDS:
            out.append(path)
        out += _address_paths(f.get("fields", []), path + ".")
    return out


def _address_bearing() -> dict[int, tuple[str, list[str]]]:
    found = {}
    for path in sorted(SPECS.glob("*Response.json")):
        spec = _load(path)
        paths = _address_paths(spec.get("fields", []))
        common = {s["name"]: s for s in spec.get("commonStructs", [])}
        for s in common.values():
            paths += [f"{s['name']}.{p}" for p in _address_paths(s.get("fields", []))]
        if paths:
            found[spec["apiKey"]] = (spec["name"], paths)
    return found


def _broker_answers(api_key: int) -> bool:
    for path in SPECS.glob("*Request.json"):
        spec = _load(path)
        if spec.get("apiKey") == api_key:
            return "broker" in spec.get("listeners", [])
    raise AssertionError(f"no request spec for api key {api_key}")


def test_every_address_field_a_broker_can_send_is_rewritten() -> None:
    found = _address_bearing()
    assert len(found) >= 10, found  # the walk really finds them (Metadata, FindCoordinator, ...)
    unhandled = []
    for api_key, (name, paths) in sorted(found.items()):
        if api_key in rewrite.DECODED_RESPONSE_KEYS:
            continue
        if api_key in NOT_ADDRESSES:
            assert paths == NOT_ADDRESSES[api_key][1], f"{name}: new address-looking fields {paths}"
            continue
        if not _broker_answers(api_key):
            continue  # controller- or broker-to-broker-only: never answered through a broker listener
        unhandled.append(f"{name} (api key {api_key}): {', '.join(paths)}")
    assert not unhandled, "responses with address fields kgate does not rewrite:\n" + "\n".join(unhandled)


def test_describe_quorum_hides_controller_listeners() -> None:
    from kgate.codec import api
    from kgate.codec.generated.cluster.describe_quorum import Listener, Node

    resp = api.API_INFO[55].response_class(
        nodes=[Node(node_id=1, listeners=[Listener(name="CONTROLLER", host="10.1.2.3", port=9093)])]
    )
    frame = memoryview(b"\x00\x00\x00\x00" + b"\x00\x00\x00\x07\x00" + resp.encode(2))
    frame = memoryview(len(frame[4:]).to_bytes(4, "big") + bytes(frame[4:]))
    new = rewrite.rewrite_addresses(frame, 55, 2, lambda *a: None)
    assert new is not None
    out = api.decode_response(55, 2, memoryview(new)[9:])
    assert [n.listeners for n in out.nodes] == [[]]
    assert b"10.1.2.3" not in new


def test_node_endpoints_are_walked_from_the_version_that_has_them() -> None:
    """The responses whose node endpoints stream (no decode) are exactly those that carry them.

    Every broker-answered response with a ``NodeEndpoints`` field is in ``response_tail.TAIL_KEYS``
    from the first version that has the field, and every version the codec knows from there on has
    a walk program (the field is the top-level tag or the last regular field, as the walker needs).
    """
    from kgate.codec import api
    from kgate.proxy.sansio import response_tail

    for api_key, (name, paths) in sorted(_address_bearing().items()):
        if "NodeEndpoints" not in paths or not _broker_answers(api_key):
            continue
        assert api_key in response_tail.TAIL_KEYS, f"{name} carries node endpoints kgate does not walk to"
        spec = next(_load(p) for p in SPECS.glob("*Response.json") if _load(p)["apiKey"] == api_key)
        field = next(f for f in spec["fields"] if f["name"] == "NodeEndpoints")
        assert response_tail.TAIL_KEYS[api_key][0] == max(int(field["versions"].rstrip("+")), 1), name
        info = api.API_INFO[api_key]
        for version in range(response_tail.TAIL_KEYS[api_key][0], info.max_version + 1):
            assert response_tail.has_tail(api_key, version)
            assert response_tail.spec(api_key, version).program  # builds: the layout is walkable
