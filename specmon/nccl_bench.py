"""An all-reduce benchmark shaped like tensor-parallel decode, run as a launchable program.

``python -m specmon.nccl_bench --tp 8`` starts 8 ranks itself (``torch.multiprocessing``, all
in the launching process's group, so specmon's stop of the process group ends every rank) and
all-reduces bf16 tensors of hidden x batch, as each decoder layer of a TP8 decode step does,
thousands of times per size. Per-call latency comes from CUDA events on GPU (``nccl``) or
``perf_counter`` on CPU (``gloo``).

It takes the two SGLang flag names it needs (``--tp``: ranks; ``--model-path``: a label for the
ledger), so a launch profile with this command passes specmon's launch rules unchanged; its
other settings are ``SPECMON_NCCL_BENCH_*`` variables (a profile's ``env`` table), which the
launch rules allow. What it prints (one line each, parsed by :mod:`specmon.experiments.collective`):

* ``specmon-collective-rank {json}``: per rank, the NCCL_*/GLOO_* variables the rank sees;
* ``specmon-collective-result {json}``: per size, the latency percentiles across all calls;
* NCCL's own ``NCCL INFO`` lines when ``NCCL_DEBUG=INFO`` (set by the profile).

torch is imported only inside the ranks: importing this module costs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

RANK_PREFIX = "specmon-collective-rank "
RESULT_PREFIX = "specmon-collective-result "
DONE_PREFIX = "specmon-collective-done "
ENV_PREFIX = "SPECMON_NCCL_BENCH_"
REPORTED_ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_")
DEFAULT_HIDDEN = 7168  # Kimi-K2.5 / DeepSeek-V3 class
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_ITERS = 2000
DEFAULT_WARMUP = 50


@dataclass(frozen=True, slots=True)
class BenchConfig:
    """One benchmark run: ranks, transport and the sizes to all-reduce."""

    world_size: int
    backend: str  # "nccl" | "gloo"
    device: str  # "cuda" | "cpu"
    hidden: int
    batches: tuple[int, ...]
    iters: int
    warmup: int
    label: str
    port: int


def _positive(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SystemExit(f"nccl_bench: {name}={text[:30]!r} is not a whole number") from None
    if value < 1:
        raise SystemExit(f"nccl_bench: {name} must be at least 1 (got {value})")
    return value


def parse_config(argv: Sequence[str], env: dict[str, str]) -> BenchConfig:
    """The run's settings from argv and ``SPECMON_NCCL_BENCH_*``; SystemExit with one line."""
    parser = argparse.ArgumentParser(prog="python -m specmon.nccl_bench", description=__doc__)
    parser.add_argument("--tp", type=int, default=8, help="ranks (processes) to start")
    parser.add_argument("--model-path", default="allreduce", help="a label for the ledger")
    args = parser.parse_args(list(argv))
    if not 1 <= args.tp <= 64:
        raise SystemExit(f"nccl_bench: --tp must be 1..64 (got {args.tp})")
    device = env.get(ENV_PREFIX + "DEVICE", "cpu")
    if device not in ("cpu", "cuda"):
        raise SystemExit(f"nccl_bench: {ENV_PREFIX}DEVICE must be cpu or cuda (got {device!r})")
    backend = env.get(ENV_PREFIX + "BACKEND", "nccl" if device == "cuda" else "gloo")
    if backend not in ("nccl", "gloo"):
        raise SystemExit(f"nccl_bench: {ENV_PREFIX}BACKEND must be nccl or gloo")
    if backend == "nccl" and device != "cuda":
        raise SystemExit("nccl_bench: the nccl backend needs SPECMON_NCCL_BENCH_DEVICE=cuda")
    batches_text = env.get(ENV_PREFIX + "BATCHES", ",".join(map(str, DEFAULT_BATCHES)))
    batches = tuple(_positive(b.strip(), "batch") for b in batches_text.split(","))
    port_text = env.get(ENV_PREFIX + "PORT", "")
    return BenchConfig(
        world_size=args.tp,
        backend=backend,
        device=device,
        hidden=_positive(env.get(ENV_PREFIX + "HIDDEN", str(DEFAULT_HIDDEN)), "hidden"),
        batches=batches,
        iters=_positive(env.get(ENV_PREFIX + "ITERS", str(DEFAULT_ITERS)), "iters"),
        warmup=_positive(env.get(ENV_PREFIX + "WARMUP", str(DEFAULT_WARMUP)), "warmup"),
        label=args.model_path,
        port=_positive(port_text, "port") if port_text else _free_port(),
    )


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), q in [0, 100]."""
    if not sorted_values:
        raise ValueError("no values")
    position = (len(sorted_values) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def summarize(latencies_us: Sequence[float]) -> dict[str, float]:
    ordered = sorted(latencies_us)
    return {
        "p50_us": percentile(ordered, 50),
        "p90_us": percentile(ordered, 90),
        "p99_us": percentile(ordered, 99),
        "mean_us": sum(ordered) / len(ordered),
        "min_us": ordered[0],
        "max_us": ordered[-1],
    }


def _say(prefix: str, record: dict[str, object]) -> None:
    sys.stdout.write(prefix + json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


def _rank_main(rank: int, config: BenchConfig) -> None:
    """One rank: join the group, report its env, time every all-reduce, rank 0 prints."""
    import torch
    import torch.distributed as dist

    _say(
        RANK_PREFIX,
        {
            "rank": rank,
            "world_size": config.world_size,
            "backend": config.backend,
            "pid": os.getpid(),
            "env": {
                k: v for k, v in sorted(os.environ.items()) if k.startswith(REPORTED_ENV_PREFIXES)
            },
        },
    )
    if config.device == "cuda":
        torch.cuda.set_device(rank)
    else:
        torch.set_num_threads(1)  # a core per rank, not every core per rank
    dist.init_process_group(
        config.backend,
        init_method=f"tcp://127.0.0.1:{config.port}",
        rank=rank,
        world_size=config.world_size,
    )
    device = torch.device("cuda", rank) if config.device == "cuda" else torch.device("cpu")
    try:
        for batch in config.batches:
            tensor = torch.ones(batch, config.hidden, dtype=torch.bfloat16, device=device)
            latencies = _time_all_reduce(tensor, config, device)
            # Per-call latency as the slowest rank saw it: a TP step waits for the last rank.
            gathered = torch.tensor(latencies, dtype=torch.float64, device=device)  # nccl: on GPU
            dist.all_reduce(gathered, op=dist.ReduceOp.MAX)
            if rank == 0:
                record: dict[str, object] = {
                    "label": config.label,
                    "backend": config.backend,
                    "device": config.device,
                    "world_size": config.world_size,
                    "hidden": config.hidden,
                    "batch": batch,
                    "dtype": "bf16",
                    "bytes": batch * config.hidden * 2,
                    "calls": config.iters,
                    "timer": "cuda-event" if config.device == "cuda" else "perf_counter",
                }
                record.update(summarize(gathered.tolist()))
                _say(RESULT_PREFIX, record)
        if rank == 0:
            _say(DONE_PREFIX, {"sizes": len(config.batches), "config": asdict(config)})
    finally:
        dist.destroy_process_group()


def _time_all_reduce(tensor: object, config: BenchConfig, device: object) -> list[float]:
    """Microseconds per call, ``config.iters`` calls after ``config.warmup`` untimed ones."""
    import torch
    import torch.distributed as dist

    assert isinstance(tensor, torch.Tensor)
    for _ in range(config.warmup):
        dist.all_reduce(tensor)
    if config.device == "cuda":
        torch.cuda.synchronize()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(config.iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(config.iters)]
        for start, end in zip(starts, ends, strict=True):
            start.record()
            dist.all_reduce(tensor)
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1000.0 for s, e in zip(starts, ends, strict=True)]
    out: list[float] = []
    clock = time.perf_counter
    for _ in range(config.iters):
        started = clock()
        dist.all_reduce(tensor)
        out.append((clock() - started) * 1e6)
    return out


def _rank_entry(rank: int, config: BenchConfig) -> None:
    try:
        _rank_main(rank, config)
    except ImportError as exc:
        print(f"nccl_bench: rank {rank}: torch is not importable: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def run_ranks(config: BenchConfig) -> int:
    """Start the ranks (spawned interpreters: CUDA cannot be forked), wait for all; when one
    fails, end the others. They stay in this process's group, so a stop of the run reaches
    every rank. The parent itself never imports torch."""
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    ranks = [
        context.Process(target=_rank_entry, args=(rank, config), name=f"rank{rank}")
        for rank in range(config.world_size)
    ]
    for process in ranks:
        process.start()
    failed: list[str] = []
    running = list(ranks)
    while running and not failed:
        for process in list(running):
            process.join(timeout=0.2)
            if process.exitcode is None:
                continue
            running.remove(process)
            if process.exitcode != 0:
                failed.append(f"{process.name} exited {process.exitcode}")
    for process in running:
        process.terminate()
        process.join(timeout=10)
    if failed:
        print(f"nccl_bench: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(sys.argv[1:] if argv is None else argv, dict(os.environ))
    return run_ranks(config)


if __name__ == "__main__":
    raise SystemExit(main())
