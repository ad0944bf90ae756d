#!/usr/bin/env python3
"""A parent for the relay transport's test (test_relay.c): serves ROOT at
GET /v1/rlpost/weights/<path> with HTTP Range (206, Content-Range, 416), as
`rlpost serve --weights-dir` does, plus faults the test switches on:

  POST /ctl {"cut": {"name": "v2/big.bin", "after": K, "then_503": n}}
      the next transfer of that file sends K body bytes and closes the
      connection (the Content-Length promised more); then n answers 503
  POST /ctl {"corrupt": {"name": ..., "offset": X, "times": n}}
      the next n transfers of that file carry byte X flipped
  POST /ctl {"reset": true}   clears faults and counters
  GET /ctl/stats  {"bytes": {path: body bytes sent}, "ranges": [[path, first]],
                   "requests": {path: n}}

Usage: relay_server.py ROOT PORT_FILE (writes the port once listening).
"""
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.realpath(sys.argv[1])
PREFIX = "/v1/rlpost/weights/"
lock = threading.Lock()
state = {}


def reset():
    state.clear()
    state.update(cut={}, corrupt={}, e503=0, bytes={}, ranges=[], requests={})


reset()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def send_json(self, code, obj):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(n) or b"{}")
        with lock:
            if req.get("reset"):
                reset()
            if "cut" in req:
                c = req["cut"]
                state["cut"][c["name"]] = (int(c["after"]), int(c.get("then_503", 0)))
            if "corrupt" in req:
                c = req["corrupt"]
                state["corrupt"][c["name"]] = [int(c["offset"]), int(c.get("times", 1))]
        self.send_json(200, {"ok": True})

    def do_GET(self):
        if self.path == "/ctl/stats":
            with lock:
                return self.send_json(200, {k: state[k] for k in ("bytes", "ranges", "requests")})
        if not self.path.startswith(PREFIX):
            return self.send_json(404, {"error": "no such endpoint"})
        rel = self.path[len(PREFIX):]
        path = os.path.realpath(os.path.join(ROOT, rel))
        if not path.startswith(ROOT + "/") or not os.path.isfile(path):
            return self.send_json(404, {"error": "not found"})
        with lock:
            state["requests"][rel] = state["requests"].get(rel, 0) + 1
            if state["e503"] > 0:
                state["e503"] -= 1
                return self.send_json(503, {"error": "busy"})
            cut = state["cut"].pop(rel, None)
            if cut:
                state["e503"] = cut[1]
            corrupt = state["corrupt"].get(rel)
            if corrupt:
                corrupt[1] -= 1
                if corrupt[1] <= 0:
                    del state["corrupt"][rel]
        data = open(path, "rb").read()
        if corrupt and corrupt[0] < len(data):
            data = bytearray(data)
            data[corrupt[0]] ^= 0x5A
            data = bytes(data)
        size = len(data)
        first, last, code = 0, size - 1, 200
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        if m:
            first = int(m.group(1))
            if first >= size:
                self.send_response(416)
                self.send_header("Content-Range", "bytes */%d" % size)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if m.group(2):
                last = min(int(m.group(2)), size - 1)
            code = 206
            with lock:
                state["ranges"].append([rel, first])
        body = data[first:last + 1]
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if code == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, size))
        self.end_headers()
        if cut:
            body = body[:cut[0]]
        self.wfile.write(body)
        self.wfile.flush()
        with lock:
            state["bytes"][rel] = state["bytes"].get(rel, 0) + len(body)
        if cut:
            self.close_connection = True
            self.connection.shutdown(1)  # FIN after the K bytes: the client sees a short body


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
with open(sys.argv[2] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
server.serve_forever()
