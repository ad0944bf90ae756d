#!/usr/bin/env python3
"""A reference environment server for rlp_env_create_http (protocol in
docs/environments.md), standard library only: a calculator tool.

An action with <calculator>EXPR</calculator> gets <result>VALUE</result>
back (EXPR is arithmetic, evaluated with the ast module: numbers, + - * /
// % **, parentheses; nothing else runs); an action with <answer>X</answer>
ends the episode with reward 1 when X equals the prompt's metadata
"answer" (0 otherwise); any other action gets a hint and a tool error.

    python3 examples/env_server.py --port 8000
    --port 0            pick a free port and print it on stdout's first line
    --delay-ms N        answer every request N ms late
    --fail-mode MODE    none | 500 | hang | garbage | huge (a 10 MB observation) | missing
                        (answers {}) | badutf8 (invalid UTF-8 in a string); faults hit
                        /reset and /step, /close always answers
    --api-key KEY       require "Authorization: Bearer KEY" (401 otherwise)
    --pieces            answer with observation_pieces: the tool output wrapped in
                        chat-template turns marked special (ChatML's <|im_start|>)
"""
import argparse
import ast
import json
import operator
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
       ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
       ast.USub: operator.neg, ast.UAdd: operator.pos}


def calc(expr):
    """Arithmetic only: any other node (a name, a call, an attribute) is refused."""
    def ev(n):
        if isinstance(n, ast.Constant) and type(n.value) in (int, float):
            return n.value
        if isinstance(n, ast.BinOp) and type(n.op) in OPS:
            left, right = ev(n.left), ev(n.right)
            if isinstance(n.op, ast.Pow) and abs(right) > 64:
                raise ValueError("exponent too large")
            return OPS[type(n.op)](left, right)
        if isinstance(n, ast.UnaryOp) and type(n.op) in OPS:
            return OPS[type(n.op)](ev(n.operand))
        raise ValueError("not arithmetic: %s" % type(n).__name__)
    if len(expr) > 200:
        raise ValueError("expression too long")
    return ev(ast.parse(expr.strip(), mode="eval").body)


class Episodes:
    def __init__(self, pieces):
        self.pieces = pieces
        self.lock = threading.Lock()
        self.open = {}  # episode_id -> the prompt's metadata

    def reset(self, metadata):
        eid = uuid.uuid4().hex
        with self.lock:
            self.open[eid] = metadata or {}
        return {"episode_id": eid}

    def step(self, eid, action):
        with self.lock:
            meta = self.open.get(eid)
        if meta is None:
            raise KeyError("unknown episode_id %r" % eid)
        m = re.search(r"<answer>(.*?)</answer>", action, re.S)
        if m:
            right = str(meta.get("answer", "")).strip() == m.group(1).strip()
            return {"done": True, "tool_call": False, "reward": 1.0 if right else 0.0}
        m = re.search(r"<calculator>(.*?)</calculator>", action, re.S)
        if not m:
            return {"observation": "\nUse <calculator>expr</calculator> or <answer>x</answer>.\n",
                    "tool_call": False, "tool_error": "no tool call"}
        try:
            value, err = calc(m.group(1)), None
        except (ValueError, SyntaxError, ZeroDivisionError, OverflowError) as e:
            value, err = "error", "%s: %s" % (type(e).__name__, e)
        text = "<result>%s</result>" % value
        if self.pieces:  # a user turn of ChatML around the tool output, its markers special
            out = {"observation_pieces": [{"text": "<|im_end|>\n<|im_start|>user\n", "special": True},
                                          {"text": text, "special": False},
                                          {"text": "<|im_end|>\n<|im_start|>assistant\n", "special": True}]}
        else:
            out = {"observation": "\n%s\n" % text}
        out["tool_call"] = True
        if err:
            out["tool_error"] = err
        return out

    def close(self, eid):
        with self.lock:
            self.open.pop(eid, None)
        return {}


def make_handler(episodes, args):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):  # quiet: tests read stdout
            pass

        def send(self, code, body, ctype="application/json"):
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if args.api_key and self.headers.get("Authorization") != "Bearer " + args.api_key:
                return self.send(401, b"missing or wrong API key", "text/plain")
            time.sleep(args.delay_ms / 1000.0)
            path = self.path.rstrip("/")
            if path != "/close" and args.fail_mode != "none":
                if args.fail_mode == "500":
                    return self.send(500, b"simulated failure", "text/plain")
                if args.fail_mode == "hang":
                    time.sleep(3600)
                if args.fail_mode == "garbage":
                    return self.send(200, b"{this is not json")
                if args.fail_mode == "badutf8":
                    return self.send(200, b'{"episode_id": "\xff\xfe", "observation": "\xc3"}')
                if args.fail_mode == "missing":
                    return self.send(200, b"{}")
                if args.fail_mode == "huge" and path == "/step":
                    return self.send(200, json.dumps({"observation": "x" * (10 << 20)}).encode())
            try:
                if path == "/reset":
                    out = episodes.reset(req.get("metadata"))
                elif path == "/step":
                    out = episodes.step(req["episode_id"], req["action"])
                elif path == "/close":
                    out = episodes.close(req.get("episode_id"))
                else:
                    return self.send(404, b"no such endpoint", "text/plain")
            except (KeyError, TypeError) as e:
                return self.send(400, ("bad request: %s" % e).encode(), "text/plain")
            self.send(200, json.dumps(out).encode())
    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True  # a hanging handler does not keep the process alive

    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up is not news
            super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--delay-ms", type=int, default=0)
    ap.add_argument("--fail-mode", choices=["none", "500", "hang", "garbage", "huge", "missing",
                                                 "badutf8"],
                    default="none")
    ap.add_argument("--pieces", action="store_true")
    ap.add_argument("--api-key")
    args = ap.parse_args()
    server = Server((args.host, args.port), make_handler(Episodes(args.pieces), args))
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
