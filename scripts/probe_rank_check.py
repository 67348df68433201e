"""The probe across tensor-parallel ranks: N processes of the EAGLE stand-in whose verify all-reduces.

  PYTHONPATH=. python3 scripts/probe_rank_check.py --ranks 8 --out "$OUT"                 # CPU, gloo
  PYTHONPATH=. python3 scripts/probe_rank_check.py --ranks 8 --device cuda --out "$OUT"   # 8 GPUs, NCCL

Like scripts/probe_gpu_check.py, it writes a stand-in ``sglang.srt.speculative.eagle_worker``
with SGLang's class and method names doing real work of known size, but starts it as N ranks
of one ``torch.distributed`` group, as SGLang's TP scheduler processes are: each phase does
matmuls, and verify also all-reduces a bf16 tensor of hidden x (batch x draft tokens), like
the target model's TP layers. Every rank gets the probe injected exactly as the host session
injects it (SGLang's ``probe_targets()`` files in a folder on PYTHONPATH, ``launch_env()``
merged); the run is repeated without it. Per rank it reports the ground truth (times taken inside the method
bodies: CUDA events on GPU, perf_counter on CPU), its spread across ranks, and the probe's
overhead (the rank's loop with the probe less without). The probe writes global rank 0 only
(docs/probe.md); its records are compared with rank 0's ground truth.

Results: ``<out>/probe_rank_check.json`` and a summary on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HIDDEN = 7168
BATCH_SIZE = 8
DRAFT_TOKENS_PER_REQUEST = 4
WARMUP_CYCLES = 20
# Per device: matrix size, matmuls per phase. CPU sizes keep 8 ranks on a few cores in seconds.
WORK = {
    "cpu": {"size": 256, "reps": {"draft": 1, "verify": 10, "extend": 1}},
    "cuda": {"size": 4096, "reps": {"draft": 4, "verify": 60, "extend": 2}},
}

STAND_IN_WORKER = '''
"""Stand-in EAGLE worker for one TP rank: SGLang's names, real work, a real all-reduce."""
import json
import os
import time

import torch
import torch.distributed as dist

_DEVICE = os.environ["STANDIN_DEVICE"]
_REPS = json.loads(os.environ["STANDIN_REPS"])
_SIZE = int(os.environ["STANDIN_SIZE"])
_TOKENS = int(os.environ["STANDIN_TOKENS"])
_HIDDEN = int(os.environ["STANDIN_HIDDEN"])
_DTYPE = torch.bfloat16 if _DEVICE.startswith("cuda") else torch.float32
_A = torch.randn(_SIZE, _SIZE, device=_DEVICE, dtype=_DTYPE)
_B, _C = torch.randn_like(_A), torch.empty_like(_A)
_REDUCED = torch.ones(_TOKENS, _HIDDEN, device=_DEVICE, dtype=torch.bfloat16)
_TINY = torch.zeros(64, device=_DEVICE)
TRUTH = []  # (phase, start, end): CUDA event pairs, or perf_counter seconds on CPU


def _stamp():
    if _DEVICE.startswith("cuda"):
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event
    return time.perf_counter()


def _work(phase):
    start = _stamp()
    for _ in range(_REPS[phase]):
        torch.mm(_A, _B, out=_C)
    if phase == "verify":
        dist.all_reduce(_REDUCED)  # the target model's TP all-reduce
    TRUTH.append((phase, start, _stamp()))


class VerifyOutput:
    def __init__(self, accepted):
        self.accept_length_per_req_cpu = accepted


class EAGLEWorker:
    def __init__(self, speculative_num_draft_tokens):
        self.speculative_num_draft_tokens = speculative_num_draft_tokens

    def forward_batch_generation(self, batch):
        start = _stamp()
        spec_info = self.draft(batch)
        _logits, verify_output, _mwb, _graph = self.verify(batch, spec_info)
        self.forward_draft_extend_after_decode(batch)
        TRUTH.append(("cycle", start, _stamp()))
        return sum(verify_output.accept_length_per_req_cpu)

    def draft(self, batch):
        _work("draft")

    def verify(self, batch, spec_info):
        _work("verify")
        accepted = (_TINY[: len(batch.seq_lens)] >= 0).int().tolist()  # the host sync of v1
        return None, VerifyOutput(accepted), None, True

    def forward_draft_extend_after_decode(self, batch):
        _work("extend")
'''


def write_stand_in(root: Path) -> None:
    package = root / "sglang" / "srt" / "speculative"
    package.mkdir(parents=True)
    for folder in (root / "sglang", root / "sglang" / "srt", package):
        (folder / "__init__.py").write_text(
            '__version__ = "stand-in"\n' if folder.name == "sglang" else ""
        )
    (package / "eagle_worker.py").write_text(STAND_IN_WORKER)


def write_probe(probe_dir: Path) -> None:
    from specmon.backends import get_backend

    targets = get_backend("sglang").probe_targets()
    assert targets is not None
    for relative, content in targets.files.items():
        path = probe_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


# --- one rank ---------------------------------------------------------------------------------


class _Batch:
    def __init__(self, size: int, device: str) -> None:
        import torch

        self.seq_lens = torch.full((size,), 100, device=device, dtype=torch.int64)


def rank_main(result_path: Path, cycles: int) -> None:
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    device = os.environ["STANDIN_DEVICE"]
    if device == "cpu":
        torch.set_num_threads(1)  # one core's worth per rank, as one GPU per rank on a host
    if device == "cuda":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
        os.environ["STANDIN_DEVICE"] = device
    dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")
    from sglang.srt.speculative import eagle_worker as stand_in

    worker = stand_in.EAGLEWorker(DRAFT_TOKENS_PER_REQUEST)
    batch = _Batch(BATCH_SIZE, device)
    probed = hasattr(stand_in.EAGLEWorker.verify, "__wrapped__")

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        dist.barrier()

    for _ in range(WARMUP_CYCLES):
        worker.forward_batch_generation(batch)
    sync()
    first_measured = len(stand_in.TRUTH)
    outer: list[float] = []  # each call as its caller sees it, probe wrappers included
    clock = time.perf_counter
    started = clock()
    for _ in range(cycles):
        called = clock()
        worker.forward_batch_generation(batch)
        outer.append((clock() - called) * 1000.0)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    wall_s = time.perf_counter() - started
    sync()

    def ms(start: object, end: object) -> float:
        if isinstance(start, float):
            return (float(end) - start) * 1000.0  # type: ignore[arg-type]
        return float(start.elapsed_time(end))  # type: ignore[attr-defined]

    truth = [(phase, ms(s, e)) for phase, s, e in stand_in.TRUTH[first_measured:]]
    report: dict = {"rank": rank, "world": world, "probed": probed, "wall_s": wall_s}
    report["truth"] = truth
    report["outer_ms"] = outer
    hook = sys.modules.get("specmon_probe_hook")
    recorder = hook.recorder() if hook is not None else None
    if recorder is not None:
        recorder.close()
        report["probe_enabled"] = bool(recorder.enabled)
        report["writer_lines"] = recorder.written
    result_path.write_text(json.dumps(report))
    dist.destroy_process_group()


# --- the orchestrator -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_ranks(
    script: Path, work: Path, label: str, ranks: int, cycles: int, env_extra: dict[str, str]
) -> list[dict]:
    """Start the N ranks as separate interpreters (as a TP server's schedulers are)."""
    port = free_port()
    processes = []
    for rank in range(ranks):
        env = {k: v for k, v in os.environ.items() if k not in ("SPECMON_PROBE_FILE",)}
        env.update(env_extra)
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(ranks),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
        )
        result = work / f"{label}-rank{rank}.json"
        command = [
            sys.executable,
            str(script),
            "--rank-child",
            str(result),
            "--cycles",
            str(cycles),
        ]
        processes.append((subprocess.Popen(command, env=env), result))
    for process, _ in processes:
        if process.wait(timeout=600) != 0:
            for other, _ in processes:
                other.kill()
            raise SystemExit(f"probe_rank_check: a rank of {label} exited {process.returncode}")
    return [json.loads(result.read_text()) for _, result in processes]


def phase_means(truth: list) -> dict[str, float]:
    by_phase: dict[str, list[float]] = {}
    for phase, ms in truth:
        by_phase.setdefault(phase, []).append(ms)
    return {phase: statistics.fmean(values) for phase, values in by_phase.items()}


def wrapper_gap_us(run: dict) -> float:
    """Median over cycles of the call as the caller saw it less the three phases' own bodies:
    the probe's wrappers plus the plain call overhead. Its difference with and without the
    probe is the probe's cost per cycle, measured inside each run (robust to a busy machine,
    unlike two runs' wall times)."""
    phases = [c["draft"] + c["verify"] + c["extend"] for c in _cycles(run["truth"])]
    gaps = [(o - p) * 1000.0 for o, p in zip(run["outer_ms"], phases, strict=True)]
    return statistics.median(gaps)


def summarize(
    without: list[dict], with_probe: list[dict], records: list[dict], cycles: int
) -> dict:
    """Per rank: truth means, overhead; across ranks: the spread; rank 0: probe vs truth."""
    per_rank = []
    for off, on in zip(without, with_probe, strict=True):
        means = phase_means(on["truth"])
        per_rank.append(
            {
                "rank": on["rank"],
                "truth_ms_with_probe": {k: round(v, 4) for k, v in means.items()},
                "truth_ms_without_probe": {
                    k: round(v, 4) for k, v in phase_means(off["truth"]).items()
                },
                "loop_ms_per_cycle": {
                    "without": off["wall_s"] / cycles * 1e3,
                    "with": on["wall_s"] / cycles * 1e3,
                },
                "overhead_us_per_cycle": (on["wall_s"] - off["wall_s"]) / cycles * 1e6,
                "overhead_pct": (on["wall_s"] - off["wall_s"]) / off["wall_s"] * 100,
                "wrapper_gap_us": {"without": wrapper_gap_us(off), "with": wrapper_gap_us(on)},
                "probe_cost_us_per_cycle": wrapper_gap_us(on) - wrapper_gap_us(off),
                "probe_writes": on.get("probe_enabled"),
                "probe_lines": on.get("writer_lines", 0),
            }
        )
    spread = {}
    for phase in ("draft", "verify", "extend", "cycle"):
        values = [r["truth_ms_with_probe"][phase] for r in per_rank]
        spread[phase] = {
            "min_ms": min(values),
            "max_ms": max(values),
            "max_over_min": max(values) / min(values) if min(values) > 0 else None,
            "stdev_ms": statistics.pstdev(values),
        }
    rank0_truth = [t for t in _cycles(with_probe[0]["truth"])]
    accuracy = {}
    if records and len(records) >= len(rank0_truth):
        measured = records[-len(rank0_truth) :]
        for phase in ("draft", "verify", "extend", "cycle"):
            key = f"{phase}_ms"
            rel = [
                abs(r[key] - t[phase]) / t[phase]
                for r, t in zip(measured, rank0_truth, strict=True)
                if t[phase] > 0
            ]
            accuracy[phase] = {
                "probe_mean_ms": statistics.fmean(r[key] for r in measured),
                "truth_mean_ms": statistics.fmean(t[phase] for t in rank0_truth),
                "mean_abs_rel_diff": statistics.fmean(rel) if rel else None,
            }
    overheads = [r["overhead_us_per_cycle"] for r in per_rank]
    costs = [r["probe_cost_us_per_cycle"] for r in per_rank]
    return {
        "per_rank": per_rank,
        "spread_across_ranks": spread,
        "probe_vs_rank0_truth": accuracy or "probe record count does not cover the cycles",
        "probe_records": len(records),
        "overhead_us_per_cycle": {
            "mean": statistics.fmean(overheads),
            "min": min(overheads),
            "max": max(overheads),
        },
        "probe_cost_us_per_cycle": {
            "mean": statistics.fmean(costs),
            "min": min(costs),
            "max": max(costs),
        },
    }


def _cycles(truth: list) -> list[dict[str, float]]:
    cycles, current = [], {}
    for phase, ms in truth:
        current[phase] = ms
        if phase == "cycle":
            cycles.append(current)
            current = {}
    return cycles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--cycles", type=int, default=None, help="measured cycles per run")
    parser.add_argument("--out", type=Path, default=Path("probe_rank_out"))
    parser.add_argument("--rank-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    cycles = args.cycles or (1000 if args.device == "cuda" else 200)
    if args.rank_child:
        rank_main(args.rank_child, cycles)
        return 0
    if not 1 <= args.ranks <= 64:
        parser.error("--ranks must be 1..64")
    args.out.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).resolve()
    repo = script.parent.parent
    work = Path(tempfile.mkdtemp(prefix="specmon-probe-ranks-"))
    try:
        return check(args, cycles, work, script, repo)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check(args: argparse.Namespace, cycles: int, work: Path, script: Path, repo: Path) -> int:
    stand_in_root, probe_dir = work / "standin", work / "probe"
    write_stand_in(stand_in_root)
    sys.path.insert(0, str(repo))
    write_probe(probe_dir)
    from specmon.model.events import ProbeTiming
    from specmon.probe import launch_env
    from specmon.probe.records import parse_probe_line

    work_spec = WORK[args.device]
    common = {
        "STANDIN_DEVICE": args.device,
        "STANDIN_REPS": json.dumps(work_spec["reps"]),
        "STANDIN_SIZE": str(work_spec["size"]),
        "STANDIN_TOKENS": str(BATCH_SIZE * DRAFT_TOKENS_PER_REQUEST),
        "STANDIN_HIDDEN": str(HIDDEN),
    }
    base_path = f"{stand_in_root}:{repo}"
    started = time.time()
    without = run_ranks(
        script, work, "without", args.ranks, cycles, {**common, "PYTHONPATH": base_path}
    )
    probe_file = work / "probe.jsonl"
    merged = launch_env(str(probe_dir), str(probe_file), base_path)
    with_probe = run_ranks(script, work, "with", args.ranks, cycles, {**common, **merged})
    lines = probe_file.read_text().splitlines() if probe_file.exists() else []
    records = [
        json.loads(line) for line in lines if isinstance(parse_probe_line(line), ProbeTiming)
    ]
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "device": args.device,
        "backend": "nccl" if args.device == "cuda" else "gloo",
        "ranks": args.ranks,
        "cycles": cycles,
        "work": work_spec,
        "all_reduce": {"shape": [BATCH_SIZE * DRAFT_TOKENS_PER_REQUEST, HIDDEN], "dtype": "bf16"},
        "probed_ranks": [r["rank"] for r in with_probe if r["probed"]],
        "seconds": time.time() - started,
    }
    summary.update(summarize(without, with_probe, records, cycles))
    (args.out / "probe_rank_check.json").write_text(json.dumps(summary, indent=2))
    print(
        f"device {args.device}, {args.ranks} ranks, {cycles} cycles; probe injected in ranks "
        f"{summary['probed_ranks']}, writing on ranks "
        f"{[r['rank'] for r in summary['per_rank'] if r['probe_writes']]}"
    )
    print(
        "rank  draft ms  verify ms  extend ms  cycle ms  wall diff us/cycle  wall diff %  "
        "probe cost us/cycle"
    )
    for r in summary["per_rank"]:
        t = r["truth_ms_with_probe"]
        print(
            f"{r['rank']:>4}  {t['draft']:8.3f}  {t['verify']:9.3f}  {t['extend']:9.3f}  "
            f"{t['cycle']:8.3f}  {r['overhead_us_per_cycle']:18.1f}  {r['overhead_pct']:11.2f}  "
            f"{r['probe_cost_us_per_cycle']:19.1f}"
        )
    for phase, s in summary["spread_across_ranks"].items():
        print(
            f"spread {phase}: {s['min_ms']:.3f}..{s['max_ms']:.3f} ms (stdev {s['stdev_ms']:.3f})"
        )
    print(f"probe records (rank 0): {summary['probe_records']}")
    accuracy = summary["probe_vs_rank0_truth"]
    if isinstance(accuracy, dict):
        for phase, a in accuracy.items():
            print(
                f"probe vs rank-0 truth {phase}: {a['probe_mean_ms']:.3f} vs "
                f"{a['truth_mean_ms']:.3f} ms, mean |rel diff| {a['mean_abs_rel_diff']:.3f}"
            )
    else:
        print(f"probe vs rank-0 truth: {accuracy}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
