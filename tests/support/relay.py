#!/usr/bin/env python3
"""Test relay in front of one Tansu broker (run as a subprocess by procs.Relay).

Each listen port is a byte relay to the upstream broker. Two optional roles:

* ``--node-ids 1,2,3``: fake multi-node cluster. Listen port i poses as broker node_ids[i].
  Metadata responses list those nodes at the relay ports, partition leaders are spread over
  them (partition p is led by node_ids[p % n]); FindCoordinator answers the last node,
  DescribeCluster lists the nodes. Everything else passes byte for byte (Tansu leads every
  partition, so any relay can take any request).
* ``--forbid-pid PID``: on every accept, look up which process owns the peer socket (/proc);
  connections owned by PID (the test process, i.e. the Kafka clients) are recorded as
  ``forbidden`` and closed at once. Every accept is recorded with its owner pid.

Events are appended as JSON lines to ``--events``. Prints READY when listening.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import struct
import sys
import time

# run as a script (``python tests/support/relay.py``): tests/ on the path, as in the test process
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from support import netconn, wire

HOST = "127.0.0.1"
#: how long a half-closed connection waits for the broker to finish and close its side
BROKER_FINISH_S = 30


class Relay:
    def __init__(self, args):
        self.upstream_host, port = args.upstream.rsplit(":", 1)
        self.upstream_port = int(port)
        self.ports = [int(p) for p in args.listen.split(",")]
        self.node_ids = [int(n) for n in args.node_ids.split(",")] if args.node_ids else None
        self.forbid_pid = args.forbid_pid
        self.drop_acks0 = args.drop_acks0_responses
        self.framed = self.node_ids is not None or self.drop_acks0
        self.events = open(args.events, "a")
        self.stats = {"rewritten": 0}

    def event(self, **kw):
        kw["t"] = time.time()
        self.events.write(json.dumps(kw) + "\n")
        self.events.flush()

    # ---------------------------------------------------------------- rewriting
    def nodes(self):
        assert self.node_ids is not None  # only rewriting relays (--node-ids) call this
        return list(zip(self.node_ids, self.ports, strict=True))

    def rewrite(self, api_key: int, version: int, body: bytes) -> bytes:
        nodes = self.nodes()
        if api_key == wire.METADATA:
            m = wire.decode_metadata_response(body, version)
            tmpl = m["brokers"][0] if m["brokers"] else {"rack": None, "_tags": []}
            m["brokers"] = [dict(tmpl, node_id=n, host=HOST, port=p) for n, p in nodes]
            if version >= 1:
                m["controller_id"] = nodes[0][0]
            for t in m["topics"] or []:
                for p in t["partitions"] or []:
                    leader = nodes[p["partition_index"] % len(nodes)][0]
                    p["leader_id"] = leader
                    p["replica_nodes"] = [leader]
                    p["isr_nodes"] = [leader]
                    if "offline_replicas" in p:
                        p["offline_replicas"] = []
            out = wire.encode_metadata_response(m, version)
        elif api_key == wire.FIND_COORDINATOR:
            m = wire.decode_find_coordinator_response(body, version)
            n, p = nodes[-1]
            if version <= 3:
                if m["error_code"] == 0:
                    m.update(node_id=n, host=HOST, port=p)
            else:
                for c in m["coordinators"]:
                    if c["error_code"] == 0:
                        c.update(node_id=n, host=HOST, port=p)
            out = wire.encode_find_coordinator_response(m, version)
        elif api_key == wire.DESCRIBE_CLUSTER:
            m = wire.decode_describe_cluster_response(body, version)
            tmpl = m["brokers"][0] if m["brokers"] else {"rack": None, "is_fenced": False, "_tags": []}
            m["brokers"] = [dict(tmpl, broker_id=n, host=HOST, port=p) for n, p in nodes]
            m["controller_id"] = nodes[0][0]
            out = wire.encode_describe_cluster_response(m, version)
        else:
            return body
        self.stats["rewritten"] += 1
        return out

    # ---------------------------------------------------------------- relaying
    async def handle(self, reader, writer, listen_port):
        peer = writer.get_extra_info("peername")
        owner = None
        if self.forbid_pid:
            loop = asyncio.get_running_loop()
            owner = await loop.run_in_executor(None, netconn.owner_pid_of, (peer[0], peer[1]), (HOST, listen_port))
        first = b""
        if self.forbid_pid and owner is None:
            # The peer's socket was gone before the lookup: a connect-and-close probe (kgate checks
            # its upstream). Those carry no bytes; anything that does send is looked up again.
            try:
                first = await asyncio.wait_for(reader.read(1), 5)
            except (TimeoutError, OSError):
                first = b""
            if not first:
                self.event(event="probe", port=listen_port, peer=list(peer))
                writer.close()
                return
            owner = await loop.run_in_executor(None, netconn.owner_pid_of, (peer[0], peer[1]), (HOST, listen_port))
        self.event(event="accept", port=listen_port, peer=list(peer), pid=owner)
        if self.forbid_pid and owner == self.forbid_pid:
            self.event(event="forbidden", port=listen_port, peer=list(peer), pid=owner)
            writer.close()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.upstream_host, self.upstream_port)
        except OSError as e:
            self.event(event="upstream_error", error=str(e))
            writer.close()
            return
        pending: dict[int, tuple[int, int]] = {}
        stats = {"from_client": 0, "frames": 0}
        tasks = [
            asyncio.create_task(self.client_to_broker(reader, up_writer, pending, first, stats)),
            asyncio.create_task(self.broker_to_client(up_reader, writer, pending)),
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            if tasks[0] in done:
                exc = tasks[0].exception()
                self.event(
                    event="client_eof",
                    port=listen_port,
                    peer=list(peer),
                    bytes=stats["from_client"],
                    frames=stats["frames"],
                    error=repr(exc) if exc else None,
                )
            if tasks[0] in done and tasks[1] not in done:
                # The client finished sending: pass the half-close on and let the broker finish
                # what it received (a broker processes every request that arrived before a FIN;
                # Tansu stops at the first response it cannot write, so do not slam the door).
                # The wait is bounded generously: Tansu closes as soon as it has answered what it
                # received, but on two cores busy with other suites a 3 s bound cut it short once
                # and Tansu dropped the last acks=0 frame of the connection (199 of 200 arrived).
                try:
                    up_writer.write_eof()
                except OSError:
                    pass
                await asyncio.wait([tasks[1]], timeout=BROKER_FINISH_S)
        except asyncio.CancelledError:
            # The relay is stopping (SIGTERM: asyncio.run cancels the handlers). Return rather than
            # re-raise: asyncio's stream callback asks a cancelled handler for its exception and
            # logs a Traceback per open connection, which reads like a failure in the test's logs.
            pass
        finally:
            for t in tasks:
                t.cancel()
            for w in (writer, up_writer):
                w.close()

    async def client_to_broker(self, reader, up_writer, pending, prefix=b"", stats=None):
        stats = {"from_client": 0, "frames": 0} if stats is None else stats
        rewriting = self.framed
        if prefix and not rewriting:
            up_writer.write(prefix)
        stats["from_client"] += len(prefix)
        while True:
            if not rewriting:
                data = await reader.read(1 << 16)
                if not data:
                    return
                stats["from_client"] += len(data)
                up_writer.write(data)
                await up_writer.drain()
                continue
            head = b""
            try:
                head = prefix + await reader.readexactly(4 - len(prefix))
                prefix = b""
                (size,) = struct.unpack(">i", head)
                payload = await reader.readexactly(size)
            except asyncio.IncompleteReadError as e:  # client EOF, maybe mid-frame: pass on what came
                up_writer.write(prefix + head + e.partial)
                stats["from_client"] += len(e.partial)
                return
            stats["from_client"] += len(head) + len(payload)
            stats["frames"] += 1
            if size >= 8:
                api_key, version, corr = struct.unpack(">hhi", payload[:8])
                if self.node_ids and api_key in (wire.METADATA, wire.FIND_COORDINATOR, wire.DESCRIBE_CLUSTER):
                    pending[corr] = (api_key, version)
                elif api_key == wire.PRODUCE and self.drop_acks0 and wire.produce_acks(payload, version) == 0:
                    pending[corr] = (api_key, version)
            up_writer.write(head + payload)
            await up_writer.drain()

    async def broker_to_client(self, up_reader, writer, pending):
        rewriting = self.framed
        while True:
            if not rewriting:
                data = await up_reader.read(1 << 16)
                if not data:
                    return
                writer.write(data)
                await writer.drain()
                continue
            head = await up_reader.readexactly(4)
            (size,) = struct.unpack(">i", head)
            payload = await up_reader.readexactly(size)
            (corr,) = struct.unpack(">i", payload[:4])
            req = pending.pop(corr, None)
            if req is not None and req[0] == wire.PRODUCE:
                # Tansu answers acks=0 Produce; a compliant broker does not: swallow it.
                self.event(event="dropped_acks0_response", correlation_id=corr)
                continue
            if req is not None:
                api_key, version = req
                flex_from = wire.FLEXIBLE_FROM[api_key]
                r = wire.Reader(payload, 4)
                r.tags(version >= flex_from)
                hdr_end = r.pos
                try:
                    body = self.rewrite(api_key, version, payload[hdr_end:])
                except Exception as e:  # report, pass the original through
                    self.event(event="rewrite_error", api_key=api_key, version=version, error=repr(e))
                    body = payload[hdr_end:]
                payload = payload[:hdr_end] + body
                head = struct.pack(">i", len(payload))
            writer.write(head + payload)
            await writer.drain()

    async def main(self):
        servers = []
        for port in self.ports:
            servers.append(
                await asyncio.start_server(functools.partial(self.handle, listen_port=port), HOST, port, backlog=512)
            )
        print("READY", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        import signal

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        for s in servers:
            s.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--listen", required=True, help="comma-separated ports on 127.0.0.1")
    ap.add_argument("--node-ids", default="")
    ap.add_argument("--forbid-pid", type=int, default=0)
    ap.add_argument("--events", required=True)
    ap.add_argument(
        "--drop-acks0-responses",
        action="store_true",
        help="pose as a compliant broker: never answer Produce with acks=0",
    )
    args = ap.parse_args()
    asyncio.run(Relay(args).main())


if __name__ == "__main__":
    main()
