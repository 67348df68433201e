"""A launched "server" that prints SGLang's ready line while its port is held by a process
outside its session: it starts answer_200.py detached (its own session, its pid written to
SPECMON_TEST_FOREIGN_PID), then says it is ready and sleeps. The run's leader lives; the
listener on its port is not the run's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

if __name__ == "__main__":
    port = sys.argv[sys.argv.index("--port") + 1]
    foreign = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("answer_200.py")), port],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    Path(os.environ["SPECMON_TEST_FOREIGN_PID"]).write_text(str(foreign.pid))
    assert foreign.stdout is not None and foreign.stdout.readline()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] The server is fired up and ready to roll!", flush=True)
    for _ in range(3600):
        time.sleep(1)
