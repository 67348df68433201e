"""An unrelated HTTP server: answers 200 with ``{}`` to every GET and POST on 127.0.0.1:PORT,
and prints "listening" once bound. What a health check finds on a port someone else holds."""

from __future__ import annotations

import http.server
import sys


class AnswerEverything(http.server.BaseHTTPRequestHandler):
    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), AnswerEverything)
    print("listening", flush=True)
    server.serve_forever()
