#!/usr/bin/env python3
"""Idle sockets against a running `serve`: opens 1,100 connections from 127.0.0.1 that send
nothing, counts how many the service holds open, then times a request from 127.0.0.2 (recorded:
connections.idle_held, connections.other_answer).

    bench/idle_sockets.py    (DATABUILD_BIN=PATH: that binary, unbuilt; PEER_BIN=PATH: another
                              binary measured after it, "compared with")
"""

import errno
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from record import record  # noqa: E402

IDLE = 1100


def connect(source, port):
    s = socket.socket()
    s.bind((source, 0))
    s.connect(("127.0.0.1", port))
    return s


def is_open(s):
    """Still open: a read would block (no end of file, no reset)."""
    s.setblocking(False)
    try:
        return s.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def measure(binary):
    """(connections still open after 1 s, the other address's answer, its seconds)."""
    with tempfile.TemporaryDirectory() as work:
        graph = Path(work) / "databuild.toml"
        graph.write_text('[graph]\nname = "idle"\n[[job]]\nname = "a"\noutputs = ["a/{d:date}"]\ncommand = ["true"]\n')
        port = 18284
        server = subprocess.Popen(
            [binary, "--graph", str(graph), "--event-log", f"sqlite:{work}/events.db", "serve", "--bind", f"127.0.0.1:{port}"],
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(100):
                try:
                    connect("127.0.0.1", port).close()
                    break
                except OSError:
                    time.sleep(0.1)
            held = [connect("127.0.0.1", port) for _ in range(IDLE)]
            time.sleep(1)
            still = sum(is_open(s) for s in held)
            started = time.monotonic()
            try:
                other = connect("127.0.0.2", port)
                other.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode())
                other.settimeout(30)
                answer = other.recv(64).decode(errors="replace")
            except OSError as e:
                answer = f"error: {errno.errorcode.get(e.errno, e)}"
            seconds = time.monotonic() - started
            answer = answer.splitlines()[0] if answer else "closed"
            print(f"{binary}: {still} of {IDLE} idle connections from one address held after 1 s; "
                  f"another address: {answer} in {seconds * 1000:.1f} ms")
            for s in held:
                s.close()
            return still, answer, seconds
        finally:
            server.terminate()
            server.wait()


def main():
    binary = os.environ.get("DATABUILD_BIN")
    if not binary:
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "databuild"], cwd=ROOT, check=True)
        binary = str(ROOT / "target" / "release" / "databuild")
    still, answer, seconds = measure(binary)
    peer = os.environ.get("PEER_BIN")
    peer_still, peer_answer = None, None
    if peer:
        time.sleep(1)
        peer_still, peer_answer, _ = measure(peer)
    if not answer.startswith("HTTP/1.1 200"):
        sys.exit(f"the other address got no answer: {answer!r}")
    command = "bench/idle_sockets.py"
    record("connections.idle_held", still, "connections", None,
           f"{IDLE} idle connections from one address to `serve`: how many it holds after 1 s", command=command,
           peer=peer and f"the binary before the cap (PEER_BIN): {peer_still}")
    record("connections.other_answer", round(seconds * 1000, 1), "ms", "<= 100",
           "another address's `GET /healthz` meanwhile", detail=f"{still} held", command=command,
           peer=peer and f"the binary before the cap (PEER_BIN): {peer_answer}")


if __name__ == "__main__":
    main()
