"""Soak: an idempotent producer through kgate while the Kafka broker behind it restarts, N times.

Issue 27 reported that in 1 of 5 broker restarts an idempotent producer never resumed through
kgate. This is the reproduction: one librdkafka idempotent producer at about 1,000 messages/s
(acks=all) through a kgate subprocess in front of a test Kafka, the broker stopped (SIGTERM, or
kill -9 with ``--kill``) and started on the same data, and after each restart a check that more
than 500 new messages are acked within 60 s. A restart that misses it is a STALL: kgate's log
tail goes to the work dir, the stuck producer is replaced by a fresh one (``--stop-at-stall``
stops instead) and the soak goes on, so one run counts stalls per restarts. Messages that time out
while the broker is down (``_MSG_TIMED_OUT``) are expected: a restart of Kafka takes 15-45 s on a
loaded 2-core machine, longer than the 20 s message timeout.

    .venv/bin/python tools/restart_soak.py --restarts 20 [--kill] [--down-s 2] [--kafka 4.0.2]

kgate runs from this checkout (``python -m kgate`` imports from its working directory, not from
``PYTHONPATH``); to measure another commit, export it and set ``KGATE_E2E_SRC`` to that tree.

The last line sums the run up: restarts, stalls, messages acked and timed out, and how many
Metadata answers without brokers (a fenced broker's, at the end of its controlled shutdown) kgate
completed with its own nodes: the stall's cause (proxy/sansio/rewrite.py, ``fill_brokers``; the
test is tests/e2e/test_broker_restart_stall.py). Needs ../shared (the Kafka distributions) and
Java 17, like the suite's Kafka tests.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from confluent_kafka import Producer  # noqa: E402
from support import kafka_broker, procs  # noqa: E402

#: kgate's log line (at most one per 10 s) when it completes Metadata answers that name no broker
FENCED_LINE = re.compile(r"a Metadata answer named no broker.*\((\d+) such answer")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--restarts", type=int, default=20)
    ap.add_argument("--kill", action="store_true", help="kill -9 the broker instead of a clean stop")
    ap.add_argument(
        "--down-s", type=float, default=2.0, help="seconds the broker stays down (over 20: messages time out)"
    )
    ap.add_argument("--direct", action="store_true", help="the producer straight at the broker (the control)")
    ap.add_argument("--debug", help="librdkafka debug contexts (e.g. broker,metadata), logged to stderr")
    ap.add_argument("--kafka", choices=["4.3.1", "4.0.2"], default="4.3.1")
    ap.add_argument("--stop-at-stall", action="store_true", help="stop at the first stall (keeps the producer)")
    args = ap.parse_args()
    dist = kafka_broker.KAFKA_43 if args.kafka == "4.3.1" else kafka_broker.KAFKA_40
    why = kafka_broker.unavailable(dist)
    if why:
        print(why, file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="kgate-restart-soak-"))
    broker = kafka_broker.Kafka(work / "kafka", dist=dist)
    broker.start()
    gate = procs.Kgate(work / "kgate", [broker.bootstrap], admin=True)
    gate.start()
    acked = [0]
    errors: dict[str, int] = {}

    def delivered(err, _msg) -> None:
        if err:
            errors[err.name()] = errors.get(err.name(), 0) + 1
        else:
            acked[0] += 1

    def new_producer() -> Producer:
        return Producer(
            {
                "bootstrap.servers": broker.bootstrap if args.direct else gate.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "message.timeout.ms": 20000,
                "linger.ms": 5,
                **({"debug": args.debug} if args.debug else {}),
            }
        )

    current = [new_producer()]
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            producer = current[0]
            try:
                producer.produce("restart-soak", b"x" * 100, callback=delivered)
            except BufferError:  # the local queue is full while the broker is down
                pass
            producer.poll(0)
            time.sleep(0.001)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    stalls = 0
    done = 0
    try:
        time.sleep(3)
        for attempt in range(args.restarts):
            (broker.kill if args.kill else broker.stop)()
            time.sleep(args.down_s)
            broker.start()
            started, base = time.monotonic(), acked[0]
            while acked[0] <= base + 500 and time.monotonic() - started < 60:
                time.sleep(0.2)
            resumed = acked[0] > base + 500
            done += 1
            print(
                f"restart {attempt + 1}: {'resumed' if resumed else 'STALLED'} after "
                f"{time.monotonic() - started:.1f}s; acked {acked[0]}, errors {errors}",
                flush=True,
            )
            if not resumed:
                stalls += 1
                tail = work / f"stall-{attempt + 1}-kgate.log"
                tail.write_text(gate.log_text()[-20000:])
                print(f"  kgate's log tail: {tail}", flush=True)
                if args.stop_at_stall:
                    break
                stuck, current[0] = current[0], new_producer()
                stuck.purge()
            time.sleep(3)
    finally:
        stop.set()
        thread.join(10)
        gate.stop()
        broker.stop()
    fenced = sum(int(n) for n in FENCED_LINE.findall(gate.log_text(tail=1 << 40)))
    print(
        f"summary: {'direct' if args.direct else 'through kgate'}, Kafka {args.kafka}: {done} restarts, "
        f"{stalls} stalled; acked {acked[0]}, timed out {errors.get('_MSG_TIMED_OUT', 0)}, "
        f"errors {errors}; Metadata answers without brokers completed by kgate: {fenced}"
    )
    print(f"work dir: {work}")
    return 1 if stalls else 0


if __name__ == "__main__":
    sys.exit(main())
