"""Rewritten answers that are pure functions of the broker's bytes, remembered per virtual cluster.

Every client connection starts with ApiVersions and Metadata, and a broker answers both with the
same bytes again and again (its api ranges; its broker list). kgate must rewrite both (cap the
ranges, map the addresses), and did it from scratch every time: decoding and re-encoding an
ApiVersions answer of ~60 api keys on every connection, walking a broker list on every Metadata
answer, which made connection set-up and Metadata the two yardstick rows furthest from the raw
relay (docs/performance.md, "The sans-IO core", and "Figures moved out of code comments"). The
memo keeps the rewritten bytes keyed on the original ones, so a repeat costs a dictionary lookup
or a short byte comparison.

What makes this safe:
- ApiVersions: the answer (header v0: only the correlation id) is a pure function of its body,
  its version and the cluster's version limits, which are fixed for the cluster's lifetime.
- Metadata: only the broker list is replaced; the encoding is prefix-free, so if the bytes at
  the list's start begin with a remembered original list, they are exactly that list. A list
  is remembered only when every broker in it was mapped, i.e. after the mapper's side effects
  (a node listener bound, the bootstrap node found) have happened once; a list with a broker
  kgate left out (its own address) is rewritten every time so each refusal is still counted.
- Whole Metadata answers: a client that asks again (a periodic refresh, an idle cluster, a
  producer connecting) mostly gets the very bytes it got before, apart from the correlation id.
  An answer of at most ``MAX_METADATA_BYTES`` whose broker list was fully mapped is remembered
  whole, keyed on everything after the correlation id, so a repeat skips the header walk and the
  list search, which brings the Metadata row closer to the relay (docs/performance.md, "Figures
  moved out of code comments"). A miss costs one copy of at most 8 KiB and a dictionary insert.
- All are bounded (a few entries per version; the oldest goes) and ``clear()`` forgets all,
  for whoever changes the node mapping or the limits.
"""

from __future__ import annotations

from typing import Final

from kgate.codec import api
from kgate.codec.generated.api_keys import METADATA as _METADATA
from kgate.codec.headers import response_body_offset
from kgate.proxy.sansio import rewrite
from kgate.proxy.sansio.metadata_brokers import assemble, broker_list_start, rewrite_broker_list
from kgate.proxy.sansio.rewrite import NodeMapper, ServedNodes

#: ApiVersions answers remembered (distinct broker builds and versions a fleet sees)
MAX_API_VERSIONS: Final = 32
#: broker lists remembered per Metadata version (brokers may order their lists differently)
MAX_BROKER_LISTS: Final = 8
#: versions whose last answer is remembered, per api key (the version is the client's choice: bounded)
MAX_LAST_VERSIONS: Final = 16
#: whole Metadata answers remembered, and the largest one remembered (64 x 8 KiB: at most 0.5 MiB)
MAX_METADATA_ANSWERS: Final = 64
MAX_METADATA_BYTES: Final = 8192
_UNCHANGED: Final = b""  # remembered "forward as is" (a real rewritten body is never empty)
#: an answer remembered last: its body, the rewritten answer's size prefix, the rewritten body
_Last = tuple[bytes, bytes, bytes]


class AnswerMemo:
    __slots__ = (
        "_api_versions",
        "_broker_lists",
        "_last_api_versions",
        "_last_metadata",
        "_metadata",
        "known_only",
        "limits",
    )

    def __init__(self, limits: dict[int, tuple[int, int]], known_only: bool = False) -> None:
        self.limits = limits
        self.known_only = known_only  # advertise no api key kgate's codec does not know
        self._api_versions: dict[tuple[int, bytes], bytes] = {}
        self._broker_lists: dict[int, list[tuple[bytes, bytes]]] = {}
        self._metadata: dict[tuple[int, bytes], bytes] = {}
        #: per version, the answer remembered last: (its body, the rewritten size prefix, the
        #: rewritten body, or _UNCHANGED); a repeat of it is recognised by one comparison of its tail
        self._last_api_versions: dict[int, _Last] = {}
        self._last_metadata: dict[int, _Last] = {}

    def clear(self) -> None:
        self._api_versions.clear()
        self._broker_lists.clear()
        self._metadata.clear()
        self._last_api_versions.clear()
        self._last_metadata.clear()

    def api_versions(self, frame: bytes | memoryview, version: int) -> bytes | None:
        """``rewrite.cap_api_versions(frame, version, limits)``, remembered by body bytes.

        None: forward the broker's frame unchanged. Raises ``rewrite.RewriteError`` (never
        remembered) for an answer that cannot be read. The answer seen last is checked first, as
        for Metadata.
        """
        last = _repeat(self._last_api_versions, frame, version)
        if last is not None:
            return None if last[2] is _UNCHANGED else last[1] + frame[4:8] + last[2]
        key = (version, bytes(frame[8:]))
        body = self._api_versions.get(key)
        if body is None:
            view = frame if isinstance(frame, memoryview) else memoryview(frame)
            new = rewrite.cap_api_versions(view, version, self.limits, self.known_only)
            body = _UNCHANGED if new is None else bytes(new[8:])
            if len(self._api_versions) >= MAX_API_VERSIONS:
                del self._api_versions[next(iter(self._api_versions))]
            self._api_versions[key] = body
        size = (4 + len(body)).to_bytes(4, "big")
        _remember(self._last_api_versions, version, (key[1], size, body))
        if body is _UNCHANGED:
            return None
        return b"".join((size, frame[4:8], body))

    def metadata(
        self, frame: bytes | memoryview, version: int, mapper: NodeMapper, served: ServedNodes | None = None
    ) -> bytes:
        """A Metadata answer with its broker list mapped (``metadata_brokers.rewrite_brokers``).

        Remembered whole when small and fully mapped. Raises ``HeaderError`` on a body that does
        not parse.

        The answer seen last (per version) is checked first, on the broker's ``bytes`` as they
        were read: same length and the same tail is the same answer, found without the copy, the
        hash and the lookup of the general case, which a Metadata round trip repeats on every
        request (docs/performance.md, "constants, counters, repeated answers").
        """
        last = self._last_metadata.get(version)  # _repeat, inline: this runs per Metadata request
        if last is not None and isinstance(frame, bytes):
            original = last[0]
            if len(frame) == len(original) + 8 and frame.endswith(original):
                return last[1] + frame[4:8] + last[2]
        small = len(frame) <= MAX_METADATA_BYTES
        if small:
            key = (version, bytes(frame[8:]))
            body = self._metadata.get(key)
            if body is not None:  # rewrite.reframe(frame, 8, body), without its call (the common case)
                size = (4 + len(body)).to_bytes(4, "big")
                _remember(self._last_metadata, version, (key[1], size, body))
                return b"".join((size, frame[4:8], body))
        view = frame if isinstance(frame, memoryview) else memoryview(frame)
        offset = response_body_offset(view, api.response_header_version(_METADATA, version))
        new, complete = self.metadata_brokers(view, offset, version, mapper, served)
        if small and complete:
            if len(self._metadata) >= MAX_METADATA_ANSWERS:
                del self._metadata[next(iter(self._metadata))]
            body = self._metadata[key] = new[8:]
            _remember(self._last_metadata, version, (key[1], new[:4], body))
        return new

    def metadata_brokers(
        self, frame: memoryview, offset: int, version: int, mapper: NodeMapper, served: ServedNodes | None = None
    ) -> tuple[bytes, bool]:
        """``metadata_brokers.rewrite_brokers``, with the broker list's rewrite remembered; and
        whether every broker was mapped (an empty list completed with ``served`` is not remembered).

        Raises ``HeaderError`` on a body that does not parse.
        """
        start = broker_list_start(frame, offset, version)
        seen = self._broker_lists.get(version)
        if seen is None:
            seen = self._broker_lists[version] = []
        for original, mapped in seen:
            end = start + len(original)
            if frame[start:end] == original:
                return assemble(frame, offset, start, mapped, end), True
        end, mapped, complete = rewrite_broker_list(frame, start, version, mapper, served)
        if complete:
            if len(seen) >= MAX_BROKER_LISTS:
                del seen[0]
            seen.append((bytes(frame[start:end]), mapped))
        return assemble(frame, offset, start, mapped, end), complete


def _repeat(last: dict[int, _Last], frame: bytes | memoryview, version: int) -> _Last | None:
    """The entry of ``last`` for ``version`` if ``frame`` repeats its answer (same body after the
    correlation id: same length, same tail), else None.

    Only for the broker's ``bytes`` as read (``bytes.endswith`` compares in place); the data path
    hands those over when an answer arrives in one read.
    """
    entry = last.get(version)
    if entry is not None and isinstance(frame, bytes):
        original = entry[0]
        if len(frame) == len(original) + 8 and frame.endswith(original):
            return entry
    return None


def _remember(last: dict[int, _Last], version: int, entry: _Last) -> None:
    """Make ``entry`` the last answer of ``version``; at most ``MAX_LAST_VERSIONS`` versions (the oldest goes)."""
    if version not in last and len(last) >= MAX_LAST_VERSIONS:
        del last[next(iter(last))]
    last[version] = entry
