"""Walk a response frame's structure as its bytes arrive, to find where its tail starts.

Fetch v16+ and Produce v10+ responses end with a top-level tagged field ``node_endpoints``
(KIP-951 leader hints: broker addresses), ShareFetch and ShareAcknowledge end with a regular
``node_endpoints`` array and their tagged fields. Everything before that tail (partition headers,
record batches) carries no address and may go on to the client the moment it arrives; only the
tail must be held and rewritten. Finding the tail's first byte takes a walk over the structure:
every length prefix is read, every record set, string and nested tagged field is skipped by its
length without being held.

``FrameWalker`` is sans-IO: ``feed`` it the frame's bytes in any chunking; once ``tail_at`` (an
offset in the frame, counting its size prefix) is known the walk is over. It keeps at most one
partly received length prefix (a few bytes) and a stack as deep as the schema's nesting, so what
it holds does not grow with the records. The walk is driven by the generated message classes'
field tables (``walk_program``), so a new version of a walked api follows the codec.

``fit_tagged`` re-encodes a tagged-field section to an exact byte length: the frame's size
prefix went out before its tail was seen, so a rewritten tail must keep the original length.
The difference is taken up by one unknown tagged field (``PAD_TAG``) that every client skips.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from kgate.codec import primitives as P
from kgate.codec.errors import CodecError
from kgate.codec.schema import get_decoder, get_encoder

# op codes of a walk program (tuples whose first item is the code)
_SKIP = 0  # (_SKIP, n): n bytes of fixed-width fields
_LEN = 1  # (_LEN, width, nullable): a length of 2 or 4 bytes (-1: null), then that many bytes
_CLEN = 2  # (_CLEN, nullable): compact length (uvarint N, N-1 bytes; 0: null), then the bytes
_ARRAY = 3  # (_ARRAY, compact, nullable, element ops, element size or 0): count, then the elements
_TAGS = 4  # (_TAGS,): a tagged-field section: count, then (tag, size, bytes) per entry
_TAIL = 5  # (_TAIL,): the tail starts here; the walk ends
_UVAR = 6  # (_UVAR,): one uvarint, ignored (a tag number)
_ULEN = 7  # (_ULEN,): uvarint N, then N bytes (a tagged field's value)

_TAG_ENTRY = ((_UVAR,), (_ULEN,))

#: an unknown tag: clients keep (Java) or skip (librdkafka, Rust) unknown tagged fields, so the
#: bytes kgate pads a rewritten tail with change nothing for them. Far above any tag Kafka uses.
PAD_TAG = 0x7FFF_0000


class WalkError(CodecError):
    """The frame does not have the structure its api and version say it has."""


def walk_program(message_class: Any, version: int, header_tags: bool, tail_field: str | None) -> tuple:
    """The walk ops for a response frame (size prefix, header, body) of ``message_class`` at ``version``.

    ``header_tags``: the response header has a tagged section (header v1). ``tail_field``: the tail
    starts at this top-level regular field (it must be the last one); None: at the body's
    top-level tagged section.
    """
    flexible = message_class.is_flexible(version)
    ops: list[tuple] = [(_SKIP, 8)]  # size and correlation id
    if header_tags:
        ops.append((_TAGS,))
    body = _struct_ops(message_class, version, flexible, top=True, tail_field=tail_field)
    ops += body
    return tuple(_merge(ops))


def _struct_ops(cls: Any, version: int, flexible: bool, top: bool = False, tail_field: str | None = None) -> list:
    ops: list[tuple] = []
    regular = [f for f in cls._FIELDS if f.present(version) and not f.is_tagged(version)]
    for f in regular:
        if top and tail_field is not None and f.name == tail_field:
            if f is not regular[-1]:
                raise ValueError(f"{cls.__name__}.{tail_field} is not the last field of v{version}")
            ops.append((_TAIL,))
            return ops
        ops += _field_ops(f, version, f.is_flexible(version, flexible))
    if top and tail_field is not None:
        raise ValueError(f"{cls.__name__} v{version} has no field {tail_field}")
    if flexible:
        ops.append((_TAIL,) if top else (_TAGS,))
    elif top:
        raise ValueError(f"{cls.__name__} v{version} is not flexible: it has no tagged tail")
    return ops


def _field_ops(f: Any, version: int, compact: bool) -> list:
    nullable = f.is_nullable(version)
    if f.array:
        if f.type == "struct":
            elem = tuple(_merge(_struct_ops(f.struct, version, compact)))
        else:
            elem = tuple(_scalar_ops(f.type, compact, False))
        size = elem[0][1] if len(elem) == 1 and elem[0][0] == _SKIP else 0
        return [(_ARRAY, compact, nullable, elem, size)]
    if f.type == "struct":
        return _struct_ops(f.struct, version, compact)
    return _scalar_ops(f.type, compact, nullable)


def _scalar_ops(t: str, compact: bool, nullable: bool) -> list:
    if t in P.FIXED:
        return [(_SKIP, P.FIXED[t][1])]
    if t == "uuid":
        return [(_SKIP, 16)]
    if t in ("string", "bytes", "records"):
        if compact:
            return [(_CLEN, nullable)]
        return [(_LEN, 2 if t == "string" else 4, nullable)]
    raise ValueError(f"cannot walk a field of type {t}")


def _merge(ops: list) -> list:
    out: list[tuple] = []
    for op in ops:
        if op[0] == _SKIP and out and out[-1][0] == _SKIP:
            out[-1] = (_SKIP, out[-1][1] + op[1])
        else:
            out.append(op)
    return out


class FrameWalker:
    """Finds the tail of one response frame (``total`` bytes, size prefix included) as it arrives."""

    __slots__ = ("_partial", "_pos", "_skip", "_stack", "tail_at", "total")

    def __init__(self, program: tuple, total: int) -> None:
        self.total = total
        self.tail_at = -1  # offset in the frame where the tail starts, once known
        self._pos = 0  # offset in the frame of the next byte ``feed`` gets
        self._skip = 0  # bytes still to pass over (a record set, a string) before the next op
        self._partial = b""  # the start of a length prefix that straddles two chunks
        # [ops, next op, repeats left including this one]
        self._stack: list[list[Any]] = [[program, 0, 1]]

    @property
    def skipping(self) -> int:
        """Bytes the walk will pass over unread before it reads again (inside a record set)."""
        return self._skip

    def pass_over(self, n: int) -> None:
        """``feed`` for ``n`` bytes that are all inside what ``skipping`` says is skipped."""
        self._skip -= n
        self._pos += n

    def feed(self, data: bytes | memoryview) -> None:
        """Walk the next bytes of the frame (bytes after the tail are not looked at)."""
        if self.tail_at >= 0:
            self._pos += len(data)
            return
        n = len(data)
        skip = self._skip
        if skip:
            if skip > n:
                self._skip = skip - n
                self._pos += n
                return
            self._skip = 0
            i = skip
        else:
            i = 0
        base = self._pos
        if self._partial:
            # a length prefix began in the last chunk: walk on over its bytes joined to this one's
            # (at most once per chunk, and only when a prefix straddles the boundary)
            data = self._partial + bytes(data[i:])
            base -= len(self._partial)
            n = len(data)
            i = 0
            self._partial = b""
        try:
            self._walk(data, i, n, base)
        except (IndexError, ValueError) as exc:
            raise WalkError(f"malformed frame at byte {base + i}: {exc}") from exc

    def _walk(self, data: Any, i: int, n: int, base: int) -> None:  # noqa: C901 - the op interpreter's loop: state in locals on the streamed hot path
        stack = self._stack
        total = self.total
        frame = stack[-1]
        ops, k = frame[0], frame[1]
        while True:
            if k == len(ops):
                if frame[2] > 1:
                    frame[2] -= 1
                    k = 0
                    continue
                stack.pop()
                frame = stack[-1]
                ops, k = frame[0], frame[1]
                continue
            op = ops[k]
            code = op[0]
            start = i
            if code == _SKIP:
                i += op[1]
            elif code == _CLEN or code == _ULEN or code == _UVAR:
                v = 0
                shift = 0
                while True:
                    if i >= n:
                        return self._stash(data, start, n, base, frame, k)
                    b = data[i]
                    i += 1
                    v |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
                    if shift > 28:
                        raise WalkError(f"varint longer than 5 bytes at byte {base + start}")
                if code == _CLEN:
                    if v == 0:
                        if not op[1]:
                            raise WalkError(f"null where no null is allowed at byte {base + start}")
                    else:
                        i += v - 1
                elif code == _ULEN:
                    i += v
            elif code == _LEN:
                w = op[1]
                if i + w > n:
                    return self._stash(data, start, n, base, frame, k)
                v = int.from_bytes(data[i : i + w], "big", signed=True)
                i += w
                if v < 0:
                    if v != -1 or not op[2]:
                        raise WalkError(f"bad length {v} at byte {base + start}")
                else:
                    i += v
            elif code == _ARRAY:
                if op[1]:
                    v = 0
                    shift = 0
                    while True:
                        if i >= n:
                            return self._stash(data, start, n, base, frame, k)
                        b = data[i]
                        i += 1
                        v |= (b & 0x7F) << shift
                        if b < 0x80:
                            break
                        shift += 7
                        if shift > 28:
                            raise WalkError(f"varint longer than 5 bytes at byte {base + start}")
                    count = v - 1
                else:
                    if i + 4 > n:
                        return self._stash(data, start, n, base, frame, k)
                    count = int.from_bytes(data[i : i + 4], "big", signed=True)
                    i += 4
                if count < 0:
                    if count != -1 or not op[2]:
                        raise WalkError(f"bad array length {count} at byte {base + start}")
                elif count:
                    if op[4]:
                        i += count * op[4]
                    else:
                        if base + i + count > total:  # every element takes a byte at least
                            raise WalkError(f"array of {count} overruns the frame at byte {base + start}")
                        frame[1] = k + 1
                        frame = [op[3], 0, count]
                        stack.append(frame)
                        ops, k = frame[0], 0
                        continue
            elif code == _TAGS:
                v = 0
                shift = 0
                while True:
                    if i >= n:
                        return self._stash(data, start, n, base, frame, k)
                    b = data[i]
                    i += 1
                    v |= (b & 0x7F) << shift
                    if b < 0x80:
                        break
                    shift += 7
                    if shift > 28:
                        raise WalkError(f"varint longer than 5 bytes at byte {base + start}")
                if v:
                    if base + i + 2 * v > total:
                        raise WalkError(f"{v} tagged fields overrun the frame at byte {base + start}")
                    frame[1] = k + 1
                    frame = [_TAG_ENTRY, 0, v]
                    stack.append(frame)
                    ops, k = _TAG_ENTRY, 0
                    continue
            else:  # _TAIL
                if base + i > total:
                    raise WalkError(f"the frame ends before its tail (byte {base + i} of {total})")
                self.tail_at = base + i
                self._pos = base + n
                self._stack = []
                return None
            k += 1
            if base + i > total:
                raise WalkError(f"a length at byte {base + start} runs past the frame's end ({total})")
            if i > n:
                frame[1] = k
                self._skip = i - n
                self._pos = base + n
                return None

    def _stash(self, data: Any, start: int, n: int, base: int, frame: list, k: int) -> None:
        """A length prefix runs past this chunk: keep its first bytes for the next ``feed``."""
        if base + n >= self.total:
            raise WalkError(f"the frame ends inside a length at byte {base + start}")
        frame[1] = k
        self._partial = bytes(data[start:n])
        self._pos = base + n


def compile_finder(program: tuple, record: bool = False) -> Any:
    """A function ``find(buf, end) -> offset of the tail`` for a whole frame, from ``program``.

    The same walk as ``FrameWalker``, for a frame that is all there (most Produce answers and
    small Fetch answers arrive in one read): straight-line code compiled once per (api, version).
    Raises ``WalkError`` for a malformed frame. ``record``: ``find(buf, end, note)`` calls
    ``note(offset)`` for every byte the walk reads (-1 for a read it cannot list), so a caller can
    tell a later frame that has the same bytes there walks the same way (``TailMemo``).
    """
    args = "d, end, R" if record else "d, end"
    lines = [f"def find({args}):", "    i = 0", "    try:"]
    _gen(program, lines, 2, [0], record)
    lines += [
        "    except (IndexError, ValueError) as exc:",
        "        raise WalkError(f'malformed frame: {exc}') from exc",
    ]
    env: dict[str, Any] = {"_uv": _uv_slow, "_clen": _clen_slow, "_tags": _tags_slow, "WalkError": WalkError}
    exec(compile("\n".join(lines), "<tail-walk>", "exec"), env)  # source built from the codec's own tables
    return env["find"]


class TailMemo:
    """Where the tail starts in frames shaped like one seen before, without walking them.

    A walk's path depends only on the bytes it reads (length prefixes, counts); fixed-width fields
    are skipped unread. So a frame of the same length whose bytes at every offset the last walk
    read are the same walks the same way to the same tail. Successive Produce answers on a
    connection differ only in fixed-width fields (offsets, timestamps): one ``itemgetter`` call
    and a tuple comparison replace a walk of ~45 Python lines. At most ``size`` lengths are kept.
    """

    __slots__ = ("_find", "_find_rec", "_memo", "size")

    def __init__(self, program: tuple, size: int = 64) -> None:
        self._find = compile_finder(program)
        self._find_rec = compile_finder(program, record=True)
        self._memo: dict[int, tuple[Any, Any, int]] = {}
        self.size = size

    def tail_at(self, frame: Any, end: int) -> int:
        seen = self._memo.get(end)
        if seen is not None and seen[0](frame) == seen[1]:
            return seen[2]
        reads: list[int] = []
        at: int = self._find_rec(frame, end, reads.append)
        if reads and -1 not in reads:
            getter = itemgetter(*reads)
            if len(self._memo) >= self.size:
                self._memo.clear()
            self._memo[end] = (getter, getter(frame), at)
        return at


def _uv_slow(d: Any, i: int) -> tuple[int, int]:
    v, i = P.read_uvarint(d, i)
    return v, i


def _clen_slow(d: Any, i: int, nullable: bool) -> int:
    """Past a compact string/bytes whose length prefix is not one byte of 1..127 (or is null)."""
    v, i = P.read_uvarint(d, i)
    if v == 0:
        if not nullable:
            raise WalkError("null where no null is allowed")
        return i
    return i + v - 1


def _tags_slow(d: Any, i: int) -> int:
    """Past a tagged section that is not empty (``i`` at its count)."""
    n, i = P.read_uvarint(d, i)
    for _ in range(n):
        _tag, i = P.read_uvarint(d, i)
        size, i = P.read_uvarint(d, i)
        i += size
    return i


def _gen(ops: tuple, out: list[str], ind: int, depth: list[int], rec: bool = False) -> None:
    """Straight-line source for ``ops``; the common one-byte prefixes read inline (each line costs).

    ``rec``: note every offset read (``R(i)``; ``R(-1)`` before a helper whose reads are not listed).
    """
    pad = "    " * ind
    note = f"{pad}R(i)" if rec else None
    slow = f"{pad}    R(-1)" if rec else None
    for op in ops:
        code = op[0]
        depth[0] += 1
        v = f"v{depth[0]}"
        if code == _SKIP:
            out.append(f"{pad}i += {op[1]}")
        elif code == _CLEN:
            # a one-byte prefix N (1..127) and its N-1 bytes take N bytes in all
            out += [note] if note else []
            out.append(f"{pad}{v} = d[i]")
            out.append(f"{pad}if 0 < {v} < 128:")
            out.append(f"{pad}    i += {v}")
            if op[1]:  # null: one byte 0
                out.append(f"{pad}elif {v} == 0:")
                out.append(f"{pad}    i += 1")
            out.append(f"{pad}else:")
            out += [slow] if slow else []
            out.append(f"{pad}    i = _clen(d, i, {bool(op[1])})")
        elif code == _LEN:
            w = op[1]
            out += [f"{pad}R(i + {k})" for k in range(w)] if rec else []
            out.append(f"{pad}{v} = int.from_bytes(d[i:i + {w}], 'big', signed=True)")
            out.append(f"{pad}i += {w}")
            out.append(f"{pad}if {v} > 0:")
            out.append(f"{pad}    i += {v}")
            out.append(f"{pad}elif {v} < {-1 if op[2] else 0}:")
            out.append(f"{pad}    raise WalkError('bad length')")
        elif code == _ARRAY:
            if op[1]:
                out += [note] if note else []
                out.append(f"{pad}{v} = d[i] - 1")
                out.append(f"{pad}if {v} < 127:")
                out.append(f"{pad}    i += 1")
                out.append(f"{pad}else:")
                out += [slow] if slow else []
                out.append(f"{pad}    {v}, i = _uv(d, i)")
                out.append(f"{pad}    {v} -= 1")
            else:
                out += [f"{pad}R(i + {k})" for k in range(4)] if rec else []
                out.append(f"{pad}{v} = int.from_bytes(d[i:i + 4], 'big', signed=True)")
                out.append(f"{pad}i += 4")
            out.append(f"{pad}if {v} > 0:")
            if op[4]:
                out.append(f"{pad}    i += {v} * {op[4]}")
            else:
                out.append(f"{pad}    if {v} > end - i:")  # every element takes a byte at least
                out.append(f"{pad}        raise WalkError('array overruns the frame')")
                out.append(f"{pad}    for _ in range({v}):")
                _gen(op[3], out, ind + 2, depth, rec)
            out.append(f"{pad}elif {v} < {-1 if op[2] else 0}:")
            out.append(f"{pad}    raise WalkError('bad array length')")
        elif code == _TAGS:
            out += [note] if note else []
            out.append(f"{pad}if d[i]:")
            out += [slow] if slow else []
            out.append(f"{pad}    i = _tags(d, i)")
            out.append(f"{pad}else:")
            out.append(f"{pad}    i += 1")
        elif code == _TAIL:
            out.append(f"{pad}if i > end:")
            out.append(f"{pad}    raise WalkError(f'the frame ends before its tail (byte {{i}} of {{end}})')")
            out.append(f"{pad}return i")
        else:  # pragma: no cover - programs hold only the codes above
            raise ValueError(f"unknown walk op {op!r}")
    if not ops or ops[-1][0] != _TAIL:
        out.append(f"{pad}pass")


# -- tagged sections and node endpoints ------------------------------------------------------


def read_tagged(buf: Any, pos: int) -> tuple[list[tuple[int, bytes]], int]:
    """A tagged-field section at ``pos``: its (tag, value bytes) entries and the offset after it."""
    count, pos = P.read_uvarint(buf, pos)
    entries = []
    for _ in range(count):
        tag, pos = P.read_uvarint(buf, pos)
        size, pos = P.read_uvarint(buf, pos)
        if pos + size > len(buf):
            raise WalkError("a tagged field runs past the tail's end")
        entries.append((tag, bytes(buf[pos : pos + size])))
        pos += size
    return entries, pos


def _tagged_size(entries: list[tuple[int, bytes]]) -> int:
    return len(P.uvarint_bytes(len(entries))) + sum(
        len(P.uvarint_bytes(tag)) + len(P.uvarint_bytes(len(v))) + len(v) for tag, v in entries
    )


def _pad_entry(room: int, above: int) -> tuple[int, bytes] | None:
    """One (tag above ``above``, value) whose encoding takes exactly ``room`` bytes; None if none does."""
    for tag in (0x7F, PAD_TAG):  # a 1-byte and a 5-byte tag number: every room >= 2 has a fit
        if tag <= above:
            continue  # tagged fields go in tag order: the pad must come last
        tag_len = len(P.uvarint_bytes(tag))
        for size_len in (1, 2, 3, 4, 5):
            value = room - tag_len - size_len
            if value >= 0 and len(P.uvarint_bytes(value)) == size_len:
                return tag, bytes(value)
    return None


def fit_tagged(entries: list[tuple[int, bytes]], length: int) -> bytes | None:
    """A tagged section holding ``entries`` (sorted by tag) padded to exactly ``length`` bytes.

    None when they need more room than ``length``, or leave exactly 1 byte that no entry can fill.
    The padding entry goes last, with a tag above every tag in ``entries``.
    """
    used = _tagged_size(entries)
    if used == length:
        out = bytearray()
        P.write_tagged(out, entries)
        return bytes(out)
    if used > length:
        return None
    top = entries[-1][0] if entries else -1
    # adding the pad entry may lengthen the count's varint (127 -> 128 entries): account for it
    room = length - used - (len(P.uvarint_bytes(len(entries) + 1)) - len(P.uvarint_bytes(len(entries))))
    pad = _pad_entry(room, top)
    if pad is None:
        return None
    out = bytearray()
    P.write_tagged(out, [*entries, pad])
    assert len(out) == length
    return bytes(out)


def read_node_endpoints(cls: Any, buf: Any, pos: int, version: int) -> tuple[list[Any], int]:
    """A compact array of ``cls`` (a generated NodeEndpoint struct) at ``pos``; null reads as empty."""
    count, pos = P.read_uvarint(buf, pos)
    decode = get_decoder(cls, version, True)
    out = []
    for _ in range(max(count - 1, 0)):
        node, pos = decode(buf, pos, len(buf))
        out.append(node)
    return out, pos


def encode_node_endpoints(cls: Any, nodes: list[Any], version: int) -> bytes:
    encode = get_encoder(cls, version, True)
    out = bytearray(P.uvarint_bytes(len(nodes) + 1))
    for node in nodes:
        encode(node, out)
    return bytes(out)
