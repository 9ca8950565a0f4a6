#!/usr/bin/env python3
"""A TLS-terminating byte relay: TLS on ``--listen``, plaintext to ``--upstream`` (a test stand-in).

The test brokers (Tansu, and the bundled Kafka as the fixtures run it) speak plaintext, so tests of
kgate's ``upstream_tls`` put this in front of one: the broker advertises the relay's port, and
every byte kgate sends over TLS reaches the broker unchanged. ``--client-ca`` makes it require a
client certificate (kgate's ``upstream_tls.cert_file``). Prints READY when listening; logs each
accepted connection's peer certificate subject (or the handshake failure) to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ssl
import sys


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(262144):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", type=int, required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--client-ca")
    args = ap.parse_args()
    host, port = args.upstream.rsplit(":", 1)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    if args.client_ca:
        ctx.load_verify_locations(args.client_ca)
        ctx.verify_mode = ssl.CERT_REQUIRED

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        cert = writer.get_extra_info("peercert")
        print(
            f"accepted {writer.get_extra_info('peername')} client cert {cert.get('subject') if cert else None}",
            flush=True,
        )
        try:
            up_r, up_w = await asyncio.open_connection(host, int(port))
        except OSError as exc:
            print(f"upstream unreachable: {exc}", flush=True)
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_w), pipe(up_r, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", args.listen, ssl=ctx)
    print("READY", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
