#!/usr/bin/env python3
"""A hostile stand-in for rlpost-reward-worker (tests/unit/test_reward_isolated.c):
it speaks the start of the protocol of lib/reward/isolation_proto.h on fd 3
(reads INIT, answers READY) and then answers every SCORE with a RESULT
that is wrong in the way $RLPOST_FAKE_WORKER_MODE says: "count" (one result
too many), "huge" (a frame length of 1 TiB), "kind" (an unknown failure
kind), "reason" (a 500-byte reason), "tokens" (token scores for a sample
that has none). The handle must reject each one, kill this process and
mark the samples invalid; never read past what it was sent."""
import os
import socket
import struct
import sys

MAGIC, READY, SCORE, RESULT = 0x574C5052, 2, 3, 4
sock = socket.socket(fileno=3)


def recv_exact(n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            sys.exit(0)
        buf += chunk
    return buf


def read_frame():
    magic, typ, length = struct.unpack("=IIQ", recv_exact(16))
    return typ, recv_exact(length)


def send_frame(typ, payload, length=None):
    sock.sendall(struct.pack("=IIQ", MAGIC, typ, len(payload) if length is None else length) + payload)


def result(valid, kind, reason, tokens):
    return (struct.pack("=IId", valid, kind, 1.0) + struct.pack("=Q", len(reason)) + reason
            + struct.pack("=Q", len(tokens)) + b"".join(struct.pack("=f", t) for t in tokens))


read_frame()  # INIT
send_frame(READY, struct.pack("=IQ", 0, 0))
mode = os.environ.get("RLPOST_FAKE_WORKER_MODE", "count")
while True:
    typ, payload = read_frame()
    n = struct.unpack_from("=I", payload)[0]
    if mode == "count":
        send_frame(RESULT, struct.pack("=I", n + 1) + result(1, 0, b"", []) * (n + 1))
    elif mode == "huge":
        send_frame(RESULT, struct.pack("=I", n), length=1 << 40)
    elif mode == "kind":
        send_frame(RESULT, struct.pack("=I", n) + result(0, 99, b"x", []) * n)
    elif mode == "reason":
        send_frame(RESULT, struct.pack("=I", n) + result(1, 0, b"r" * 500, []) * n)
    else:  # tokens
        send_frame(RESULT, struct.pack("=I", n) + result(1, 0, b"", [1.0, 2.0]) * n)
