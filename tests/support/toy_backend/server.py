"""toyserve: the "third server" of docs/backends.md's walk-through, a real process with real
HTTP (standard library only), so a test can launch it through specmon end to end.

It loads (says so), listens, says it is ready, answers /health, /info and /generate, and
exits on SIGTERM. ``--fail-after-load`` makes it die with an out-of-memory traceback instead,
as a crashed server would."""

from __future__ import annotations

import argparse
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VERSION = "0.1.0"


class _Handler(BaseHTTPRequestHandler):
    model = ""

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._answer(200, {"status": "ok"})
        elif self.path == "/info":
            self._answer(200, {"version": VERSION, "model": self.model})
        else:
            self._answer(404, {"error": "not found"})

    def do_POST(self) -> None:
        length = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
        request = json.loads(self.rfile.read(length) or b"{}")
        tokens = int(request.get("max_tokens", 1))
        self._answer(200, {"text": "x" * tokens, "completion_tokens": tokens})

    def log_message(self, format: str, *args: object) -> None:
        print(f"toyserve: request {format % args}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(prog="toyserve")
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--fail-after-load", action="store_true")
    args = parser.parse_args()
    print(f"toyserve: loading model from {args.model_dir}", flush=True)
    time.sleep(0.2)
    if args.fail_after_load:
        raise MemoryError("toyserve: out of memory while allocating the cache")
    _Handler.model = args.model_dir
    server = ThreadingHTTPServer((args.host, args.port), _Handler)
    print(f"toyserve: listening on http://{args.host}:{args.port}", flush=True)
    print("toyserve: ready", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
