"""A confluent-kafka (librdkafka) consumer polling one topic in a process of its own.

Run as ``python rdk_poller.py BOOTSTRAP TOPIC GROUP``. It prints ``got <hex value>`` per record and
``error <text>`` per error event, and polls until its stdin closes, then prints ``done <n>`` and
exits 0. A test runs it in a subprocess so that a crash inside librdkafka (a segfault) shows as an
exit code that fails the test, instead of taking the pytest process down with it.
"""

from __future__ import annotations

import sys
import threading


def main() -> int:
    from confluent_kafka import Consumer

    bootstrap, topic, group = sys.argv[1:4]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
            # Tansu holds JoinGroup for about half the session timeout: keep it short
            "session.timeout.ms": 3000,
            "heartbeat.interval.ms": 500,
        }
    )
    stop = threading.Event()

    def stop_on_eof() -> None:  # the test closes stdin to stop the poller
        sys.stdin.read()
        stop.set()

    threading.Thread(target=stop_on_eof, daemon=True).start()
    consumer.subscribe([topic])
    n = 0
    while not stop.is_set():
        msg = consumer.poll(0.1)
        if msg is None:
            continue
        if msg.error():
            print("error", msg.error(), flush=True)
        else:
            n += 1
            print("got", (msg.value() or b"").hex(), flush=True)
    consumer.close()
    print("done", n, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
