"""Is this log vLLM's? A confidence from a sample of its first lines, for backend detection.

Each line votes by what only one server writes: vLLM's `LEVEL MM-DD HH:MM:SS [file.py:N]`
header, its `(Name pid=N)` process tags and its own messages, against SGLang's
`[YYYY-MM-DD HH:MM:SS TPn]` prefix and its messages. Lines that neither writes (tqdm bars,
uvicorn, warnings from libraries) do not vote.
"""

from __future__ import annotations

import re

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_VLLM_LINE = re.compile(
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[?[\w.]+\.py:\d+\]"
    r"|\((?:APIServer|EngineCore|Worker|VllmWorker|RayWorkerProc|RayWorkerWrapper|ServeReplica)[^()\n]* pid=\d+[,)]"
    r"|Engine \d{3}: Avg prompt throughput|SpecDecoding metrics:|vLLM (?:API )?server version"
    r"|Initializing a V1 LLM engine|Starting vLLM (?:API )?server"
)
_SGLANG_LINE = re.compile(
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?(?: [A-Z]+\d+)*\] "
    r"|Decode batch|Prefill batch|Load weight (?:begin|end)|The server is fired up"
    r"|server_args=ServerArgs|sglang"
)
SAMPLE_LINES = 200


def vllm_log_score(sample: str) -> float:
    """0..1: how sure the sample (a log's first ~200 lines) is vLLM's; 0.5 when no line votes.

    The score is the share of voting lines that vote vLLM, pulled toward 0.5 by a prior of one
    vote each way, so a sample with a single vLLM-looking line is not certain.
    """
    vllm_votes = sglang_votes = 0
    for line in sample.splitlines()[:SAMPLE_LINES]:
        if "\x1b" in line:
            line = _ANSI.sub("", line)
        is_vllm = _VLLM_LINE.search(line) is not None
        is_sglang = _SGLANG_LINE.search(line) is not None
        if is_vllm and not is_sglang:
            vllm_votes += 1
        elif is_sglang and not is_vllm:
            sglang_votes += 1
    return round((vllm_votes + 1) / (vllm_votes + sglang_votes + 2), 4)
