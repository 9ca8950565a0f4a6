"""Mutated request frames through a live kgate, with a healthy client beside them (loopback only).

Each round takes a real client request from ``../shared/corpus-tansu`` (its requests only),
flips, truncates, or inflates a few bytes of it (the size prefix is kept right, so kgate must
judge the body), and sends it on a fresh connection to kgate in front of a fresh Tansu. A healthy
client asks for Metadata every 50 ms throughout. Reported per build (``--src``, A/B) and per
``validate_requests`` setting: how many mutated frames reached the broker (read from kgate's
``kgate_requests_total`` minus refusals is not exact, so the broker side is watched instead: a
broker that died or stopped answering is what matters), whether kgate and the broker are still
up at the end, and the healthy client's failures and p99.

    .venv/bin/python bench/fuzz_live.py --frames 2000 --src /tmp/kgate-old --src .

Bounded: ``--frames`` mutated frames per target, each connection closed after one answer or
0.2 s; every process is stopped by PID.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from support import procs  # noqa: E402
from support.ports import free_port, free_port_range  # noqa: E402
from support.wire import RawClient  # noqa: E402

CORPUS = ROOT.parent / "shared" / "corpus-tansu"


def corpus_requests() -> list[bytes]:
    out = []
    for line in (CORPUS / "index.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["direction"] == "req" and row["api_key"] not in (17, 36):  # no SASL: it changes framing
            data = (CORPUS / row["file"]).read_bytes()
            if int.from_bytes(data[:4], "big") != len(data) - 4:
                data = len(data).to_bytes(4, "big") + data
            out.append(data)
    return out


def mutate(frame: bytes, rng: random.Random) -> bytes:
    body = bytearray(frame[4:])
    kind = rng.random()
    if kind < 0.6:  # flip a few bytes after the request header's api key/version
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(8, len(body)) if len(body) > 8 else 0
            body[i] = rng.randrange(256)
    elif kind < 0.8:  # an inflated length or count: 0x7f.. in place of 4 bytes
        i = rng.randrange(8, max(9, len(body) - 4))
        body[i : i + 4] = b"\x7f\xff\xff\xff"
    else:  # truncated
        del body[rng.randrange(8, len(body)) :]
    return len(body).to_bytes(4, "big") + bytes(body)


def start_kgate(src: str, upstream: str, workdir: Path, validate: bool) -> tuple[procs.ManagedProcess, int, int]:
    import yaml

    listen, base, metrics = free_port(), free_port_range(64), free_port()
    cfg = {
        "log_level": "warning",
        "metrics": {"listen": f"127.0.0.1:{metrics}"},
        "proxy": {"drain_timeout_s": 1, **({"validate_requests": True} if validate else {})},
        "virtual_clusters": [
            {
                "name": "fuzz",
                "listen": f"127.0.0.1:{listen}",
                "upstream": [upstream],
                "node_ports": {"base": base, "count": 64},
            },
        ],
    }
    path = workdir / f"kgate-{listen}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    p = procs.ManagedProcess([procs.PYTHON, "-m", "kgate", "run", "-c", str(path)], workdir / f"kgate-{listen}.log")
    p.cwd = src  # type: ignore[attr-defined]
    p.start()
    procs.wait_port(listen, 20, p.proc, "kgate")
    return p, listen, metrics


def healthy(port: int, stop: threading.Event, out: dict) -> None:
    lat: list[float] = []
    fails = 0
    cid = 0
    while not stop.is_set():
        try:
            with RawClient(port, timeout=2) as c:
                while not stop.is_set():
                    cid += 1
                    t = time.perf_counter()
                    c.metadata(cid, topics=[], version=1)
                    lat.append((time.perf_counter() - t) * 1e6)
                    time.sleep(0.05)
        except OSError:
            fails += 1
            time.sleep(0.05)
    lat.sort()
    out.update(
        healthy_failures=fails,
        healthy_p50_us=round(statistics.median(lat)) if lat else None,
        healthy_p99_us=round(lat[int(len(lat) * 0.99) - 1]) if len(lat) > 1 else None,
    )


def run_target(src: str, validate: bool, frames: list[bytes], n: int, seed: int, work: Path) -> dict:
    tansu = procs.Tansu(work / f"tansu-{time.monotonic_ns()}.log")
    tansu.start()
    kgate, port, _metrics = start_kgate(src, tansu.bootstrap, work, validate)
    out: dict = {}
    stop = threading.Event()
    t = threading.Thread(target=healthy, args=(port, stop, out))
    t.start()
    rng = random.Random(seed)
    answered = closed = 0
    try:
        for _ in range(n):
            data = mutate(rng.choice(frames), rng)
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                    s.sendall(data)
                    got = s.recv(4)
                    if got:
                        answered += 1
                    else:
                        closed += 1
            except OSError:
                closed += 1
    finally:
        stop.set()
        t.join()
        out.update(
            mutated=n,
            answered=answered,
            closed_or_silent=closed,
            kgate_alive=kgate.alive(),
            broker_alive=tansu.alive(),
            broker_answers_after=_broker_answers(tansu.port),
        )
        kgate.stop()
        tansu.kill()
        out["refused_as_malformed"] = kgate.log_text().count("request refused:")
    return out


def _broker_answers(port: int) -> bool:
    try:
        with RawClient(port, timeout=3) as c:
            c.metadata(1, topics=[], version=1)
        return True
    except OSError:
        return False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--frames", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--src", action="append", help="kgate source tree(s) (A/B); default this checkout")
    args = ap.parse_args()
    if not CORPUS.is_dir():
        print(f"fuzz_live: {CORPUS} not found (it lives beside the repository)", file=sys.stderr)
        return 2
    frames = corpus_requests()
    with tempfile.TemporaryDirectory() as tmp:
        for src in args.src or [str(ROOT)]:
            for validate in (False, True):
                try:
                    res = run_target(src, validate, frames, args.frames, args.seed, Path(tmp))
                except Exception as exc:  # an old build without the setting, say
                    res = {"error": str(exc)}
                print(f"{src}\tvalidate={validate}\t{res}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
