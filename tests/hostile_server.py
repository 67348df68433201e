"""A hostile "server" for the reliability suite, run as a launch profile's command.

It ignores its arguments (a profile renders SGLang flags) and does what SPECMON_HOSTILE_MODE says,
step by step (comma-separated):

  escapes      lines carrying terminal escapes: OSC title, ESC[2J, OSC 52 clipboard, OSC 8
               link, DCS, 8-bit CSI, C0/C1 controls, and Rich markup that must stay literal
  flood:N      N numbered lines ("flood 0" ...), as fast as the pipe takes them
  ready        SGLang's ready line, once its port answers HTTP (as a real server's does: specmon
               declares ready only when the run's own process listens on the port)
  sleep:S      wait S seconds
  fork         a child in the same process group that outlives this leader
  ignore-term  ignore SIGTERM from here on (SIG_IGN: a later ``fork`` child inherits it), as a
               server stuck in a CUDA or NCCL call never runs its SIGTERM handler: only the
               stop's SIGKILL after the grace period ends it
  crash:C      a traceback, then exit with code C
  serve        sleep until killed
  tick:MS      a numbered line ("tick 0" ...) every MS milliseconds, until killed
  bidi         lines carrying Unicode bidi controls (U+202E...), an error line among them
  specpos:N    a vLLM SpecDecoding line whose per-position list has N entries
  http:WHAT    answer HTTP on the --port given (in a thread; the next steps go on), as a
               vLLM server would: /health 200 and, by WHAT,
                 position=N  /metrics whose counters rise at every scrape, with one
                             accepted-per-position sample at position="N" (and a label
                             carrying U+202E)
                 endless     /metrics that never ends (chunks of valid samples, forever)
                 bigline     /metrics of one line growing forever, no newline
                 drip        /metrics that never ends, in chunks of one byte
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

READY_LINE = "[2026-01-01 00:00:00] The server is fired up and ready to roll!"
ESCAPE_LINES = (
    "title \x1b]0;pwned title\x07 end",
    "clear \x1b[2J\x1b[H end",
    "clipboard \x1b]52;c;cm0gLXJmIH4=\x07 end",
    "link \x1b]8;;https://example.invalid\x1b\\click\x1b]8;;\x1b\\ end",
    "dcs \x1bPq#0;2;0;0;0\x1b\\ end",
    "c1 \x9b2J\x9d0;t\x9c end",
    "controls \x00\x07\x08\r\x7f\x85 end",
    "markup [bold red]not markup[/] end",
)
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
BIDI_LINES = (
    f"bidi line: rm -rf \u202e/ tmp{BIDI} end",
    "Traceback (most recent call last):",
    f"RuntimeError: hostile bidi \u202eerror\u2066{BIDI} end",
)
SPEC_LINE = (
    "INFO 01-01 00:00:00 [metrics.py:1] SpecDecoding metrics: Mean acceptance length: 2.50, "
    "Accepted throughput: 10.00 tokens/s, Drafted throughput: 20.00 tokens/s, "
    "Accepted: 100 tokens, Drafted: 200 tokens, Per-position acceptance rate: {rates}, "
    "Avg Draft acceptance rate: 50.0%"
)
CHUNK = b"vllm:num_requests_running 1\n" * 2048  # 56 KB of valid samples


def metrics_page(scrape: int, position: int) -> bytes:
    """A vLLM /metrics page whose counters have risen ``scrape`` times, with one
    accepted-per-position sample at the hostile ``position``."""
    drafts = 100 * (scrape + 1)
    lines = [
        "# TYPE vllm:spec_decode_num_drafts counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0"}} {drafts}',
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0"}} {3 * drafts}',
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0"}} {2 * drafts}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="0"}} {drafts}',
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="1"}} {drafts}',
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",position="{position}"}} '
        f"{drafts}",
        "# TYPE vllm:generation_tokens counter",
        f'vllm:generation_tokens_total{{engine="0"}} {10 * drafts}',
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0"} 1',
        "# TYPE vllm:num_requests_waiting gauge",
        'vllm:num_requests_waiting{engine="0"} 0',
        "# TYPE vllm:hostile_note gauge",
        f'vllm:hostile_note{{note="a\u202eb{BIDI}c"}} 1',
    ]
    return ("\n".join(lines) + "\n").encode()


def serve_http(what: str, port: int) -> None:
    """Answer HTTP on 127.0.0.1:``port`` in a daemon thread, as ``what`` says."""
    scrapes = itertools.count()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass  # the server's stdout is its log: no access lines

        def do_GET(self) -> None:
            if self.path == "/health":
                self._answer(b"")
            elif self.path == "/metrics" and what.startswith("position="):
                self._answer(metrics_page(next(scrapes), int(what.partition("=")[2])))
            elif self.path == "/metrics" and what in ("endless", "bigline", "drip"):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = {"endless": CHUNK, "bigline": b"x" * len(CHUNK)}.get(what, b"x")
                framed = b"%x\r\n%s\r\n" % (len(chunk), chunk)
                if what == "drip":  # many one-byte chunks to a write
                    framed *= 4096
                try:
                    while True:  # until the reader hangs up
                        self.wfile.write(framed)
                except OSError:
                    self.close_connection = True
            else:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

        def _answer(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    SERVING.append(port)


SERVING: list[int] = []  # the ports this process answers HTTP on


def _port(argv: list[str]) -> int:
    """The ``--port N`` the launch gave (the profile's port)."""
    return int(argv[argv.index("--port") + 1])


def main() -> int:
    out = sys.stdout
    for step in os.environ.get("SPECMON_HOSTILE_MODE", "ready,serve").split(","):
        name, _, value = step.partition(":")
        if name == "escapes":
            for line in ESCAPE_LINES:
                out.write(line + "\n")
        elif name == "bidi":
            for line in BIDI_LINES:
                out.write(line + "\n")
        elif name == "specpos":
            out.write(SPEC_LINE.format(rates=", ".join(["0.5"] * int(value))) + "\n")
        elif name == "http":
            serve_http(value, _port(sys.argv))
        elif name == "flood":
            out.writelines(f"flood {i}\n" for i in range(int(value)))
        elif name == "ready":
            if not SERVING:
                serve_http("", _port(sys.argv))
            out.write(READY_LINE + "\n")
        elif name == "sleep":
            time.sleep(float(value))
        elif name == "ignore-term":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        elif name == "fork":
            out.flush()
            if os.fork() == 0:
                time.sleep(3600)
                os._exit(0)
        elif name == "crash":
            out.write("Traceback (most recent call last):\n")
            out.write("RuntimeError: hostile crash \x1b]0;crash title\x07\n")
            out.flush()
            return int(value or 1)
        elif name == "tick":
            for i in itertools.count():
                out.write(f"tick {i}\n")
                out.flush()
                time.sleep(float(value) / 1000)
        elif name == "serve":
            out.flush()
            while True:
                time.sleep(3600)
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
