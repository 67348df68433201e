"""A launched "server" that prints SGLang's ready line while its port is held by a process
outside its session. With SPECMON_TEST_HAND_OVER=start it starts answer_200.py detached (its
own session) at once, then says it is ready; otherwise it serves the port itself (200 to
everything), says it is ready, and hands the port over to a detached answer_200.py on
SIGUSR1. The detached listener's pid goes to SPECMON_TEST_FOREIGN_PID. The run's leader
lives on; the listener on its port is not the run's."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from answer_200 import AnswerEverything  # noqa: E402


def hand_over(port: str) -> None:
    """Start answer_200.py detached on the port; return once it listens."""
    foreign = subprocess.Popen(
        [sys.executable, str(HERE / "answer_200.py"), port],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert foreign.stdout is not None and foreign.stdout.readline()
    Path(os.environ["SPECMON_TEST_FOREIGN_PID"]).write_text(str(foreign.pid))


def say_ready() -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] The server is fired up and ready to roll!", flush=True)


if __name__ == "__main__":
    port = sys.argv[sys.argv.index("--port") + 1]
    if os.environ.get("SPECMON_TEST_HAND_OVER") == "start":
        hand_over(port)
        say_ready()
    else:
        own = http.server.HTTPServer(("127.0.0.1", int(port)), AnswerEverything)
        serving = threading.Thread(target=own.serve_forever, daemon=True)
        serving.start()
        say_ready()
        asked = threading.Event()
        signal.signal(signal.SIGUSR1, lambda *_: asked.set())
        asked.wait(3600)
        own.shutdown()
        own.server_close()
        hand_over(port)
    for _ in range(3600):
        time.sleep(1)
