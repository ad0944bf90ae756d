#!/usr/bin/env python3
"""A bulk TCP transfer for tests/net/check_wan_switch.sh (iperf-like).

  wan_xfer.py recv BIND_IP PORT NBYTES READY_FILE   listens (READY_FILE
      written once it does, a line "accepted" added once the sender is
      connected), takes one connection, reads until EOF, checks
      the byte count and every byte against the sender's stream and prints
      {"bytes": N, "seconds": T, "mbit": R} (T from accept to EOF); exit 1
      on a short, long or corrupted stream
  wan_xfer.py send HOST PORT NBYTES                  connects, sends NBYTES

The stream is 64 KiB chunks of a seeded random block, each chunk shifted
by an offset of its own, so a lost, duplicated, reordered or flipped byte
anywhere is caught.
"""
import json
import random
import socket
import sys
import time

CHUNK = 65536
BASE = random.Random(20261205).randbytes(CHUNK + 4096)
TIMEOUT = 120


def chunk(k):
    off = (k * 2654435761) % 4096
    return BASE[off:off + CHUNK]


def recv(bind_ip, port, nbytes, ready):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((bind_ip, port))
    srv.listen(1)
    srv.settimeout(TIMEOUT)
    with open(ready, "w") as f:
        f.write("ready\n")
    conn, _ = srv.accept()
    t0 = time.monotonic()
    with open(ready, "a") as f:
        f.write("accepted\n")
    conn.settimeout(TIMEOUT)
    got = 0
    pending = b""
    k = 0
    bad = None
    while True:
        data = conn.recv(1 << 20)
        if not data:
            break
        got += len(data)
        pending += data
        i = 0
        while len(pending) - i >= CHUNK:
            if bad is None and pending[i:i + CHUNK] != chunk(k):
                bad = k * CHUNK
            i += CHUNK
            k += 1
        pending = pending[i:]
    t = time.monotonic() - t0
    if bad is None and pending and pending != chunk(k)[:len(pending)]:
        bad = k * CHUNK
    print(json.dumps({"bytes": got, "seconds": round(t, 3), "mbit": round(got * 8 / t / 1e6, 3)}))
    if got != nbytes:
        print(f"wan_xfer: received {got} bytes, expected {nbytes}", file=sys.stderr)
        return 1
    if bad is not None:
        print(f"wan_xfer: corrupted stream in the 64 KiB chunk at byte {bad}", file=sys.stderr)
        return 1
    return 0


def send(host, port, nbytes):
    s = socket.create_connection((host, port), timeout=TIMEOUT)
    k = 0
    left = nbytes
    while left > 0:
        c = chunk(k)[:left]
        s.sendall(c)
        left -= len(c)
        k += 1
    s.shutdown(socket.SHUT_WR)
    # wait for the receiver's close, so that all bytes are acknowledged
    s.recv(1)
    s.close()
    return 0


if __name__ == "__main__":
    a = sys.argv
    if len(a) == 6 and a[1] == "recv":
        sys.exit(recv(a[2], int(a[3]), int(a[4]), a[5]))
    if len(a) == 5 and a[1] == "send":
        sys.exit(send(a[2], int(a[3]), int(a[4])))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
