"""Process shape of an SGLang launch: one idle child per TP rank (``sglang::scheduler_TPn``)
that dies with its parent, and SGLang's ``kill_process_tree`` exit (SIGKILL, shell sees 137).

The children hold the simulated GPUs (they are the pids the GPU agent lists), so a stop that
kills only the parent, or only the group, behaves as it does on a real host.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal

_PR_SET_NAME = 15
_PR_SET_PDEATHSIG = 1


def _prctl(option: int, value: int | bytes) -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, value, 0, 0, 0)


def spawn_rank_processes(tp_size: int, name: str = "sglang::sched") -> list[int]:
    """Fork one child per TP rank (process name ``name`` + rank, cut at 15 bytes); call
    before any thread or event loop exists."""
    pids: list[int] = []
    read_end, write_end = os.pipe()
    for rank in range(tp_size):
        pid = os.fork()
        if pid == 0:  # the child: wait for the parent to go, then go
            try:
                os.close(write_end)
                _prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL))
                _prctl(_PR_SET_NAME, f"{name}{rank}".encode()[:15])
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
                while os.read(read_end, 1):  # returns b"" when the parent's end closes
                    pass
            finally:
                os._exit(0)
        pids.append(pid)
    os.close(read_end)
    os.set_inheritable(write_end, False)
    return pids


def kill_process_tree(children: list[int]) -> None:
    """SIGKILL the children, then this process: SGLang's exit after a child failed."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def die_by_signal(children: list[int], signum: int) -> None:
    """Exit as if ``signum``'s default action ran (children first, no core file)."""
    for pid in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signum, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # only reached if the signal was somehow ignored
