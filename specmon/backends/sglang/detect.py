"""Does a log's beginning look like SGLang's? For `specmon parse` without `--backend`."""

from __future__ import annotations

import re

# Texts only SGLang writes; each one found adds to the confidence.
_MARKERS = re.compile(
    r"Decode batch[ .,\[]|Prefill batch[ .,\[]|server_args=ServerArgs\(|sglang[.:]"
    r"|The server is fired up and ready to roll|Load weight begin\. avail mem="
    r"|Init torch distributed begin\.|Scheduler hit an exception|Capture cuda graph begin"
    r"|Capture (?:target|draft) \w+ CUDA graph|KV Cache is allocated\. "
)


def sglang_log_confidence(sample: str) -> float:
    """0 when no SGLang-only text is in ``sample``; 0.6 for one kind, 1.0 for two or more."""
    kinds = {match.group()[:12] for match in _MARKERS.finditer(sample)}
    if not kinds:
        return 0.0
    return 1.0 if len(kinds) >= 2 else 0.6
