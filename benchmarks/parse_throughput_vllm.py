"""How fast the vLLM log parser reads a long server log, against one bare regex pass.

Generates a realistic vLLM 0.33 log (a TP8 EAGLE-3 start-up with tqdm bars, then serving with
eight data-parallel engines: per interval each engine's `Engine 00k:` stats line and its
`SpecDecoding metrics:` line, HTTP access lines and a few warnings between them, with a share
of lines behind older ANSI-coloured and nested prefixes), parses it with events built, and
times in the same run a bare compiled-regex pass over the same decoded text (one ``findall``
of the stats lines' head per chunk): the least any regex-based reader can do.
Usage: python3 benchmarks/parse_throughput_vllm.py [--lines N] [--keep PATH]
"""

from __future__ import annotations

import argparse
import codecs
import os
import random
import re
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specmon.backends.vllm.parser import VLLMLogParser

START = datetime(2026, 11, 30, 6, 0, 1)
CHUNK_BYTES = 1 << 20
ENGINES = 8
BARE_PATTERN = re.compile(r"Engine \d+: Avg prompt throughput: ([\d.]+)")


def _head(process: str, at: datetime, source: str) -> str:
    return f"({process}) INFO {at:%m-%d %H:%M:%S} [{source}] "


def startup_lines(at: datetime) -> list[str]:
    worker = "Worker_TP0 pid=4502"
    lines = [
        _head("APIServer pid=4120", at, "startup.py:38")
        + "vLLM server version 0.33.0, serving model meta-llama/Llama-3.3-70B-Instruct",
        _head(worker, at, "model_runner.py:399") + "Loading model from scratch...",
    ]
    lines += [
        f"Loading safetensors checkpoint shards: {n * 100 // 30:3d}% Completed | {n}/30 "
        f"[00:{n:02d}<00:{30 - n:02d},  1.41s/it]"
        for n in range(31)
    ]
    lines += [
        _head(worker, at, "default_loader.py:506") + "Loading weights took 43.52 seconds",
        "Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00,  2.10it/s]",
        _head(worker, at, "default_loader.py:506") + "Loading weights took 0.61 seconds",
    ]
    for rank in range(8):
        lines.append(
            _head(f"Worker_TP{rank} pid={4502 + rank}", at, "model_runner.py:428")
            + "Model loading took 17.57 GiB memory and 45.912034 seconds"
        )
    lines += [
        _head(worker, at, "monitor.py:40") + "[backbone] Starting torch.compile",
        _head(worker, at, "monitor.py:62") + "[backbone] torch.compile took 36.88 s in total",
        _head(worker, at, "monitor.py:62") + "[eagle_head] torch.compile took 9.73 s in total",
        _head(worker, at, "gpu_worker.py:772") + "Available KV cache memory: 96.41 GiB",
        _head("EngineCore pid=4391", at, "kv_cache_utils.py:1147")
        + "GPU KV cache size: 2,496,128 tokens, Maximum concurrency for 131,072 tokens per "
        "request: 19.04x",
        "Capturing CUDA graphs (PIECEWISE): 100%|██████████| 51/51 [00:09<00:00,  5.41it/s]",
        _head(worker, at, "model_runner.py:1163")
        + "Graph capturing finished in 18 secs, took 1.12 GiB",
        _head("APIServer pid=4120", at, "entry.py:139")
        + "Starting vLLM server on http://0.0.0.0:8000",
        "INFO:     Started server process [4120]",
        "INFO:     Waiting for application startup.",
        "INFO:     Application startup complete.",
    ]
    return lines


def stats_line(rng: random.Random, at: datetime, engine: int, prefix_style: int) -> list[str]:
    """One engine's stats line and its SpecDecoding line, in one of three prefix styles."""
    drafts = rng.randint(500, 3000)
    per_position = sorted((rng.uniform(0.3, 0.9) for _ in range(3)), reverse=True)
    accepted = int(sum(per_position) * drafts)
    text_stats = (
        f"Engine {engine:03d}: Avg prompt throughput: {rng.uniform(0, 4000):.1f} tokens/s, "
        f"Avg generation throughput: {rng.uniform(50, 900):.1f} tokens/s, "
        f"Running: {rng.randint(0, 64)} reqs, Waiting: {rng.choice((0, 0, 1, 3))} reqs, "
        f"GPU KV cache usage: {rng.uniform(0, 40):.1f}%, Prefix cache hit rate: 12.5%"
    )
    text_spec = (
        f"SpecDecoding metrics: Mean acceptance length: {1 + accepted / drafts:.2f}, "
        f"Accepted throughput: {accepted / 10:.2f} tokens/s, "
        f"Drafted throughput: {drafts * 3 / 10:.2f} tokens/s, Accepted: {accepted} tokens, "
        f"Drafted: {drafts * 3} tokens, Per-position acceptance rate: "
        f"{', '.join(f'{rate:.3f}' for rate in per_position)}, "
        f"Avg Draft acceptance rate: {accepted / drafts / 3 * 100:.1f}%"
    )
    if prefix_style == 1:  # ~0.10: ANSI-coloured prefix written by the stdout wrapper
        head = f"\x1b[1;36m(APIServer pid=4120)\x1b[0m INFO {at:%m-%d %H:%M:%S} "
        return [head + "[loggers.py:118] " + text_stats, head + "[metrics.py:86] " + text_spec]
    if prefix_style == 2:  # docker logs -t, nested tags
        stamp = f"{at:%Y-%m-%dT%H:%M:%S}.{rng.randint(0, 999999999):09d}Z "
        head = f"{stamp}(ServeReplica:default:LLMServer:llama pid=1) INFO {at:%m-%d %H:%M:%S} "
        return [head + "[loggers.py:335] " + text_stats, head + "[metrics.py:120] " + text_spec]
    return [
        _head("APIServer pid=4120", at, "loggers.py:335") + text_stats,
        _head("APIServer pid=4120", at, "metrics.py:120") + text_spec,
    ]


def write_log(path: Path, total_lines: int, seed: int = 11) -> int:
    """Write the log; returns the number of lines written (about 80% stats and spec lines)."""
    rng = random.Random(seed)
    at = START
    head = startup_lines(at)
    written = len(head)
    at += timedelta(seconds=170)
    with path.open("w", encoding="utf-8") as out:
        out.write("\n".join(head) + "\n")
        buffer: list[str] = []
        interval = 0
        while written < total_lines:
            interval += 1
            at += timedelta(seconds=10)
            prefix_style = 1 if interval % 10 == 3 else 2 if interval % 10 == 7 else 0
            for engine in range(ENGINES):
                buffer += stats_line(rng, at, engine, prefix_style)
            for _ in range(4):
                buffer.append(
                    f"INFO:     10.0.0.{rng.randint(2, 250)}:{rng.randint(30000, 60000)} - "
                    '"POST /v1/chat/completions HTTP/1.1" 200 OK'
                )
            if interval % 50 == 0:
                buffer.append(
                    _head("APIServer pid=4120", at, "protocol.py:81")
                    + "The following fields were present in the request but ignored: {'seed'}"
                )
            if len(buffer) >= 10000:
                written += len(buffer)
                out.write("\n".join(buffer) + "\n")
                buffer.clear()
        written += len(buffer)
        out.write("\n".join(buffer) + "\n")
    return written


def time_parser(path: Path) -> tuple[float, Counter[str], int]:
    """Parse the file, counting events by kind; (seconds, kinds, unparsed decode-like)."""
    parser = VLLMLogParser()
    kinds: Counter[str] = Counter()
    started = time.perf_counter()
    with path.open("rb") as log:
        while chunk := log.read(CHUNK_BYTES):
            for event in parser.feed(chunk):
                kinds[event.kind] += 1
        for event in parser.flush():
            kinds[event.kind] += 1
    return time.perf_counter() - started, kinds, parser.unparsed_decode_like


def time_bare_regex(path: Path) -> tuple[float, int]:
    """The same reading and decoding, and one compiled findall per chunk: the floor."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    found = 0
    pending = ""
    started = time.perf_counter()
    with path.open("rb") as log:
        while chunk := log.read(CHUNK_BYTES):
            text = pending + decoder.decode(chunk)
            cut = text.rfind("\n") + 1  # whole lines only, as the parser reads them
            pending = text[cut:]
            found += len(BARE_PATTERN.findall(text, 0, cut))
    found += len(BARE_PATTERN.findall(pending))
    return time.perf_counter() - started, found


def main() -> int:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--lines", type=int, default=1_000_000, help="log length in lines")
    options.add_argument("--keep", metavar="PATH", help="write the log here and keep it")
    options.add_argument("--repeat", type=int, default=3, help="runs of each; the best is shown")
    args = options.parse_args()
    if args.lines < 1000:
        print("--lines must be at least 1000", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(args.keep) if args.keep else Path(scratch) / "vllm-bench.log"
        written = write_log(path, args.lines)
        size_mb = path.stat().st_size / 1e6
        load = os.getloadavg()
        bare = [time_bare_regex(path) for _ in range(max(1, args.repeat))]
        runs = [time_parser(path) for _ in range(max(1, args.repeat))]
    bare_s = min(seconds for seconds, _ in bare)
    parse_s = min(seconds for seconds, _, _ in runs)
    _, kinds, unparsed = runs[0]
    print(f"log: {written} lines, {size_mb:.1f} MB; load average {load[0]:.2f} before timing")
    print(f"events: {dict(sorted(kinds.items()))}; unparsed decode-like lines: {unparsed}")
    print(
        f"bare regex pass: {bare_s:.3f} s ({written / bare_s:,.0f} lines/s), "
        f"{bare[0][1]} stats lines found"
    )
    print(f"vLLM parser:     {parse_s:.3f} s ({written / parse_s:,.0f} lines/s)")
    print(f"ratio parser/bare regex: {parse_s / bare_s:.2f}x")
    if kinds["decode"] != bare[0][1]:
        print(
            f"MISMATCH: {kinds['decode']} decode events, {bare[0][1]} stats lines", file=sys.stderr
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
