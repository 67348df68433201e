"""What does the draft/verify probe cost inside a real vLLM? The CPU build, same run.

Starts two real vLLM 0.32 CPU servers (tests/support/real_vllm.py: the tiny 8-layer Llama with
its one-layer EAGLE-3 draft, 3 speculative tokens), one plain and one with the probe injected
as specmon injects it (vLLM's ``probe_targets()`` files in a folder, ``launch_env()`` merged). Then,
in rounds that alternate which server goes first (so the shared machine's load falls on both
alike), sends the same greedy requests one at a time to each and measures tokens per second and
the time per engine step (the round's wall time over its ``vllm:spec_decode_num_drafts_total``
increase: one draft per step at batch size 1), and the CPU time per step of the server's whole
process group (API server, engine core; user + system time from /proc), which a loaded shared
machine disturbs far less than wall time. Prints each, the median of the per-round ratios
probed / plain, and the probe's own per-cycle figures (draft, verify, cycle; its clock is
perf_counter: no CUDA).

On a shared 2-core machine the servers' rounds vary far more than the probe can cost, so the
script also measures the probe's hot path alone, in the same run: a stand-in runner with vLLM
0.32's module, class and method names and empty bodies (one request, 3 draft tokens) stepped
20,000 times in a fresh process with and without the injection (alternating, best of 5);
the difference is what the probe adds to each engine step, set against the real cycle.

    python3 benchmarks/probe_vllm_cpu.py [--rounds 16] [--requests 2] [--tokens 96]
                                         [--probed-first] [--json]

Needs the cached vllm-cpu install (made on first use, several minutes; docs/testing.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from support.real_vllm import (  # noqa: E402
    SERVED_NAME,
    RealVLLMServer,
    ensure_models,
    ensure_venv,
    start_real_vllm,
    vllm_home,
)
from support.real_vllm import RealVLLMInstall as Install  # noqa: E402

from specmon.backends import get_backend  # noqa: E402
from specmon.backends.vllm import metrics as vllm_metrics  # noqa: E402
from specmon.probe import launch_env  # noqa: E402
from specmon.probe.records import parse_probe_line  # noqa: E402

PROMPTS = ("The draft model verify", "River stone cloud light north", "A request prompt speed")


def install() -> Install:
    python, _ = ensure_venv()
    models, _ = ensure_models(python)
    cache = vllm_home() / "vllm-cache"
    cache.mkdir(parents=True, exist_ok=True)
    return Install(python, models, cache, None, None)


def probe_env(workdir: Path) -> tuple[dict[str, str], Path]:
    folder = workdir / "probe"
    folder.mkdir(parents=True)
    targets = get_backend("vllm").probe_targets()
    assert targets is not None
    for name, content in targets.files.items():
        (folder / name).write_bytes(content)
    probe_file = workdir / "probe.jsonl"
    return launch_env(str(folder), str(probe_file), None), probe_file


def drafts(server: RealVLLMServer) -> float:
    page = httpx.get(server.url("/metrics"), timeout=30).text
    engine = vllm_metrics.parse_metrics(page, at=time.monotonic()).engines["0"]
    return float(engine.drafts or 0)


# vLLM 0.32's names (the V1 runner the CPU build uses), bodies that do nothing.
STAND_IN = {
    "vllm/__init__.py": '__version__ = "0.32.0"\n',
    "vllm/v1/__init__.py": "",
    "vllm/v1/worker/__init__.py": "",
    "vllm/v1/sample/__init__.py": "",
    "vllm/v1/spec_decode/__init__.py": "",
    "vllm/v1/sample/rejection_sampler.py": """
        class RejectionSampler:
            def __call__(self, *args, **kwargs):  # nn.Module.__call__ -> forward
                return self.forward(*args, **kwargs)

            def forward(self, metadata, draft_probs, logits, sampling_metadata):
                return None
        """,
    "vllm/v1/spec_decode/eagle.py": """
        class SpecDecodeBaseProposer:
            def propose(self, target_token_ids, target_positions, target_hidden_states,
                        next_token_ids, token_indices, common_attn_metadata, sampling_metadata):
                return None

        class EagleProposer(SpecDecodeBaseProposer):
            pass
        """,
    "vllm/v1/worker/gpu_model_runner.py": """
        from vllm.v1.sample.rejection_sampler import RejectionSampler
        from vllm.v1.spec_decode.eagle import EagleProposer

        class ModelRunnerOutput:
            def __init__(self, req_ids, sampled_token_ids):
                self.req_ids = req_ids
                self.sampled_token_ids = sampled_token_ids

        class GPUModelRunner:
            def __init__(self):
                self.drafter = EagleProposer()
                self.rejection_sampler = RejectionSampler()
                self.execute_model_state = None

            def execute_model(self, scheduler_output, intermediate_tensors=None):
                self.execute_model_state = scheduler_output
                return None

            def sample_tokens(self, grammar_output):
                scheduler_output, self.execute_model_state = self.execute_model_state, None
                self.rejection_sampler("metadata", None, "logits", "sampling")
                output = ModelRunnerOutput(["r0"], [[7, 7]])
                self.drafter.propose(1, 2, 3, 4, 5, 6, 7)
                return output
        """,
}
STEPPER = """
import sys, time
from vllm.v1.worker.gpu_model_runner import GPUModelRunner

class SchedulerOutput:
    num_scheduled_tokens = {"r0": 4}
    scheduled_spec_decode_tokens = {"r0": [1, 2, 3]}

runner, output, steps = GPUModelRunner(), SchedulerOutput(), int(sys.argv[1])
started = time.perf_counter()
for _ in range(steps):
    if runner.execute_model(output) is None:
        runner.sample_tokens(None)
print((time.perf_counter() - started) / steps * 1e6)
"""


def hot_path_us(root: Path, steps: int = 20000, repeats: int = 5) -> tuple[float, float]:
    """(µs per step without, with the probe) on the stand-in runner, best of ``repeats``."""
    tree = root / "stand-in"
    for relative, text in STAND_IN.items():
        path = tree / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    (tree / "step.py").write_text(STEPPER)
    env, probe_file = probe_env(root / "hot-path")
    base = {k: v for k, v in os.environ.items() if not k.startswith("SPECMON_")}
    plain_env = {**base, "PYTHONPATH": str(tree)}
    probed_env = {**base, **launch_env(env["PYTHONPATH"], str(probe_file), str(tree))}
    best = {"plain": float("inf"), "probed": float("inf")}
    for _ in range(repeats):
        for name, environ in (("plain", plain_env), ("probed", probed_env)):
            done = subprocess.run(
                [sys.executable, str(tree / "step.py"), str(steps)],
                env=environ,
                capture_output=True,
                text=True,
                timeout=300,
                check=True,
            )
            best[name] = min(best[name], float(done.stdout.strip().splitlines()[-1]))
    written = [line for line in probe_file.read_text().splitlines() if '"wall"' in line]
    if len(written) < steps:  # the probe must have timed every step, or the figure means nothing
        raise SystemExit(f"the probe wrote {len(written)} records for {steps} steps")
    return best["plain"], best["probed"]


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU seconds of every live process in the group (all their threads)."""
    ticks = 0
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def one_round(server: RealVLLMServer, requests: int, tokens: int) -> tuple[float, float, float]:
    """(tokens per second, wall ms per engine step, CPU ms per engine step) of ``requests``
    sequential greedy requests."""
    before = drafts(server)
    generated = 0
    cpu_before = group_cpu_seconds(server.proc.pid)
    started = time.perf_counter()
    for index in range(requests):
        body = {
            "model": SERVED_NAME,
            "prompt": PROMPTS[index % len(PROMPTS)],
            "max_tokens": tokens,
            "temperature": 0,
            "ignore_eos": True,
        }
        answer = httpx.post(server.url("/v1/completions"), json=body, timeout=300).json()
        generated += int(answer["usage"]["completion_tokens"])
    elapsed = time.perf_counter() - started
    cpu = group_cpu_seconds(server.proc.pid) - cpu_before
    steps = max(drafts(server) - before, 1.0)
    return generated / elapsed, elapsed * 1000.0 / steps, cpu * 1000.0 / steps


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--requests", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--probed-first", action="store_true", help="start the probed one first")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    cached = install()
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="probe-vllm-cpu-")))
        env, probe_file = probe_env(root / "probed")
        if options.probed_first:  # which server starts (and binds its threads) first
            probed = stack.enter_context(start_real_vllm(root / "probed", cached, env=env))
            plain = stack.enter_context(start_real_vllm(root / "plain", cached))
        else:
            plain = stack.enter_context(start_real_vllm(root / "plain", cached))
            probed = stack.enter_context(start_real_vllm(root / "probed", cached, env=env))
        for server in (plain, probed):
            server.wait_ready(timeout=900)
            one_round(server, 1, 16)  # warm-up: first-request compilation, caches
        results: dict[str, list[tuple[float, float, float]]] = {"plain": [], "probed": []}
        for index in range(options.rounds):
            order = (("plain", plain), ("probed", probed))
            for name, server in order if index % 2 == 0 else order[::-1]:
                results[name].append(one_round(server, options.requests, options.tokens))
        records = [parse_probe_line(line) for line in probe_file.read_text().splitlines()]
        plain_us, probed_us = hot_path_us(root)  # after the servers: the machine is quieter
    timed = [r for r in records if r is not None and hasattr(r, "cycle_ms") and r.draft_tokens]

    def median(name: str, index: int) -> float:
        return statistics.median(r[index] for r in results[name])

    def ratios(index: int) -> list[float]:
        pairs = zip(results["probed"], results["plain"], strict=True)
        return sorted(p[index] / q[index] for p, q in pairs)

    wall, cpu = ratios(1), ratios(2)
    cycle_ms = statistics.median(r.cycle_ms for r in timed)
    report = {
        "started_first": "probed" if options.probed_first else "plain",
        "rounds": options.rounds,
        "requests_per_round": options.requests,
        "tokens_per_request": options.tokens,
        "tok_s_plain": round(median("plain", 0), 1),
        "tok_s_probed": round(median("probed", 0), 1),
        "wall_ms_per_step_plain": round(median("plain", 1), 3),
        "wall_ms_per_step_probed": round(median("probed", 1), 3),
        "wall_step_ratio_median": round(statistics.median(wall), 4),
        "wall_step_ratio_min_max": [round(wall[0], 4), round(wall[-1], 4)],
        "cpu_ms_per_step_plain": round(median("plain", 2), 3),
        "cpu_ms_per_step_probed": round(median("probed", 2), 3),
        "cpu_step_ratio_median": round(statistics.median(cpu), 4),
        "cpu_step_ratio_min_max": [round(cpu[0], 4), round(cpu[-1], 4)],
        "load_average_1min_at_end": os.getloadavg()[0],
        "probe_cycles": len(timed),
        "probe_cycle_ms_median": round(statistics.median(r.cycle_ms for r in timed), 3),
        "probe_draft_ms_median": round(statistics.median(r.draft_ms for r in timed), 3),
        "probe_verify_ms_median": round(statistics.median(r.verify_ms for r in timed), 3),
        "hot_path_us_per_step_plain": round(plain_us, 2),
        "hot_path_us_per_step_probed": round(probed_us, 2),
        "probe_added_us_per_step": round(probed_us - plain_us, 2),
        "probe_added_share_of_real_cycle": round((probed_us - plain_us) / (cycle_ms * 1000.0), 4),
    }
    if options.json:
        print(json.dumps(report))
    else:
        for key, value in report.items():
            print(f"{key:32} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
