"""Runtime for the generated Kafka message classes.

Generated modules (``codec/generated/*.py``) declare classes deriving from :class:`Struct` /
:class:`Message` with a ``_FIELDS`` table of :class:`Field`. This module turns a field table into
specialised straight-line decode and encode functions per (class, version, flexible) using ``exec``;
they are compiled lazily on first use and cached.

Value types on decode:

* int8/16/32/64, uint16/32 -> ``int``; float64 -> ``float``; bool -> ``bool``
* string -> ``str`` (or ``None`` when nullable)
* bytes -> ``bytes`` (a copy; small payloads such as SASL tokens or member metadata)
* records -> ``memoryview`` slice of the input buffer (zero copy, never parsed) or ``None``
* uuid -> ``uuid.UUID`` (all zeros decodes to ``UUID(int=0)``)
* arrays -> ``list`` (or ``None`` when nullable); structs -> instances of the generated class

Version semantics: a field outside its ``versions`` range is not on the wire; decode leaves its
default value, and encode silently skips it (whatever its value). Tagged fields are emitted on
encode only when their value differs from the default. Unknown tagged fields seen on decode are
kept per struct in ``_unknown_tagged`` (list of ``(tag, bytes)``) and re-emitted on encode,
merged with known tagged fields in tag order.
"""

from __future__ import annotations

import struct
import uuid
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from kgate.codec import primitives as P
from kgate.codec.errors import CodecError

MAX_VERSION = 0x7FFF
_UNSET = object()
_ZERO_UUID = uuid.UUID(int=0)
_SMALL_ARRAY = 16  # arrays of fixed-width primitives shorter than this use precompiled Structs


class Field:
    """One entry of a generated ``_FIELDS`` table."""

    __slots__ = ("array", "default", "flexible", "name", "nullable", "struct", "tag", "tagged", "type", "versions")

    def __init__(
        self,
        name,
        type,
        versions,
        *,
        array=False,
        struct=None,
        nullable=None,
        tag=None,
        tagged=None,
        flexible=_UNSET,
        default=_UNSET,
    ):
        self.name = name
        self.type = type
        self.versions = versions
        self.array = array
        self.struct = struct
        self.nullable = nullable
        self.tag = tag
        self.tagged = tagged
        self.flexible = flexible
        self.default = default

    def present(self, v: int) -> bool:
        return self.versions[0] <= v <= self.versions[1]

    def is_nullable(self, v: int) -> bool:
        return self.nullable is not None and self.nullable[0] <= v <= self.nullable[1]

    def is_tagged(self, v: int) -> bool:
        return self.tagged is not None and self.tagged[0] <= v <= self.tagged[1]

    def is_flexible(self, v: int, msg_flexible: bool) -> bool:
        if self.flexible is _UNSET:
            return msg_flexible
        return self.flexible is not None and self.flexible[0] <= v <= self.flexible[1]

    def default_value(self):
        """A fresh default value (new list / struct instance where mutable)."""
        if self.default is not _UNSET:
            return self.default
        if self.array:
            return []
        t = self.type
        if t == "struct":
            return self.struct()
        if t in ("string",):
            return ""
        if t == "bytes":
            return b""
        if t == "records":
            # Empty, not null: what kgate builds itself must look like what a broker sends. Kafka's
            # brokers answer a refused partition with MemoryRecords.EMPTY; a null records field
            # (size -1) makes librdkafka reject the whole Fetch response ("invalid MessageSetSize
            # -1") and fetch again at once: ~1,000 Fetches in 5 s through topic-policy (issue 12).
            return b""
        if t == "uuid":
            return _ZERO_UUID
        if t == "float64":
            return 0.0
        if t == "bool":
            return False
        return 0

    def default_is_mutable(self) -> bool:
        return self.default is _UNSET and (self.array or self.type == "struct")

    def __repr__(self):
        return f"Field({self.name!r}, {self.type!r}, {self.versions!r})"


def _fmt_value(v):
    if isinstance(v, memoryview):
        return f"<memoryview {v.nbytes} bytes>"
    if isinstance(v, (bytes, bytearray)) and len(v) > 64:
        return f"<{type(v).__name__} {len(v)} bytes>"
    return repr(v)


class Struct:
    """Base of all generated structs: mutable, ``__slots__``, keyword construction, value equality."""

    __slots__ = ("_unknown_tagged",)
    _FIELDS: tuple[Field, ...] = ()
    _unknown_tagged: list[tuple[int, bytes]] | None  # set by every generated __init__

    def __init__(self, **kwargs):
        # First construction of this class: compile a specialised __init__ and install it.
        cls = type(self)
        if "__init__" not in cls.__dict__:
            setattr(cls, "__init__", _compile_init(cls))  # noqa: B010  # installed once per class
        cls.__init__(self, **kwargs)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        for f in self._FIELDS:
            if getattr(self, f.name) != getattr(other, f.name):
                return False
        return (self._unknown_tagged or None) == (other._unknown_tagged or None)

    __hash__ = None  # type: ignore[assignment]  # mutable: not hashable

    def __repr__(self):
        parts = [f"{f.name}={_fmt_value(getattr(self, f.name, None))}" for f in self._FIELDS]
        if getattr(self, "_unknown_tagged", None):
            parts.append(f"_unknown_tagged={self._unknown_tagged!r}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def to_dict(self) -> dict:
        """Plain-python view (nested structs become dicts); handy for tests and logging."""
        return {f.name: _to_plain(getattr(self, f.name)) for f in self._FIELDS}


def _to_plain(v):
    if isinstance(v, Struct):
        return v.to_dict()
    if isinstance(v, list):
        return [_to_plain(x) for x in v]
    if isinstance(v, memoryview):
        return bytes(v)
    return v


class Message(Struct):
    """Base of top-level request/response classes."""

    __slots__ = ()
    API_KEY: int = -1
    API_NAME: str = ""
    KIND: str = ""
    MIN_VERSION: int = 0
    MAX_VERSION: int = 0
    FLEXIBLE_MIN: int | None = None

    if TYPE_CHECKING:
        # fields are set from each class's generated _FIELDS table, not declared one by one
        def __getattr__(self, name: str) -> Any: ...
        def __setattr__(self, name: str, value: Any) -> None: ...

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        return cls.FLEXIBLE_MIN is not None and version >= cls.FLEXIBLE_MIN

    @classmethod
    def check_version(cls, version: int) -> None:
        if not (cls.MIN_VERSION <= version <= cls.MAX_VERSION):
            raise CodecError(
                f"{cls.__name__} version {version} unsupported (valid {cls.MIN_VERSION}-{cls.MAX_VERSION})"
            )

    @classmethod
    def decode_ex(cls, buf, version: int):
        """Decode a body from ``buf`` (bytes-like); return ``(message, consumed_bytes)``.

        Trailing bytes after the body are allowed (and not consumed).
        """
        mv = buf if type(buf) is memoryview else memoryview(buf)
        if mv.ndim != 1 or mv.itemsize != 1 or mv.format != "B":
            mv = mv.cast("B")
        n = len(mv)
        # Small bodies are decoded with a bytes copy at hand (strings/bytes are sliced from it,
        # which is much cheaper than from a memoryview); records still slice the input ``mv``.
        raw = n <= _RAW_COPY_MAX
        dec = _DEC_FAST.get((cls, version, raw))
        if dec is None:
            cls.check_version(version)
            dec = _DEC_FAST[(cls, version, raw)] = get_decoder(cls, version, cls.is_flexible(version), raw)
        try:
            if raw:
                return dec(mv, 0, n, buf if type(buf) is bytes else mv.tobytes())
            return dec(mv, 0, n)
        except CodecError:
            raise
        except (
            IndexError,
            struct.error,
            UnicodeDecodeError,
            ValueError,
            TypeError,
            OverflowError,
            MemoryError,
            RecursionError,
        ) as e:
            raise CodecError(f"malformed {cls.__name__} v{version}: {type(e).__name__}: {e}") from e

    @classmethod
    def decode(cls, buf, version: int):
        return cls.decode_ex(buf, version)[0]

    def encode(self, version: int) -> bytearray:
        """Encode this message's body at ``version`` (fields absent in that version are skipped)."""
        cls = type(self)
        enc = _ENC_FAST.get((cls, version))
        if enc is None:
            cls.check_version(version)
            enc = _ENC_FAST[(cls, version)] = get_encoder(cls, version, cls.is_flexible(version))
        out = bytearray()
        try:
            enc(self, out)
        except CodecError:
            raise
        except (struct.error, AttributeError, TypeError, ValueError, OverflowError) as e:
            raise CodecError(f"cannot encode {cls.__name__} v{version}: {type(e).__name__}: {e}") from e
        return out


# --------------------------------------------------------------------------------------------
# compilation

_DEC_CACHE: dict = {}
_ENC_CACHE: dict = {}


_DEC_FAST: dict = {}  # (message class, version, raw) -> decoder, filled after a version check
_ENC_FAST: dict = {}  # (message class, version) -> encoder
_RAW_COPY_MAX = 1 << 16  # bodies up to this size are copied to bytes once for string slicing


def get_decoder(cls, version: int, flexible: bool, raw: bool = False):
    """Compiled ``decode(buf, pos, end[, raw]) -> (obj, pos)``.

    With ``raw=True`` the function takes a fourth argument, a ``bytes`` copy of ``buf``, from which
    strings and bytes fields are sliced.
    """
    key = (cls, version, flexible, raw)
    fn = _DEC_CACHE.get(key)
    if fn is None:
        fn = _DEC_CACHE[key] = _compile(cls, version, flexible, decode=True, raw=raw)
    return fn


def get_encoder(cls, version: int, flexible: bool):
    key = (cls, version, flexible)
    fn = _ENC_CACHE.get(key)
    if fn is None:
        fn = _ENC_CACHE[key] = _compile(cls, version, flexible, decode=False)
    return fn


def _compile_init(cls):
    ns: dict[str, Any] = {"_M": _UNSET}
    params, body = [], []
    for f in cls._FIELDS:
        n = f.name
        if f.default_is_mutable():
            params.append(f"{n}=_M")
            if f.array:
                body.append(f"    self.{n} = [] if {n} is _M else {n}")
            else:
                ns[f"_S_{n}"] = f.struct
                body.append(f"    self.{n} = _S_{n}() if {n} is _M else {n}")
        else:
            ns[f"_D_{n}"] = f.default_value()
            params.append(f"{n}=_D_{n}")
            body.append(f"    self.{n} = {n}")
    params.append("_unknown_tagged=None")
    body.append("    self._unknown_tagged = _unknown_tagged")
    src = f"def __init__(self, *, {', '.join(params)}):\n" + "\n".join(body) + "\n"
    exec(compile(src, f"<codec init {cls.__name__}>", "exec"), ns)
    fn = ns["__init__"]
    fn.__qualname__ = f"{cls.__name__}.__init__"
    return fn


_SEG_MAX_ITEMS = 64  # arrays longer than this are not packed as part of a cached segment Struct
_SEG_CACHE_MAX = 256


def _segment_structs(fixed_fmt: str, spec, tail: bool):
    """Per-segment cache of Structs keyed by array length(s): returns (cache.get, make)."""
    cache: dict = {}

    def make(key):
        lens = key if type(key) is tuple else (key,)
        fmt = ">" + fixed_fmt
        for n, (ch, compact) in zip(lens, spec, strict=True):
            if n > _SEG_MAX_ITEMS:
                return None
            fmt += ("B" if compact else "i") + f"{n}{ch}"
        if tail:
            fmt += "B"
        if len(cache) >= _SEG_CACHE_MAX:
            cache.clear()
        st = cache[key] = struct.Struct(fmt)
        return st

    return cache.get, make


_MAX_INLINE = 8  # nested structs deeper than this are decoded/encoded by a separate function
_STR_TYPES = ("string", "bytes", "records")


class _Gen:
    """Source generator for one (class, version, flexible) decoder or encoder.

    Nested structs are inlined into the parent's function (up to ``_MAX_INLINE`` levels), so a
    whole message is decoded/encoded by one straight-line function without per-struct calls.
    """

    def __init__(self, cls, version: int, flexible: bool, raw: bool = False):
        self.cls = cls
        self.v = version
        self.flex = flexible
        self.raw = raw
        self.lines: list[str] = []
        self.ns: dict = {
            "_new": object.__new__,
            "_uvd": P.read_uvarint,
            "_uve": P.uvarint_bytes,
            "_trunc": P.truncated,
            "CodecError": CodecError,
            "_h": P.S_INT16,
            "_i": P.S_INT32,
            "_unpack_from": P.unpack_from,
            "_pack": P.pack,
            "_wtag": P.write_tagged,
            "_first": itemgetter(0),
            "_ug": P.UUID_BY_BYTES.get,
            "_uslow": P.uuid_from_bytes,
            "_ubg": P.UUID_BYTES_BY_INT.get,
            "_ubslow": P.uuid_to_bytes,
            "_scg": P.STR_COMPACT.get,
            "_scslow": P.str_compact,
            "_s16g": P.STR_INT16.get,
            "_s16slow": P.str_int16,
        }
        self.counter = 0
        self._consts: dict = {}

    def tmp(self, prefix="_t"):
        self.counter += 1
        return f"{prefix}{self.counter}"

    def const(self, value, prefix="_k"):
        name = self.tmp(prefix)
        self.ns[name] = value
        return name

    def struct_const(self, fmt):
        """A shared precompiled struct.Struct for ``fmt``."""
        key = ("S", fmt)
        name = self._consts.get(key)
        if name is None:
            name = self._consts[key] = self.const(struct.Struct(fmt), "_s")
        return name

    def emit(self, ind: int, line: str):
        self.lines.append("    " * ind + line)

    def split(self, cls):
        v, flex = self.v, self.flex
        present = [f for f in cls._FIELDS if f.present(v)]
        regular = [f for f in present if not (flex and f.is_tagged(v))]
        tagged = [f for f in present if flex and f.is_tagged(v)]
        return regular, tagged

    @staticmethod
    def in_run(f):
        return not f.array and (f.type in P.FIXED or f.type == "uuid")

    def starts_with_uvarint(self, f):
        """True when the field's wire form begins with a compact (uvarint) length."""
        return f.is_flexible(self.v, self.flex) and (f.array or f.type in _STR_TYPES)

    # ---------------------------------------------------------------- decode helpers
    def uv(self, ind, target):
        self.emit(ind, f"{target} = buf[pos]")
        self.emit(ind, f"if {target} < 128: pos += 1")
        self.emit(ind, f"else: {target}, pos = _uvd(buf, pos)")

    def read_len(self, ind, compact, wide, pre):
        """Read a length prefix (-1 means null) and return the variable holding it.

        ``pre`` names a variable already holding the raw uvarint (read ahead with a fixed run).
        """
        target = self.tmp()
        if compact:
            if pre is None:
                self.uv(ind, target)
                self.emit(ind, f"{target} -= 1")
            else:
                self.emit(ind, f"{target} = {pre} - 1")
        elif wide:
            self.emit(ind, f"{target}, = _i.unpack_from(buf, pos)")
            self.emit(ind, "pos += 4")
        else:
            self.emit(ind, f"{target}, = _h.unpack_from(buf, pos)")
            self.emit(ind, "pos += 2")
        return target

    def null_or_raise(self, ind, nullable, target, what):
        if nullable:
            self.emit(ind + 1, f"{target} = None")
        else:
            self.emit(ind + 1, f"raise CodecError({what!r} + ' is null but not nullable')")

    def read_struct(self, ind, scls, target, end, depth):
        """Decode a (non-null) struct of class scls at pos into target."""
        if depth >= _MAX_INLINE:
            d = self.const(get_decoder(scls, self.v, self.flex, self.raw), "_d")
            self.emit(ind, f"{target}, pos = {d}(buf, pos, {end}{', raw' if self.raw else ''})")
            return
        obj = self.tmp("_o")
        self.dec_struct(ind, scls, obj, end, depth + 1)
        self.emit(ind, f"{target} = {obj}")

    def read_scalar(self, ind, t, target, f, nullable, compact, end, what, depth, pre=None):
        """Read one non-array value of primitive/struct type t into target."""
        if t in P.FIXED:
            s = self.struct_const(">" + P.FIXED[t][0])
            self.emit(ind, f"{target}, = {s}.unpack_from(buf, pos)")
            self.emit(ind, f"pos += {P.FIXED[t][1]}")
        elif t == "uuid":
            u = self.tmp()
            s = self.struct_const(">16s")
            self.emit(ind, f"{u}, = {s}.unpack_from(buf, pos)")
            self.emit(ind, "pos += 16")
            self.emit(ind, f"{target} = _ug({u}) or _uslow({u})")
        elif t in _STR_TYPES:
            e = self.tmp()
            n = self.read_len(ind, compact, t != "string", pre)
            self.emit(ind, f"if {n} < 0:")
            self.null_or_raise(ind, nullable, target, what)
            self.emit(ind, "else:")
            self.emit(ind + 1, f"{e} = pos + {n}")
            self.emit(ind + 1, f"if {e} > {end}: raise _trunc()")
            if t == "string":
                if self.raw:
                    self.emit(ind + 1, f"{target} = raw[pos:{e}].decode()")
                else:
                    self.emit(ind + 1, f"{target} = str(buf[pos:{e}], 'utf-8')")
            elif t == "bytes":
                self.emit(ind + 1, f"{target} = {'raw' if self.raw else 'bytes(buf'}[pos:{e}]{'' if self.raw else ')'}")
            else:
                self.emit(ind + 1, f"{target} = buf[pos:{e}]")
            self.emit(ind + 1, f"pos = {e}")
        elif t == "struct":
            if nullable:
                self.emit(ind, "if buf[pos] & 0x80:")
                self.emit(ind + 1, "pos += 1")
                self.emit(ind + 1, f"{target} = None")
                self.emit(ind, "else:")
                self.emit(ind + 1, "pos += 1")
                self.read_struct(ind + 1, f.struct, target, end, depth)
            else:
                self.read_struct(ind, f.struct, target, end, depth)
        else:
            raise TypeError(f"unknown field type {t}")

    def read_field(self, ind, f, target, end, depth, pre=None, ahead=None):
        """Emit code reading field f into target. With ``ahead`` (a variable name), a small fixed
        array may also read the next uvarint into it; returns ``ahead`` when it did so."""
        v = self.v
        compact = f.is_flexible(v, self.flex)
        nullable = f.is_nullable(v)
        what = f"{self.cls.__name__}.{f.name}"
        if not f.array:
            self.read_scalar(ind, f.type, target, f, nullable, compact, end, what, depth, pre)
            return None
        n = self.read_len(ind, compact, True, pre)
        self.emit(ind, f"if {n} < 0:")
        self.null_or_raise(ind, nullable, target, what)
        t = f.type
        if t in P.FIXED:
            ch, size = P.FIXED[t]
            if ahead:
                # One-element arrays (typical replica lists) are read together with the following
                # uvarint. Reading past ``end`` inside a tagged field is caught by the tagged-size
                # check; past the buffer by struct.error.
                one, a = self.struct_const(f">{ch}B"), self.tmp()
                self.emit(ind, f"elif {n} == 1:")
                self.emit(ind + 1, f"{a}, {ahead} = {one}.unpack_from(buf, pos)")
                self.emit(ind + 1, f"{target} = [{a}]")
                self.emit(ind + 1, f"if {ahead} < 128: pos += {size + 1}")
                self.emit(ind + 1, f"else: {ahead}, pos = _uvd(buf, pos + {size})")
                self.emit(ind, f"elif {n} == 0:")
                self.emit(ind + 1, f"{target} = []")
                self.uv(ind + 1, ahead)
                self.emit(ind, "else:")
                ind += 1
                self.emit(ind, f"if {n} * {size} > {end} - pos: raise _trunc()")
                arr = self.const(tuple(struct.Struct(f">{k}{ch}") for k in range(_SMALL_ARRAY)), "_a")
                self.emit(ind, f"if {n} < {_SMALL_ARRAY}: {target} = [*{arr}[{n}].unpack_from(buf, pos)]")
                self.emit(ind, f"else: {target} = list(_unpack_from('>%d{ch}' % {n}, buf, pos))")
                self.emit(ind, f"pos += {n} * {size}")
                self.uv(ind, ahead)
                return ahead
            self.emit(ind, f"elif {n} == 0: {target} = []")
            self.emit(ind, "else:")
            ind += 1
            self.emit(ind, f"if {n} * {size} > {end} - pos: raise _trunc()")
            arr = self.const(tuple(struct.Struct(f">{k}{ch}") for k in range(_SMALL_ARRAY)), "_a")
            self.emit(ind, f"if {n} < {_SMALL_ARRAY}: {target} = [*{arr}[{n}].unpack_from(buf, pos)]")
            self.emit(ind, f"else: {target} = list(_unpack_from('>%d{ch}' % {n}, buf, pos))")
            self.emit(ind, f"pos += {n} * {size}")
            return None
        self.emit(ind, "else:")
        ind += 1
        min_size = 1
        if t == "struct" and not self.flex and not any(x.present(v) for x in f.struct._FIELDS):
            min_size = 0
        if min_size:
            self.emit(ind, f"if {n} > {end} - pos: raise _trunc()")
        else:
            self.emit(ind, f"if {n} > 1000000: raise CodecError('absurd array length')")
        lst, x = self.tmp("_l"), self.tmp("_x")
        self.emit(ind, f"{lst} = []")
        self.emit(ind, f"for _ in range({n}):")
        self.read_scalar(ind + 1, t, x, f, False, compact, end, what + "[]", depth)
        self.emit(ind + 1, f"{lst}.append({x})")
        self.emit(ind, f"{target} = {lst}")
        return None

    def default_expr(self, f):
        if f.default_is_mutable():
            if f.array:
                return "[]"
            return self.const(f.struct, "_S") + "()"
        return self.const(f.default_value(), "_D")

    def dec_struct(self, ind, cls, obj, end, depth):  # noqa: C901 - emits one struct's decoder: a branch per field kind, in one place
        """Emit code decoding an instance of cls at pos into the local variable obj."""
        regular, tagged = self.split(cls)
        saved, self.cls = self.cls, cls
        self.emit(ind, f"{obj} = _new({self.const(cls, '_C')})")
        for f in cls._FIELDS:
            if f not in regular:
                self.emit(ind, f"{obj}.{f.name} = {self.default_expr(f)}")
        i = 0
        pre = None
        while i < len(regular):
            f = regular[i]
            if not self.in_run(f):
                ahead = None
                if (
                    f.array
                    and f.type in P.FIXED
                    and self.starts_with_uvarint(f)
                    and not f.is_nullable(self.v)
                    and ((self.starts_with_uvarint(regular[i + 1])) if i + 1 < len(regular) else self.flex)
                ):
                    ahead = self.tmp()
                pre = self.read_field(ind, f, f"{obj}.{f.name}", end, depth, pre, ahead)
                i += 1
                continue
            run = [f]
            while i + len(run) < len(regular) and self.in_run(regular[i + len(run)]):
                run.append(regular[i + len(run)])
            i += len(run)
            fmt = ">" + "".join("16s" if x.type == "uuid" else P.FIXED[x.type][0] for x in run)
            size = struct.calcsize(fmt)
            targets, uuids = [], []
            for x in run:
                if x.type == "uuid":
                    u = self.tmp()
                    uuids.append((x, u))
                    targets.append(u)
                else:
                    targets.append(f"{obj}.{x.name}")
            # Read the following uvarint (a compact length or the tag count) in the same call.
            ahead = self.starts_with_uvarint(regular[i]) if i < len(regular) else self.flex
            if ahead:
                fmt += "B"
                pre = self.tmp()
                targets.append(pre)
            self.emit(ind, f"{', '.join(targets)}, = {self.struct_const(fmt)}.unpack_from(buf, pos)")
            if ahead:
                self.emit(ind, f"if {pre} < 128: pos += {size + 1}")
                self.emit(ind, f"else: {pre}, pos = _uvd(buf, pos + {size})")
            else:
                self.emit(ind, f"pos += {size}")
            for x, u in uuids:
                self.emit(ind, f"{obj}.{x.name} = _ug({u}) or _uslow({u})")
        self.emit(ind, f"{obj}._unknown_tagged = None")
        if self.flex:
            nt = pre
            if nt is None:
                nt = self.tmp()
                self.uv(ind, nt)
            tag, sz, e = self.tmp("_tag"), self.tmp("_sz"), self.tmp("_e")
            self.emit(ind, f"if {nt}:")
            ind += 1
            self.emit(ind, f"for _ in range({nt}):")
            self.uv(ind + 1, tag)
            self.uv(ind + 1, sz)
            self.emit(ind + 1, f"{e} = pos + {sz}")
            self.emit(ind + 1, f"if {e} > {end}: raise _trunc()")
            kw = "if"
            for f in sorted(tagged, key=lambda x: x.tag):
                self.emit(ind + 1, f"{kw} {tag} == {f.tag}:")
                self.read_field(ind + 2, f, f"{obj}.{f.name}", e, depth)
                self.emit(ind + 2, f"if pos != {e}: raise CodecError('tagged field {f.name}: bad size')")
                kw = "elif"
            if tagged:
                self.emit(ind + 1, "else:")
                ind2 = ind + 2
            else:
                ind2 = ind + 1
            self.emit(ind2, f"if {obj}._unknown_tagged is None: {obj}._unknown_tagged = []")
            data = f"raw[pos:{e}]" if self.raw else f"bytes(buf[pos:{e}])"
            self.emit(ind2, f"{obj}._unknown_tagged.append(({tag}, {data}))")
            self.emit(ind2, f"pos = {e}")
        self.cls = saved

    def gen_decoder(self):
        self.emit(0, "def decode(buf, pos, end, raw):" if self.raw else "def decode(buf, pos, end):")
        self.dec_struct(1, self.cls, "o", "end", 0)
        self.emit(1, "return o, pos")

    # ---------------------------------------------------------------- encode helpers
    def write_uv(self, ind, expr, out):
        self.emit(ind, f"if {expr} < 128: {out}.append({expr})")
        self.emit(ind, f"else: {out} += _uve({expr})")

    def write_len(self, ind, n_expr, compact, wide, out):
        if compact:
            t = self.tmp()
            self.emit(ind, f"{t} = {n_expr} + 1")
            self.write_uv(ind, t, out)
        elif wide:
            self.emit(ind, f"{out} += _i.pack({n_expr})")
        else:
            self.emit(ind, f"{out} += _h.pack({n_expr})")

    def write_null(self, ind, compact, wide, out, nullable, what):
        if not nullable:
            self.emit(ind, f"raise CodecError({what!r} + ' is None but not nullable in this version')")
        elif compact:
            self.emit(ind, f"{out}.append(0)")
        elif wide:
            self.emit(ind, f"{out} += b'\\xff\\xff\\xff\\xff'")
        else:
            self.emit(ind, f"{out} += b'\\xff\\xff'")

    def write_struct(self, ind, scls, val, out, depth):
        if depth >= _MAX_INLINE:
            e = self.const(get_encoder(scls, self.v, self.flex), "_e")
            self.emit(ind, f"{e}({val}, {out})")
        else:
            self.enc_struct(ind, scls, val, out, depth + 1)

    def write_scalar(self, ind, t, val, f, nullable, compact, out, what, depth):
        if t in P.FIXED:
            s = self.struct_const(">" + P.FIXED[t][0])
            self.emit(ind, f"{out} += {s}.pack({val})")
        elif t == "uuid":
            u = self.tmp()
            self.emit(ind, f"{u} = {val}.int")
            self.emit(ind, f"{out} += _ubg({u}) or _ubslow({u})")
        elif t == "string":
            b = self.tmp()
            get, slow = ("_scg", "_scslow") if compact else ("_s16g", "_s16slow")
            self.emit(ind, f"{b} = {get}({val})")
            self.emit(ind, f"if {b} is None:")
            self.emit(ind + 1, f"if {val} is None:")
            self.write_null(ind + 2, compact, False, out, nullable, what)
            self.emit(ind + 1, f"else: {out} += {slow}({val})")
            self.emit(ind, f"else: {out} += {b}")
        elif t in ("bytes", "records"):
            self.emit(ind, f"if {val} is None:")
            self.write_null(ind + 1, compact, True, out, nullable, what)
            self.emit(ind, "else:")
            self.write_len(ind + 1, f"len({val})", compact, True, out)
            self.emit(ind + 1, f"{out} += {val}")
        elif t == "struct":
            if nullable:
                self.emit(ind, f"if {val} is None: {out}.append(0xff)")
                self.emit(ind, "else:")
                self.emit(ind + 1, f"{out}.append(1)")
                self.write_struct(ind + 1, f.struct, val, out, depth)
            else:
                self.write_struct(ind, f.struct, val, out, depth)
        else:
            raise TypeError(f"unknown field type {t}")

    def write_field(self, ind, f, expr, out, depth):
        v = self.v
        compact = f.is_flexible(v, self.flex)
        nullable = f.is_nullable(v)
        what = f"{self.cls.__name__}.{f.name}"
        val = self.tmp("_v")
        self.emit(ind, f"{val} = {expr}")
        if not f.array:
            self.write_scalar(ind, f.type, val, f, nullable, compact, out, what, depth)
            return
        self.emit(ind, f"if {val} is None:")
        self.write_null(ind + 1, compact, True, out, nullable, what)
        self.emit(ind, "else:")
        ind += 1
        t = f.type
        if t in P.FIXED:
            ch = P.FIXED[t][0]
            n = self.tmp()
            self.emit(ind, f"{n} = len({val})")
            pfx = "B" if compact else "i"
            arr = self.const(tuple(struct.Struct(f">{pfx}{k}{ch}") for k in range(_SMALL_ARRAY)), "_a")
            self.emit(ind, f"if {n} < {_SMALL_ARRAY}: {out} += {arr}[{n}].pack({n}{' + 1' if compact else ''}, *{val})")
            self.emit(ind, "else:")
            self.write_len(ind + 1, n, compact, True, out)
            self.emit(ind + 1, f"{out} += _pack('>%d{ch}' % {n}, *{val})")
            return
        self.write_len(ind, f"len({val})", compact, True, out)
        x = self.tmp("_x")
        self.emit(ind, f"for {x} in {val}:")
        self.write_scalar(ind + 1, t, x, f, False, compact, out, what + "[]", depth)

    def run_args(self, ind, obj, run):
        """Pack arguments (and struct format) for a run of fixed-width/uuid fields."""
        fmt, args = "", []
        for x in run:
            if x.type == "uuid":
                u, b = self.tmp(), self.tmp()
                self.emit(ind, f"{u} = {obj}.{x.name}.int")
                self.emit(ind, f"{b} = _ubg({u}) or _ubslow({u})")
                args.append(b)
                fmt += "16s"
            else:
                args.append(f"{obj}.{x.name}")
                fmt += P.FIXED[x.type][0]
        return fmt, args

    def write_tags_plain(self, ind, u, out):
        self.emit(ind, f"if {u}: _wtag({out}, sorted({u}, key=_first))")
        self.emit(ind, f"else: {out}.append(0)")

    def enc_run(self, ind, obj, out, run, tail):
        fmt, args = self.run_args(ind, obj, run)
        if not tail:
            self.emit(ind, f"{out} += {self.struct_const('>' + fmt)}.pack({', '.join(args)})")
            return
        # The run ends the struct: append the (empty) tag section byte in the same pack.
        u = self.tmp("_u")
        self.emit(ind, f"{u} = {obj}._unknown_tagged")
        self.emit(ind, f"if {u}:")
        self.emit(ind + 1, f"{out} += {self.struct_const('>' + fmt)}.pack({', '.join(args)})")
        self.emit(ind + 1, f"_wtag({out}, sorted({u}, key=_first))")
        self.emit(ind, f"else: {out} += {self.struct_const('>' + fmt + 'B')}.pack({', '.join([*args, '0'])})")

    def enc_segment(self, ind, obj, out, run, arrays, tail, depth):
        """A run of fixed fields followed by arrays of fixed-width items (and maybe the tag byte):
        one pack with a Struct cached per tuple of array lengths."""
        fmt, args = self.run_args(ind, obj, run)
        vs, ns = [], []
        for f in arrays:
            v = self.tmp("_v")
            self.emit(ind, f"{v} = {obj}.{f.name}")
            vs.append(v)
            ns.append(self.tmp())
        u = None
        conds = [f"{v} is not None" for v in vs]
        if tail:
            u = self.tmp("_u")
            self.emit(ind, f"{u} = {obj}._unknown_tagged")
            conds.append(f"not {u}")
        spec = [(P.FIXED[f.type][0], f.is_flexible(self.v, self.flex)) for f in arrays]
        get, mk = _segment_structs(fmt, spec, tail)
        get, mk = self.const(get, "_sg"), self.const(mk, "_sm")
        st = self.tmp("_st")
        self.emit(ind, f"if {' and '.join(conds)}:")
        for v, n in zip(vs, ns, strict=True):
            self.emit(ind + 1, f"{n} = len({v})")
        key = ns[0] if len(ns) == 1 else "(" + ", ".join(ns) + ")"
        self.emit(ind + 1, f"{st} = {get}({key}) or {mk}({key})")
        self.emit(ind, f"else: {st} = None")
        pargs = list(args)
        for (_ch, compact), v, n in zip(spec, vs, ns, strict=True):
            pargs.append(f"{n} + 1" if compact else n)
            pargs.append(f"*{v}")
        if tail:
            pargs.append("0")
        self.emit(ind, f"if {st} is not None: {out} += {st}.pack({', '.join(pargs)})")
        self.emit(ind, "else:")
        if run:
            self.emit(ind + 1, f"{out} += {self.struct_const('>' + fmt)}.pack({', '.join(args)})")
        for f, v in zip(arrays, vs, strict=True):
            self.write_field(ind + 1, f, v, out, depth)
        if tail:
            self.write_tags_plain(ind + 1, u, out)

    def enc_struct(self, ind, cls, obj, out, depth):
        """Emit code encoding the struct held in local variable obj of class cls."""
        regular, tagged = self.split(cls)
        saved, self.cls = self.cls, cls
        groups: list[tuple[str, Any]] = []  # ("run", [Field, ...]) or ("field", Field)
        i = 0
        while i < len(regular):
            f = regular[i]
            if self.in_run(f):
                run = [f]
                while i + len(run) < len(regular) and self.in_run(regular[i + len(run)]):
                    run.append(regular[i + len(run)])
                i += len(run)
                groups.append(("run", run))
            else:
                groups.append(("field", f))
                i += 1
        tail_ok = self.flex and not tagged
        tail_done = False
        gi = 0
        while gi < len(groups):
            kind, x = groups[gi]
            run = x if kind == "run" else []
            j = gi + 1 if kind == "run" else gi
            arrays = []
            while j < len(groups) and groups[j][0] == "field" and groups[j][1].array and groups[j][1].type in P.FIXED:
                arrays.append(groups[j][1])
                j += 1
            tail = tail_ok and j == len(groups)
            if arrays:
                self.enc_segment(ind, obj, out, run, arrays, tail, depth)
                tail_done = tail
                gi = j
            elif kind == "run":
                self.enc_run(ind, obj, out, run, tail)
                tail_done = tail
                gi += 1
            else:
                self.write_field(ind, x, f"{obj}.{x.name}", out, depth)
                gi += 1
        if self.flex and not tail_done:
            if not tagged:
                u = self.tmp("_u")
                self.emit(ind, f"{u} = {obj}._unknown_tagged")
                self.write_tags_plain(ind, u, out)
            else:
                tg = self.tmp("_tg")
                self.emit(ind, f"{tg} = []")
                for f in sorted(tagged, key=lambda x: x.tag):
                    d = self.const(f.default_value(), "_D")
                    val = self.tmp("_v")
                    tb = self.tmp("_tb")
                    self.emit(ind, f"{val} = {obj}.{f.name}")
                    self.emit(ind, f"if {val} != {d}:")
                    self.emit(ind + 1, f"{tb} = bytearray()")
                    self.write_field(ind + 1, f, val, tb, depth)
                    self.emit(ind + 1, f"{tg}.append(({f.tag}, {tb}))")
                u = self.tmp("_u")
                self.emit(ind, f"{u} = {obj}._unknown_tagged")
                self.emit(ind, f"if {u}:")
                self.emit(ind + 1, f"{tg}.extend({u})")
                self.emit(ind + 1, f"{tg}.sort(key=_first)")
                self.emit(ind, f"_wtag({out}, {tg})")
        self.cls = saved

    def gen_encoder(self):
        self.emit(0, "def encode(o, out):")
        self.enc_struct(1, self.cls, "o", "out", 0)
        self.emit(1, "return out")


def _compile(cls, version: int, flexible: bool, decode: bool, raw: bool = False):
    g = _Gen(cls, version, flexible, raw)
    if decode:
        g.gen_decoder()
    else:
        g.gen_encoder()
    src = "\n".join(g.lines) + "\n"
    kind = "decode" if decode else "encode"
    tag = (" flex" if flexible else "") + (" raw" if raw else "")
    code = compile(src, f"<codec {kind} {cls.__name__} v{version}{tag}>", "exec")
    exec(code, g.ns)
    fn = g.ns[kind]
    fn.__qualname__ = f"{cls.__name__}.{kind}_v{version}"
    fn._source = src
    return fn


def generated_source(cls, version: int, decode: bool = True, raw: bool = False) -> str:
    """Source text of the compiled decoder/encoder (debugging aid)."""
    flexible = getattr(cls, "is_flexible", lambda v: False)(version)
    fn = get_decoder(cls, version, flexible, raw) if decode else get_encoder(cls, version, flexible)
    return fn._source
