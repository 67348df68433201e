"""How fast the SGLang log parser reads a long server log, against `grep -c` on the same file.

Generates a realistic log (a TP8 EAGLE-3 start-up with tqdm bars, then serving: mostly decode
lines with prefill and HTTP access lines between them, some older and newer decode variants,
and a crash at the end), parses it with events built, and times `grep -c 'Decode batch'` in
the same run; `--wrap docker` puts a `docker logs -t` timestamp before every line (the parser
then learns that prefix shape). Usage: python3 benchmarks/parse_throughput.py [--lines N]
[--keep PATH] [--wrap docker]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specmon.backends.sglang.parser import SGLangLogParser
from specmon.model.events import Decode

START = datetime(2026, 2, 10, 9, 14, 2)
CHUNK_BYTES = 1 << 20


def _stamp(at: datetime, tags: str = "") -> str:
    return f"[{at:%Y-%m-%d %H:%M:%S}{tags}]"


def startup_lines(at: datetime) -> list[str]:
    """Start-up of an 8-rank EAGLE-3 server in 0.5.9 and 0.5.23 forms, tqdm bars included."""
    lines = [
        "Max running requests is reset to 48 for speculative decoding. You can override this "
        "by explicitly setting --max-running-requests.",
        f"{_stamp(at)} server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tp_size=8, "
        "speculative_algorithm='EAGLE3', speculative_num_steps=3)",
    ]
    for rank in range(8):
        lines.append(f"{_stamp(at, f' TP{rank}')} Init torch distributed begin.")
        lines.append(f"{_stamp(at, f' TP{rank}')} Load weight begin. avail mem=138.21 GB")
    # 0.5.9 bar: one line per update; 0.5.23 bar: `\r`-separated updates on one line.
    for shard in range(0, 33):
        lines.append(
            f"Loading safetensors checkpoint shards: {shard * 100 // 64:3d}% Completed | "
            f"{shard}/64 [{shard * 3 // 60:02d}:{shard * 3 % 60:02d}<01:45,  3.01s/it]"
        )
    redraws = "\r".join(
        f"Loading safetensors checkpoint shards: {shard * 100 // 64:3d}% Completed | "
        f"{shard}/64 [{shard * 3 // 60:02d}:{shard * 3 % 60:02d}<00:30,  3.01s/it]"
        for shard in range(33, 65)
    )
    lines.append(redraws)
    at += timedelta(seconds=199)
    for rank in range(8):
        tag = f" TP{rank}"
        lines += [
            f"{_stamp(at, tag)} Load weight end. elapsed=199.12 s, "
            "type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, avail mem=64.50 GB, "
            "mem usage=73.71 GB.",
            f"{_stamp(at, tag)} KV Cache is allocated. #tokens: 560138, KV size: 36.66 GB",
            f"{_stamp(at, tag)} Capture cuda graph begin. This can take up to several minutes. "
            "avail mem=26.52 GB",
            f"{_stamp(at, tag)} Capture target verify CUDA graph end. bs=[1, 2, 4, 8], "
            "elapsed=21.37 s, mem usage=2.55 GB, avail mem=23.97 GB.",
            f"{_stamp(at, tag)} KV Cache is allocated. dtype: torch.bfloat16, #tokens: 560138, "
            "K size: 0.13 GB, V size: 0.13 GB",
        ]
    lines += [
        "Capturing batches (bs=1 avail_mem=24.02 GB): 100%|##########| 8/8 "
        "[00:19<00:00,  2.41s/it]",
        f"{_stamp(at, ' TP0')} Load weight end. elapsed=2.10 s, type=LlamaForCausalLMEagle3, "
        "dtype=torch.bfloat16, avail mem=23.51 GB, mem usage=0.46 GB.",
        f"{_stamp(at, ' TP0')} Capture draft decode CUDA graph begin. backend=fa3, "
        "num_tokens_per_req=4, bs=[1, 2, 4], avail mem=23.23 GB",
        f"{_stamp(at, ' TP0')} Capture draft extend cuda graph end. Time elapsed: 4.87 s. "
        "mem usage=0.21 GB. avail mem=22.57 GB.",
        f"{_stamp(at)} INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)",
        f"{_stamp(at)} The server is fired up and ready to roll!",
    ]
    return lines


def decode_line(rng: random.Random, at: datetime, variant: int) -> str:
    running = rng.randint(1, 48)
    tokens = running * rng.randint(1500, 2500)
    usage = tokens / 560138
    accept_len = rng.uniform(1.2, 3.6)
    gen = rng.uniform(60.0, 900.0)
    queue = rng.choice((0, 0, 0, 1, 2))
    if variant == 1:  # 0.4.6/0.5.2
        return (
            f"{_stamp(at, ' TP0')} Decode batch. #running-req: {running}, #token: {tokens}, "
            f"token usage: {usage:.2f}, accept len: {accept_len:.2f}, cuda graph: True, "
            f"gen throughput (token/s): {gen:.2f}, #queue-req: {queue}"
        )
    if variant == 2:  # 0.5.23 with cap len / block accept len, milliseconds and DP/TP tags
        return (
            f"[{at:%Y-%m-%d %H:%M:%S}.{rng.randint(0, 999):03d} DP0 TP0] Decode batch [{running}], "
            f"#running-req: {running}, #token: {tokens}, token usage: {usage:.2f}, "
            f"accept len: {accept_len:.2f}, accept rate: {accept_len / 4:.2f}, cap len: 4.00, "
            f"block accept len: {accept_len:.2f}, cuda graph: True, "
            f"gen throughput (token/s): {gen:.2f}, #queue-req: {queue}"
        )
    if variant == 3:  # hybrid model: `#full token:` fields
        return (
            f"{_stamp(at, ' TP0')} Decode batch, #running-req: {running}, "
            f"#full token: {tokens}, full token usage: {usage:.2f}, #swa token: {tokens // 4}, "
            f"swa token usage: {usage / 4:.2f}, accept len: {accept_len:.2f}, "
            f"accept rate: {accept_len / 4:.2f}, cuda graph: True, "
            f"gen throughput (token/s): {gen:.2f}, #queue-req: {queue}"
        )
    trailing = ", " if variant == 4 else ""  # 0.5.5
    return (
        f"{_stamp(at, ' TP0')} Decode batch, #running-req: {running}, #token: {tokens}, "
        f"token usage: {usage:.2f}, accept len: {accept_len:.2f}, "
        f"accept rate: {accept_len / 4:.2f}, cuda graph: True, "
        f"gen throughput (token/s): {gen:.2f}, #queue-req: {queue}{trailing}"
    )


def crash_lines(at: datetime) -> list[str]:
    lines = []
    for rank in range(8):
        lines += [
            f"{_stamp(at, f' TP{rank}')} Scheduler hit an exception: Traceback (most recent "
            "call last):",
            '  File "/sglang/srt/managers/scheduler.py", line 2573, in run_scheduler_process',
            "    scheduler.event_loop_normal()",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU "
            f"{rank} has a total capacity of 139.72 GiB of which 1.05 GiB is free.",
        ]
    lines.append(
        f"{_stamp(at)} Received sigquit from a child process. It usually means the child failed."
    )
    return lines


VARIANT_BLOCKS = {0: 1, 5: 2, 10: 3, 15: 4}
"""Which 20,000-line blocks (of each 25) carry an older or newer decode form."""


def write_log(path: Path, total_lines: int, seed: int = 7) -> int:
    """Write the log; returns the number of physical lines written."""
    rng = random.Random(seed)
    at = START
    head = startup_lines(at)
    tail = crash_lines(at + timedelta(hours=3))
    serving = total_lines - len(head) - len(tail)
    at += timedelta(seconds=260)
    with path.open("w", encoding="utf-8") as out:
        out.write("\n".join(head) + "\n")
        buffer: list[str] = []
        for index in range(serving):
            if index % 4 == 0:
                at += timedelta(seconds=1)
            if index % 40 == 39:
                buffer.append(
                    f"{_stamp(at, ' TP0')} Prefill batch, #new-seq: 1, "
                    f"#new-token: {rng.randint(50, 8000)}, #cached-token: {rng.randint(0, 512)}, "
                    "token usage: 0.05, #running-req: 12, #queue-req: 0, "
                    f"input throughput (token/s): {rng.uniform(500, 20000):.2f}, cuda graph: False"
                )
            elif index % 40 == 19:
                buffer.append(
                    f"{_stamp(at)} INFO:     10.0.0.7:{rng.randint(30000, 60000)} - "
                    '"POST /generate HTTP/1.1" 200 OK'
                )
            else:
                # One server writes one decode form; the other forms come in blocks, as in a
                # log file that spans server upgrades.
                variant = VARIANT_BLOCKS.get((index // 20_000) % 25, 0)
                buffer.append(decode_line(rng, at, variant))
            if len(buffer) >= 10000:
                out.write("\n".join(buffer) + "\n")
                buffer.clear()
        if buffer:
            out.write("\n".join(buffer) + "\n")
        out.write("\n".join(tail) + "\n")
    return len(head) + serving + len(tail)


def wrap_docker(path: Path) -> None:
    """Prefix every line with an RFC 3339 nanosecond time, as `docker logs -t` does."""
    wrapped = path.with_suffix(".wrapped")
    with path.open(encoding="utf-8") as source, wrapped.open("w", encoding="utf-8") as out:
        for index, line in enumerate(source):
            out.write(f"2026-02-10T09:{index // 60000 % 60:02d}:{index // 1000 % 60:02d}.")
            out.write(f"{index % 1000:03d}456789Z {line}")
    wrapped.replace(path)


class Timing(NamedTuple):
    wall_s: float
    cpu_s: float  # this process's (or the child's) CPU time: what one core spent, load or not


def time_parser(path: Path, read_values: bool = False) -> tuple[Timing, int, Counter[str]]:
    """Parse the file; with ``read_values``, also read each decode's throughput and accept
    length, as `specmon parse --summary` does (a bulk-read Decode converts its numbers then)."""
    parser = SGLangLogParser()
    kinds: Counter[str] = Counter()
    values_sum = 0.0
    started, cpu_started = time.perf_counter(), time.process_time()
    with path.open("rb") as log:
        while chunk := log.read(CHUNK_BYTES):
            for event in parser.feed(chunk):
                kinds[event.kind] += 1
                if read_values and isinstance(event, Decode):
                    values_sum += event.gen_throughput + (event.accept_len or 0.0)
        for event in parser.flush():
            kinds[event.kind] += 1
    timing = Timing(time.perf_counter() - started, time.process_time() - cpu_started)
    return timing, parser.lines_seen, kinds


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_grep(path: Path) -> tuple[Timing, int]:
    grep = shutil.which("grep")
    if grep is None:
        raise SystemExit("grep is not on PATH")
    started, cpu_started = time.perf_counter(), _children_cpu()
    done = subprocess.run(
        [grep, "-c", "Decode batch", str(path)], capture_output=True, text=True, check=False
    )
    timing = Timing(time.perf_counter() - started, _children_cpu() - cpu_started)
    return timing, int(done.stdout.strip() or 0)


def main() -> int:
    options = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    options.add_argument("--lines", type=int, default=1_000_000, help="log length in lines")
    options.add_argument("--keep", metavar="PATH", help="write the log here and keep it")
    options.add_argument("--repeat", type=int, default=3, help="parser runs; the best is shown")
    options.add_argument(
        "--wrap", choices=("docker",), help="put a wrapper's prefix before every line"
    )
    options.add_argument(
        "--read-values",
        action="store_true",
        help="also read every decode's gen throughput and accept len, as --summary does",
    )
    args = options.parse_args()
    if args.lines < 1000:
        print("--lines must be at least 1000", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(args.keep) if args.keep else Path(scratch) / "sglang-bench.log"
        written = write_log(path, args.lines)
        if args.wrap == "docker":
            wrap_docker(path)
        size_mb = path.stat().st_size / 1e6
        load = os.getloadavg()
        greps = [time_grep(path) for _ in range(max(1, args.repeat))]
        runs = [time_parser(path, args.read_values) for _ in range(max(1, args.repeat))]
    grep_count = greps[0][1]
    grep_wall = min(timing.wall_s for timing, _ in greps)
    grep_cpu = min(timing.cpu_s for timing, _ in greps)
    parse_wall = min(timing.wall_s for timing, _, _ in runs)
    parse_cpu = min(timing.cpu_s for timing, _, _ in runs)
    _, lines_seen, kinds = runs[0]
    print(f"log: {written} lines written, {lines_seen} read (tqdm redraws split), {size_mb:.1f} MB")
    print(f"load average before timing: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(
        f"events: {sum(kinds.values())} ({', '.join(f'{k}={n}' for k, n in kinds.most_common())})"
    )
    print(
        f"grep -c 'Decode batch': {grep_count} lines; best wall {grep_wall * 1000:.1f} ms, "
        f"cpu {grep_cpu * 1000:.1f} ms = {written / grep_wall:,.0f} lines/s (wall)"
    )
    print(
        f"parser{' (decode values read)' if args.read_values else ''}: best wall {parse_wall:.3f} s = {written / parse_wall:,.0f} lines/s; "
        f"best cpu {parse_cpu:.3f} s = {written / parse_cpu:,.0f} lines/s "
        f"(runs, wall/cpu s: {', '.join(f'{t.wall_s:.2f}/{t.cpu_s:.2f}' for t, _, _ in runs)})"
    )
    print(
        f"parser/grep time ratio: {parse_wall / grep_wall:.1f}x wall, "
        f"{parse_cpu / max(grep_cpu, 1e-9):.1f}x cpu"
    )
    if kinds["decode"] != grep_count:
        print(f"MISMATCH: {kinds['decode']} decode events for {grep_count} grep hits")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
