"""Filter lookup by name: a mistyped name gets a suggestion; a class whose name disagrees is refused."""

from __future__ import annotations

from typing import ClassVar

import pytest

from kgate.api import Filter
from kgate.config import parse_config
from kgate.config.errors import ConfigError
from kgate.filters.registry import FilterLookupError, filter_class, register_filter


def _cfg(name: str) -> dict:
    return {
        "virtual_clusters": [{"name": "c", "listen": "127.0.0.1:19192", "upstream": "127.0.0.1:9092"}],
        "filters": [{"name": name}],
    }


def test_mistyped_filter_name_gets_did_you_mean() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(_cfg("topic-polcy"), "k.yaml")
    assert "filters[0].name: no filter named 'topic-polcy' (did you mean \"topic-policy\"?)" in str(err.value)


def test_unrelated_name_lists_what_is_known() -> None:
    with pytest.raises(FilterLookupError) as err:
        filter_class("zzzz")
    assert "did you mean" not in str(err.value)
    assert "topic-policy" in str(err.value)


def test_builtin_class_whose_name_disagrees_is_refused(monkeypatch) -> None:
    from kgate.filters import registry

    class Misnamed(Filter):
        name: ClassVar[str] = "something-else"

    monkeypatch.setitem(registry.BUILTINS, "misnamed", "tests_registry_fake:Misnamed")
    monkeypatch.setattr(registry, "_load", lambda target: Misnamed)
    with pytest.raises(FilterLookupError) as err:
        filter_class("misnamed")
    assert "whose name is 'something-else'" in str(err.value)


def test_registered_classes_may_be_registered_under_any_name() -> None:
    class Local(Filter):
        name: ClassVar[str] = "local"

    register_filter("local-alias", Local)
    assert filter_class("local-alias") is Local


def test_topic_key_finds_the_name_field_of_any_entry() -> None:
    import uuid

    from kgate.api import topic_key
    from kgate.codec.generated.data.fetch import FetchTopic
    from kgate.codec.generated.data.offset_for_leader_epoch import OffsetForLeaderTopic
    from kgate.codec.generated.data.produce import TopicProduceData

    zero, tid = uuid.UUID(int=0), uuid.uuid4()
    assert topic_key(TopicProduceData(name="orders", topic_id=zero)) == "orders"
    assert topic_key(FetchTopic(topic="orders", topic_id=zero)) == "orders"  # Fetch calls it `topic`
    assert topic_key(FetchTopic(topic="", topic_id=tid)) == tid
    assert topic_key(OffsetForLeaderTopic(topic="t")) == "t"
    with pytest.raises(TypeError):
        topic_key(object())
