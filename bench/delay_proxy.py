#!/usr/bin/env python3
"""A TCP proxy that adds a round trip time: a network between this machine and a server on it,
where the kernel has no `netem` to add one.

    bench/delay_proxy.py LISTEN_PORT TARGET_HOST:TARGET_PORT ROUND_TRIP_MS

The server's answers are held ROUND_TRIP_MS (in order) before they go on; what the client sends
goes at once. For a client that waits for each answer that is the same as half the time each
way, and it does not lose to the event loop's 1 ms timer steps twice. Bandwidth is not limited.
"""
import asyncio
import sys
import time


async def pipe(reader, writer, delay):
    queue = asyncio.Queue()

    async def forward():
        while True:
            due, data = await queue.get()
            if data is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(forward())
    try:
        while data := await reader.read(65536):
            queue.put_nowait((time.monotonic() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait((0, None))
    await sender


async def main():
    port, target, round_trip_ms = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    host, target_port = target.rsplit(":", 1)
    delay = round_trip_ms / 1000

    async def serve(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(host, int(target_port))
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pipe(client_reader, server_writer, 0),
            pipe(server_reader, client_writer, delay),
            return_exceptions=True,
        )

    server = await asyncio.start_server(serve, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
