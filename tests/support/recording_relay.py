"""A recording relay: forwards bytes between clients and a broker unchanged and keeps every frame.

It sits where a proxy would, but decodes nothing: it splits each direction into frames by their
4-byte size prefix, reads a request's api key, version and correlation id from the fixed header
fields, and pairs each response with its request by correlation id (per connection). The header
version of each frame (which says where the body starts) is derived from Kafka's JSON message
specs' ``flexibleVersions`` here, not from kgate's codec, so a corpus it records is an
independent oracle for the codec tests. Frames are stored verbatim, size prefix included, in the
layout of ``../shared/corpus-tansu`` (``frames/<seq>_c<conn>_<req|resp>_<key>_<Api>_v<ver>.bin``
plus ``index.jsonl``).

For every client connection to go through the relay, the broker must advertise the relay's port
(``Kafka(advertised_port=...)``); otherwise clients follow Metadata to the broker and only the
bootstrap connections are recorded.
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
_SIZE = struct.Struct(">i")
_REQ = struct.Struct(">hhi")


def _spec_table(spec_dir: Path) -> dict[tuple[int, str], tuple[str, int | None]]:
    """(api key, "request"|"response") -> (api name, first flexible version or None)."""
    out: dict[tuple[int, str], tuple[str, int | None]] = {}
    for path in spec_dir.glob("*.json"):
        text = "\n".join(ln for ln in path.read_text().splitlines() if not ln.strip().startswith("//"))
        spec = json.loads(text)
        kind = spec.get("type")
        if kind not in ("request", "response"):
            continue
        flex = spec.get("flexibleVersions", "none")
        m = re.fullmatch(r"(\d+)\+", flex)
        name = spec["name"][: -len("Request")] if kind == "request" else spec["name"][: -len("Response")]
        out[(int(spec["apiKey"]), kind)] = (name, int(m.group(1)) if m else None)
    return out


@dataclass
class _Conn:
    number: int
    client_id: str | None = None
    asked: dict[int, tuple[int, int]] = field(default_factory=dict)  # correlation id -> (key, version)


class RecordingRelay:
    """``listen_port`` -> ``upstream_port``, recording into ``out_dir`` (run in a thread).

    ``max_frame_bytes``: larger frames are forwarded but not stored (a corpus of big Fetches
    would only add size); ``skipped`` counts them.
    """

    def __init__(
        self, listen_port: int, upstream_port: int, out_dir: Path, spec_dir: Path, max_frame_bytes: int = 256 * 1024
    ) -> None:
        self.listen_port, self.upstream_port = listen_port, upstream_port
        self.out_dir = Path(out_dir)
        self.specs = _spec_table(spec_dir)
        self.max_frame_bytes = max_frame_bytes
        self.rows: list[dict[str, Any]] = []
        self.skipped = 0
        self._seq = 0
        self._conns = 0
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.base_events.Server | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._writers: set[asyncio.StreamWriter] = set()

    # -- frames ------------------------------------------------------------------------------
    def _header_version(self, key: int, version: int, kind: str) -> int:
        _name, flex = self.specs[(key, kind)]
        flexible = flex is not None and version >= flex
        if kind == "request":
            return 2 if flexible else 1
        # ApiVersions responses keep header v0 at every version, so a client can read the error
        return 1 if flexible and key != 18 else 0

    @staticmethod
    def _body_offset(frame: bytes, kind: str, header_version: int) -> int:
        pos = 12 if kind == "request" else 8
        if kind == "request":
            (n,) = struct.unpack_from(">h", frame, pos)
            pos += 2 + max(n, 0)
        if (kind == "request" and header_version >= 2) or (kind == "response" and header_version >= 1):
            count, pos = _uvarint(frame, pos)
            for _ in range(count):
                _tag, pos = _uvarint(frame, pos)
                size, pos = _uvarint(frame, pos)
                pos += size
        return pos

    def _record(self, conn: _Conn, kind: str, frame: bytes) -> None:
        if kind == "request":
            key, version, cid = _REQ.unpack_from(frame, 4)
            conn.asked[cid] = (key, version)
            if conn.client_id is None:
                (n,) = struct.unpack_from(">h", frame, 12)
                conn.client_id = frame[14 : 14 + n].decode() if n >= 0 else ""
        else:
            (cid,) = _SIZE.unpack_from(frame, 4)
            if cid not in conn.asked:
                return  # an answer to nothing we saw: not recordable
            key, version = conn.asked.pop(cid)
        if (key, kind) not in self.specs:
            return
        if len(frame) > self.max_frame_bytes:
            self.skipped += 1
            return
        hv = self._header_version(key, version, kind)
        name = self.specs[(key, kind)][0]
        with self._lock:
            self._seq += 1
            seq = self._seq
        direction = "req" if kind == "request" else "resp"
        rel = f"frames/{seq:06d}_c{conn.number:03d}_{direction}_{key:02d}_{name}_v{version}.bin"
        (self.out_dir / rel).write_bytes(frame)
        self.rows.append(
            {
                "seq": seq,
                "conn": conn.number,
                "client_id": conn.client_id,
                "direction": direction,
                "api_key": key,
                "api_name": name,
                "api_version": version,
                "correlation_id": _REQ.unpack_from(frame, 4)[2]
                if kind == "request"
                else _SIZE.unpack_from(frame, 4)[0],
                "frame_len": len(frame),
                "body_offset": self._body_offset(frame, kind, hv),
                "file": rel,
                "header_version": hv,
            }
        )

    # -- I/O -----------------------------------------------------------------------------------
    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Conn, kind: str) -> None:
        try:
            while True:
                head = await reader.readexactly(4)
                (size,) = _SIZE.unpack(head)
                frame = head + await reader.readexactly(size)
                self._record(conn, kind, frame)
                writer.write(frame)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def _serve(self, c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        self._conns += 1
        conn = _Conn(self._conns)
        try:
            u_reader, u_writer = await asyncio.open_connection(HOST, self.upstream_port)
        except OSError:
            c_writer.close()
            return
        self._writers.update((c_writer, u_writer))
        try:
            await asyncio.gather(
                self._pump(c_reader, u_writer, conn, "request"), self._pump(u_reader, c_writer, conn, "response")
            )
        finally:
            self._writers.difference_update((c_writer, u_writer))

    def start(self) -> RecordingRelay:
        (self.out_dir / "frames").mkdir(parents=True, exist_ok=True)

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(asyncio.start_server(self._serve, HOST, self.listen_port))
            self._ready.set()
            loop.run_forever()
            loop.close()

        self._thread = threading.Thread(target=run, name="recording-relay", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("recording relay did not start")
        return self

    def stop(self) -> None:
        """Stop listening, write ``index.jsonl`` (sorted by sequence number)."""
        loop, server = self._loop, self._server
        if loop is not None and server is not None:

            async def shut() -> None:
                server.close()
                for w in list(self._writers):  # the pumps then end as on any closed connection
                    w.close()
                tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                await asyncio.wait(tasks, timeout=5) if tasks else None
                loop.stop()

            asyncio.run_coroutine_threadsafe(shut(), loop)
        if self._thread is not None:
            self._thread.join(10)
        with open(self.out_dir / "index.jsonl", "w", encoding="utf-8") as fh:
            for row in sorted(self.rows, key=lambda r: r["seq"]):
                fh.write(json.dumps(row) + "\n")


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
