"""The carrier's tests run kgate in process (``kgate`` here is an :class:`InprocKgate` in front of the
module's Tansu, not the suite's kgate subprocess): they look at its live connections and tasks."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.inproc_kgate import InprocKgate, make_config


@pytest.fixture
def kgate(tansu: Any) -> Iterator[InprocKgate]:
    k = InprocKgate(make_config(tansu.bootstrap)).start()
    try:
        yield k
    finally:
        k.stop()
