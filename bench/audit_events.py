"""Writer-thread cost of one audit event per api key, in process (no sockets, no broker).

Replays recorded exchanges (request and answer frames captured by a relay in front of Tansu with
confluent-kafka clients: ``/work/shared/corpus-tansu``, or ``--corpus DIR``) through the audit
writer's event builder (``audit_event.event_line``), the way the writer thread runs it: a fresh
``Captured`` per event, names already known. Prints µs per event (min over ``--reps`` runs of
``--n`` events, thread CPU time, so another tenant's burst counts as little as it can) per case;
``--compare`` also times the decoder path (the walkers switched off), alternating with it; with
``--profile CASE`` a cProfile of that case (where inside the builder the time goes).

Run: ``PYTHONPATH=$PWD .venv/bin/python bench/audit_events.py [--n 5000] [--reps 7] [--profile fetch]``;
``PYTHONPATH=../other-worktree`` times another build's builder with the same script (before/after).

Cases (frame sizes as recorded):
  produce       Produce v10, one topic, one partition, ~0.5 KB request (a 100 B-message batch)
  produce-1m    Produce v10, ~1 MB request held whole (a 10 KB-message batch of a large linger)
  produce-1m-s  the same request as it reaches the audit log live: streamed through in 256 KiB reads
  fetch         Fetch v16, 4.3 KB answer held whole
  fetch-1m      Fetch v16, 1.25 MB answer that streamed through kgate in 64 KiB pieces
  metadata      Metadata v12 naming one topic
  metadata-all  Metadata v12 asking for every topic (the answer is not read)
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from pathlib import Path
from typing import Any
from uuid import UUID

from kgate.api import TopicNameError
from kgate.filters.builtin.audit import event as audit_event
from kgate.filters.builtin.audit.event import Captured, event_line, topic_ids_of
from kgate.proxy.sansio.exchange import Exchange

CORPUS = Path("/work/shared/corpus-tansu/frames")
#: case -> (request file seq, answer file seq, answer piece size or 0 for whole)
CASES: dict[str, tuple[int, int, int]] = {
    "produce": (29, 32, 0),
    "produce-1m": (49, 50, 0),
    "produce-1m-s": (49, 50, -(1 << 18)),
    "fetch": (141, 142, 0),
    "fetch-1m": (143, 144, 1 << 16),
    "metadata": (47, 48, 0),
    "metadata-all": (13, 14, 0),
}


def _frame(corpus: Path, seq: int) -> tuple[bytes, int, int, int]:
    """A recorded frame and its (api key, version, correlation id) from its file name."""
    (path,) = corpus.glob(f"{seq:06d}_*.bin")
    parts = path.stem.split("_")
    data = path.read_bytes()
    cid = int.from_bytes(data[8:12], "big") if "req" in parts else int.from_bytes(data[4:8], "big")
    return data, int(parts[3]), int(parts[5].lstrip("v")), cid


class _Info:
    client_address = "127.0.0.1:40000"
    client_id = "bench"
    principal = None


def captured(corpus: Path, case: str) -> Any:
    """A function making a fresh ``Captured`` of the case's exchange (what the loop would queue)."""
    req_seq, resp_seq, piece = CASES[case]
    req, key, version, cid = _frame(corpus, req_seq)
    resp, _k, _v, _c = _frame(corpus, resp_seq)
    answer: Any = resp
    req_pieces = None
    if piece < 0:  # the request streamed through in pieces
        view = memoryview(req)
        req_pieces = [view[i : i - piece] for i in range(0, len(req), -piece)]
        piece = 0
    if piece:
        view = memoryview(resp)
        answer = [view[i : i + piece] for i in range(0, len(resp), piece)]
    t0 = time.monotonic_ns()

    def make() -> Captured:
        ex = Exchange(cid, key, version)
        ex.t0_ns, ex.req, ex.req_bytes = t0, list(req_pieces) if req_pieces else memoryview(req), len(req)
        return Captured(ex, _Info(), list(answer) if piece else memoryview(answer), len(resp), t0 + 500_000)  # type: ignore[arg-type]

    return make


def run_case(make: Any, n: int) -> float:
    """µs per event: build ``n`` events as the writer does (ids named, then the line)."""
    names: dict[UUID, str | TopicNameError] = {}
    items = [make() for _ in range(n)]
    t = time.thread_time()  # CPU time: other tenants' load does not count
    for c in items:
        for tid in topic_ids_of(c):
            names[tid] = "t"
        event_line(c, instance="bench", cluster="default", wall_offset_ns=0, names=names)
    return (time.thread_time() - t) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--profile", choices=sorted(CASES))
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--compare", action="store_true", help="also time the decoder path (walkers off), alternating")
    a = ap.parse_args()
    walked = getattr(audit_event, "_WALKED", None)  # None: a build before the walkers (d82bc5e)
    if walked is None:
        a.compare = False
    for case in a.cases.split(","):
        make = captured(a.corpus, case)
        best = {"walk": float("inf"), "decode": float("inf")}
        for _ in range(a.reps):
            for path in ("walk", "decode") if a.compare else ("walk",):
                if walked is not None:
                    audit_event._WALKED = walked if path == "walk" else frozenset()
                run_case(make, 50)  # warm: decoders compiled, caches filled
                best[path] = min(best[path], run_case(make, a.n))
        if walked is not None:
            audit_event._WALKED = walked
        extra = f"   decoder path {best['decode']:7.2f} us/event" if a.compare else ""
        print(f"{case:13s} {best['walk']:7.2f} us/event{extra}")
    if a.profile:
        make = captured(a.corpus, a.profile)
        prof = cProfile.Profile()
        prof.enable()
        run_case(make, a.n)
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)


if __name__ == "__main__":
    main()
