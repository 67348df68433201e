"""vLLM 0.33's output: ``(Process pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message`` on
stdout, tqdm bars unprefixed on stderr, uvicorn's lines without vLLM's prefix (vllm.md §1).

A multi-line record repeats the header on every line, lines joined with ``\\r\\n`` as vLLM's
NewLineFormatter does.
"""

from __future__ import annotations

import os
import time
from typing import TextIO

from specmon.sim.logwriter import LogWriter

# Fixed line numbers per call site (vllm.md §2, 0.33.0).
SITES = {
    "startup": "startup.py:38",
    "args": "startup.py:96",
    "arch": "model.py:744",
    "max_len": "model.py:2170",
    "chunked": "scheduler.py:310",
    "engine": "core.py:139",
    "nccl": "pynccl.py:148",
    "rank": "parallel_state.py:2385",
    "load": "model_runner.py:399",
    "attn": "cuda.py:508",
    "weights": "default_loader.py:506",
    "aux": "eagle3_utils.py:39",
    "lm_head": "llm_base_proposer.py:1520",
    "loaded": "model_runner.py:428",
    "compile_start": "monitor.py:40",
    "compile_cache": "backends.py:1125",
    "dynamo": "backends.py:1187",
    "compile_range": "backends.py:401",
    "compiling": "backends.py:417",
    "compile_total": "monitor.py:62",
    "warmup": "monitor.py:91",
    "kv_mem": "gpu_worker.py:772",
    "graph_profile": "gpu_worker.py:787",
    "kv_size": "kv_cache_utils.py:1147",
    "graphs": "model_runner.py:1163",
    "graph_pool": "gpu_worker.py:1003",
    "init_engine": "core.py:405",
    "tasks": "entry.py:135",
    "serving": "entry.py:139",
    "routes": "launcher.py:188",
    "route": "launcher.py:197",
    "stats": "loggers.py:335",
    "spec": "metrics.py:120",
    "core_failed": "core.py:1584",
    "core_fatal": "core.py:1586",
    "worker_failed": "multiproc_executor.py:1027",
    "worker_exception": "multiproc_executor.py:1063",
    "worker_died": "multiproc_executor.py:431",
    "output_handler": "async_llm.py:906",
    "shm": "shm_broadcast.py:681",
    "shutdown": "launcher.py:110",
}


class VllmLogWriter(LogWriter):
    """Writes records as vLLM 0.33's processes do; thread-safe, flushed per write."""

    def __init__(self, stdout: TextIO | None = None, stderr: TextIO | None = None) -> None:
        super().__init__(stdout, stderr)
        self.api_pid = os.getpid()

    @staticmethod
    def timestamp(now: float | None = None) -> str:
        return time.strftime("%m-%d %H:%M:%S", time.localtime(now))

    def record(self, process: str, pid: int, site: str, message: str, level: str = "INFO") -> None:
        """One log record from ``process`` (``APIServer``, ``EngineCore``, ``Worker_TP0``...)."""
        head = f"({process} pid={pid}) {level} {self.timestamp()} [{SITES.get(site, site)}] "
        self._write(self.stdout, "\r\n".join(head + line for line in message.split("\n")) + "\n")

    def api(self, site: str, message: str, level: str = "INFO") -> None:
        self.record("APIServer", self.api_pid, site, message, level)

    def main(self, message: str) -> None:
        self.api("startup", message)

    def rank(self, rank: int | None, message: str) -> None:
        self.record(f"Worker_TP{rank or 0}", self.api_pid, "model_runner.py:1", message)

    def uvicorn(self, message: str, level: str = "INFO") -> None:
        """uvicorn's records: no vLLM prefix in 0.33, ``LEVEL:`` padded to 9, on stderr."""
        self._write(self.stderr, f"{level + ':':<9} {message}\n")

    def access(self, client: str, method: str, path: str, status: int, reason: str) -> None:
        self._write(
            self.stdout, f'INFO:     {client} - "{method} {path} HTTP/1.1" {status} {reason}\n'
        )
