"""The simulated vLLM 0.33 server: start-up with vLLM's lines in order (vllm.md §2), the
periodic stats lines (specmon.backends.vllm.sim.stats), faults ending as vLLM ends, readiness (the port
refuses connections until the engine is up), and the exit paths.

Start-up durations are the reference transcript's (Llama-3.3-70B + EAGLE-3, TP8: about three
minutes) times ``SPECMON_SIM_TIME_SCALE``; decode and the stats interval are real-time, and
decode runs the shared engine (specmon.sim.engine) and performance model (specmon.sim.perf).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specmon.backends.draft_wiring import DraftWiring, resolve, target_layer_count
from specmon.backends.vllm import draft_wiring as vllm_wiring
from specmon.backends.vllm.sim import failures
from specmon.backends.vllm.sim.args import VLLM_VERSION, LaunchFailure, VllmLaunch, check_launch
from specmon.backends.vllm.sim.logs import VllmLogWriter
from specmon.backends.vllm.sim.metrics import VllmMetrics
from specmon.backends.vllm.sim.stats import log_stats
from specmon.sim import perf, procs
from specmon.sim.engine import Engine
from specmon.sim.gpus import TOTAL_GIB
from specmon.sim.logwriter import default_bar
from specmon.sim.serving import SimServerBase, probe_path, run_to_exit

if TYPE_CHECKING:
    from specmon.backends.vllm.sim.http import VllmApi

DEFAULT_MAX_MODEL_LEN = 131072
DEFAULT_MAX_NUM_SEQS = 1024
DEFAULT_SHARDS = 30
TARGET_LAYERS = 80  # Llama-3.3-70B, the model of vllm.md's transcript: (2, 40, 77)
NCCL_VERSION = "2.28.9"
# A Llama-3.3-70B-shaped target: weights and KV per token split over the TP ranks.
TARGET_WEIGHTS_TOTAL_GIB = 138.64  # 17.33 GiB per rank at TP8
TARGET_PARAMS_B = 70.0
_PARAMS = re.compile(r"(?<![\w.])(\d{1,4}(?:\.\d{1,2})?)[bB](?![a-zA-Z])")


def weights_total_gib(model: str) -> float:
    """The target's bf16 weights: the 70B reference's, scaled by a size in the model's name
    (`Qwen3-0.6B`, `Llama-3.1-8B-Instruct`); the 70B's when the name gives none."""
    match = _PARAMS.search(model.rsplit("/", 1)[-1])
    params = float(match.group(1)) if match else TARGET_PARAMS_B
    return TARGET_WEIGHTS_TOTAL_GIB * max(params, 0.01) / TARGET_PARAMS_B


DRAFT_WEIGHTS_GIB = 0.24  # the EAGLE-3 head (one layer), per rank
KV_BYTES_PER_TOKEN_TOTAL = 81 * 8 * 128 * 2 * 2  # 80 target + 1 draft layers, 8 KV heads, K+V
ACTIVATION_PEAK_GIB = 2.6  # the profiling run's peak, kept out of the KV budget
GRAPH_POOL_GIB = 1.12
BLOCK_SIZE = 16
CRASH_AFTER_ITERATIONS = 40
SHM_WARNING_S = 60.0


@dataclass(frozen=True, slots=True)
class Durations:
    """Seconds each start-up step takes in the reference transcript (before the scale)."""

    resolve: float = 7.0
    engine_init: float = 6.0
    nccl: float = 12.0
    ranks: float = 2.0
    before_load: float = 1.0
    per_shard: float = 1.45
    draft_load: float = 0.6
    after_load: float = 1.5
    before_compile: float = 11.0
    dynamo: float = 6.1
    compile_graph: float = 27.4
    compile_rest: float = 3.3
    warmup: float = 1.8
    draft_compile: float = 13.0
    kv_profile: float = 5.0
    piecewise_graphs: float = 9.0
    full_graphs: float = 5.5
    engine_ready: float = 2.0
    api_ready: float = 3.0


class FatalStartup(Exception):
    """Start-up failed: ``worker`` (rank, traceback) if a worker failed, ``engine`` the
    EngineCore's own traceback."""

    def __init__(self, engine: str, worker: tuple[int, str] | None = None) -> None:
        super().__init__(engine.splitlines()[-1])
        self.engine = engine
        self.worker = worker


def draft_wiring(launch: VllmLaunch) -> DraftWiring | None:
    """The EAGLE-3 draft's auxiliary layers against those it was trained on (None: no EAGLE-3).

    DraftConfigError (one line) for an unusable draft ``config.json``.
    """
    spec = launch.spec
    if spec is None or spec.get("method") != "eagle3" or not spec.get("model"):
        return None
    return resolve(
        "vllm",
        str(spec["model"]),
        launch.env,
        target_layers=target_layer_count(launch.model, TARGET_LAYERS),
        version=VLLM_VERSION,
    )


class VllmServer(SimServerBase):
    """One simulated ``vllm serve``, from its first line to exit."""

    def __init__(
        self,
        launch: VllmLaunch,
        *,
        worker_pids: list[int],
        engine_pid: int,
        gpu_state_path: Path | None,
    ) -> None:
        self.launch = launch
        env = launch.env
        self.args = launch.args
        self.init_sim(
            env,
            default_shards=DEFAULT_SHARDS,
            gpu_state_path=gpu_state_path,
            local_gpus=launch.tp,
            child_pids=worker_pids,
        )
        self.stats_interval = float(env.get("VLLM_LOG_STATS_INTERVAL", "10") or 10)
        self.keep_alive_on_death = env.get("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "0") in ("1", "true")
        self.writer = VllmLogWriter()
        self.worker_pids = worker_pids
        self.engine_pid = engine_pid
        self.tp = launch.tp
        self.durations = Durations()
        self.max_model_len = self.args.max_model_len or DEFAULT_MAX_MODEL_LEN
        k = launch.num_speculative_tokens
        self.settings = perf.SpecSettings.from_launch(
            k, 1 if k else None, k + 1 if k else None, False, env
        )
        self.wiring = draft_wiring(launch)
        if self.wiring is not None and not self.wiring.matched:
            self.settings = replace(self.settings, miswired=True)
        self.status = "starting"  # starting -> ready -> shutting_down
        self.engine_dead = False  # /health answers 503 from then on
        self.started_at = time.time()
        self.kv_tokens = 0
        self.compile_seconds = 0.0
        self.engine = Engine(
            self.settings,
            self.writer,
            log_rank=0,
            decode_log_interval=1 << 30,
            max_running_requests=self.args.max_num_seqs or DEFAULT_MAX_NUM_SEQS,
            max_total_tokens=1,
            seed=self.seed + 1,
            probe_path=probe_path(env),
            on_decode_iteration=self._on_decode_iteration,
            on_busy=self._on_busy,
            on_event=self._on_engine_event,
            log_batches=False,
            vllm_probe_records=True,
        )
        self.metrics: VllmMetrics | None = VllmMetrics(
            launch.served_name,
            self.settings.num_steps if k else 0,
            max_model_len=self.max_model_len,
            engine_metrics=not self.args.disable_log_stats,  # the HTTP families stay
        )
        self.api: VllmApi | None = None
        self.load_started = time.time()
        self._exit_code = 0

    # --- log helpers ---------------------------------------------------------------------

    def worker(self, rank: int, site: str, message: str, level: str = "INFO") -> None:
        pid = self.worker_pids[rank] if rank < len(self.worker_pids) else os.getpid()
        self.writer.record(f"Worker_TP{rank}", pid, site, message, level)

    def each_worker(self, site: str, message_for_rank: Any) -> None:
        """Every TP worker logs its own copy, rank 0 near the top."""
        order = list(range(self.tp))
        self.rng.shuffle(order)
        order.remove(0)
        order.insert(self.rng.randrange(min(2, len(order) + 1)), 0)
        for rank in order:
            self.worker(rank, site, message_for_rank(rank))

    def core(self, site: str, message: str, level: str = "INFO") -> None:
        self.writer.record("EngineCore", self.engine_pid, site, message, level)

    def child_pids(self) -> list[int]:
        return [*self.worker_pids, self.engine_pid]

    def mem(self, rank: int) -> Any:
        return self.gpus.ranks[rank]

    # --- start-up ------------------------------------------------------------------------

    async def startup(self) -> None:
        d = self.durations
        args, launch = self.args, self.launch
        self.writer.api(
            "startup", f"vLLM server version {VLLM_VERSION}, serving model {launch.model}"
        )
        self.writer.api("args", f"non-default args: {launch.non_default}")
        check_launch(launch)  # LaunchFailure: the config is refused before the engine starts
        self.gpus.write("init")
        await self.pause(d.resolve)
        self.writer.api("arch", "Resolved architecture: LlamaForCausalLM")
        self.writer.api("max_len", f"Using max model len {self.max_model_len}")
        spec = launch.spec
        if spec is not None and spec.get("model"):
            self.writer.api("arch", f"Resolved architecture: {self._draft_arch()}")
        self.writer.api("chunked", "Chunked prefill is enabled with max_num_batched_tokens=8192.")
        await self.pause(d.engine_init)
        self.core(
            "engine",
            f"Initializing a V1 LLM engine (v{VLLM_VERSION}) with config: {self._config_text()}",
        )
        await self.pause(d.nccl)
        self.gpus.set_part("distributed", 0.55)
        self.gpus.write("init")
        first = self.worker_pids[0] if self.worker_pids else os.getpid()
        if self.tp > 1:
            self.writer.record("Worker", first, "nccl", f"vLLM is using nccl=={NCCL_VERSION}")
        await self.pause(d.ranks)
        self.writer.record(
            "Worker",
            first,
            "rank",
            f"rank 0 in world size {self.tp} is assigned as DP rank 0, PP rank 0, PCP rank 0, "
            "TP rank 0, ETP rank 0, EP rank N/A, EPLB rank N/A",
        )
        await self.pause(d.before_load)
        await self._load()
        if not args.enforce_eager:
            await self._compile()
        await self._allocate_kv()
        if not args.enforce_eager:
            await self._capture_graphs()
        await self.pause(d.engine_ready)
        elapsed = time.time() - self.load_started
        if args.enforce_eager:
            self.core(
                "init_engine",
                f"init engine (profile, create kv cache, warmup model) took {elapsed:.2f} s",
            )
        else:
            self.core(
                "init_engine",
                f"init engine (profile, create kv cache, warmup model) took {elapsed:.2f} s "
                f"(compilation: {self.compile_seconds:.2f} s)",
            )
        self.engine.max_total_tokens = self.kv_tokens
        await self.pause(d.api_ready)

    def _draft_arch(self) -> str:
        method = (self.launch.spec or {}).get("method")
        return {
            "eagle3": "Eagle3LlamaForCausalLM",
            "eagle": "EagleLlamaForCausalLM",
        }.get(str(method), "LlamaForCausalLM")

    def _config_text(self) -> str:
        model = self.launch.model
        spec = self.launch.spec
        spec_text = (
            "None"
            if spec is None
            else f"SpeculativeConfig(method={spec['method']!r}, model={spec.get('model')!r}, "
            f"num_spec_tokens={spec['num_speculative_tokens']})"
        )
        return (
            f"model={model!r}, speculative_config={spec_text}, tokenizer={model!r}, "
            "skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, "
            "tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, "
            f"max_seq_len={self.max_model_len}, download_dir=None, load_format=auto, "
            f"tensor_parallel_size={self.tp}, pipeline_parallel_size=1, data_parallel_size=1, "
            "disable_custom_all_reduce=False, quantization=None, enforce_eager="
            f"{self.args.enforce_eager}, kv_cache_dtype=auto, device_config=cuda, "
            f"served_model_name={self.launch.served_name}, enable_prefix_caching=True"
        )

    async def _load(self) -> None:
        d = self.durations
        self.worker(0, "load", "Loading model from scratch...")
        self.worker(
            0,
            "attn",
            "Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', "
            "'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].",
        )
        self.gpus.write("loading weights")
        self.load_started = started = time.time()
        budget = TOTAL_GIB * self.args.gpu_memory_utilization
        per_rank = weights_total_gib(self.launch.model) / self.tp
        fits = self.mem(0).used_gib + per_rank + ACTIVATION_PEAK_GIB < budget
        fail_at = self.shards * 3 // 5 if (self.fault and self.fault.at("oom", "load")) else None
        if fail_at is None and not fits:  # the weights alone exceed the budget
            fail_at = max(1, int(self.shards * (budget - self.mem(0).used_gib) / per_rank))
        self.writer.raw(_shard_bar(0, self.shards, 0.0))
        for shard in range(1, self.shards + 1):
            if self.hangs_at_shard(shard):
                await self.hang()
            await self.pause(d.per_shard * DEFAULT_SHARDS / self.shards)
            if fail_at is not None and shard >= fail_at:
                total = TOTAL_GIB - 0.59
                raise FatalStartup(
                    failures.engine_after_worker(""),
                    (0, failures.load_oom(0, per_rank / self.shards * 2, total, 312.0)),
                )
            self.gpus.set_part("weights", per_rank * shard / self.shards)
            self.gpus.set_util(4.0)
            self.gpus.write(min_interval=0.2)
            self.writer.raw(_shard_bar(shard, self.shards, time.time() - started))
        target_seconds = time.time() - started
        self.gpus.set_util(0.0)
        self.worker(0, "weights", f"Loading weights took {target_seconds:.2f} seconds")
        spec = self.launch.spec
        if spec is not None and spec.get("model"):
            draft_started = time.time()
            await self.pause(d.draft_load)
            self.gpus.set_part("draft_weights", DRAFT_WEIGHTS_GIB)
            self.writer.raw(_shard_bar(1, 1, time.time() - draft_started))
            self.worker(
                0, "weights", f"Loading weights took {time.time() - draft_started:.2f} seconds"
            )
            if self.wiring is not None:
                self.worker(0, "aux", vllm_wiring.startup_line(self.wiring.in_effect))
        await self.pause(d.after_load)
        self.gpus.write("weights loaded")
        self.each_worker(
            "loaded",
            lambda r: (
                f"Model loading took {self.mem(r).parts['weights'] + self.mem(r).parts.get('draft_weights', 0.0):.2f} "
                f"GiB memory and {time.time() - started + self.rng.uniform(0, 0.3):.6f} seconds"
            ),
        )

    async def _compile(self) -> None:
        d = self.durations
        await self.pause(d.before_compile)
        started = time.time()
        self.gpus.write("torch.compile")
        self.worker(0, "compile_start", "[backbone] Starting torch.compile")
        self.worker(
            0,
            "compile_cache",
            "[backbone] Using cache directory: /root/.cache/vllm/torch_compile_cache/"
            "3f9c1e2a7b/rank_0_0/backbone for vLLM's torch.compile",
        )
        await self.pause(d.dynamo)
        self.worker(
            0, "dynamo", f"[backbone] Dynamo bytecode transform time: {time.time() - started:.2f} s"
        )
        self.worker(
            0,
            "compile_range",
            "[backbone] Cache the graph of compile range (1, 8192) for later use",
        )
        graph_started = time.time()
        self.gpus.set_util(30.0)
        await self.pause(d.compile_graph)
        self.worker(
            0,
            "compiling",
            "[backbone] Compiling a graph for compile range (1, 8192) takes "
            f"{time.time() - graph_started:.2f} s",
        )
        await self.pause(d.compile_rest)
        backbone = time.time() - started
        self.each_worker(
            "compile_total",
            lambda r: (
                f"[backbone] torch.compile took "
                f"{backbone + self.rng.uniform(0, 0.2):.2f} s in total"
            ),
        )
        warmup_started = time.time()
        await self.pause(d.warmup)
        self.worker(
            0,
            "warmup",
            f"[backbone] Initial profiling/warmup run took {time.time() - warmup_started:.2f} s",
        )
        self.compile_seconds = backbone
        spec = self.launch.spec
        if spec is not None and spec.get("model"):
            head_started = time.time()
            await self.pause(d.draft_compile)
            head = time.time() - head_started
            self.compile_seconds += head
            self.each_worker(
                "compile_total", lambda r: f"[eagle_head] torch.compile took {head:.2f} s in total"
            )
        self.gpus.set_util(0.0)
        self.gpus.write()

    async def _allocate_kv(self) -> None:
        d = self.durations
        await self.pause(d.kv_profile)
        budget = TOTAL_GIB * self.args.gpu_memory_utilization
        graphs = 0.0 if self.args.enforce_eager else GRAPH_POOL_GIB
        kv_gib = budget - self.mem(0).used_gib - ACTIVATION_PEAK_GIB - graphs
        bytes_per_token = KV_BYTES_PER_TOKEN_TOTAL / self.tp
        needed_gib = self.max_model_len * bytes_per_token / (1 << 30)
        if self.fault and self.fault.at("oom", "kv"):
            kv_gib = min(kv_gib, needed_gib * 0.4)
        util = self.args.gpu_memory_utilization
        self.each_worker("kv_mem", lambda r: f"Available KV cache memory: {kv_gib:.2f} GiB")
        self.each_worker(
            "graph_profile",
            lambda r: (
                "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
                f"--gpu-memory-utilization={util:.4f} is equivalent to "
                f"--gpu-memory-utilization={util - 0.0081:.4f} without CUDA graph memory "
                "profiling."
            ),
        )
        if kv_gib <= 0:
            raise FatalStartup(failures.engine_init(failures.NO_CACHE_MEMORY))
        tokens = int(kv_gib * (1 << 30) / bytes_per_token) // BLOCK_SIZE * BLOCK_SIZE
        if tokens < self.max_model_len:
            raise FatalStartup(
                failures.engine_init(
                    failures.kv_too_small(
                        self.max_model_len, needed_gib, kv_gib, tokens // BLOCK_SIZE * BLOCK_SIZE
                    )
                )
            )
        self.kv_tokens = tokens
        if self.metrics is not None:
            self.metrics.set_cache_config(
                {
                    "block_size": str(BLOCK_SIZE),
                    "effective_attention_block_size": str(BLOCK_SIZE),
                    "gpu_memory_utilization": str(util),
                    "num_gpu_blocks": str(tokens // BLOCK_SIZE),
                    "kv_cache_size_tokens": str(tokens),
                    "kv_cache_max_concurrency": str(round(tokens / self.max_model_len, 2)),
                }
            )
        self.gpus.set_part("kv", tokens * bytes_per_token / (1 << 30))
        self.gpus.write("kv cache")
        self.core(
            "kv_size",
            f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for "
            f"{self.max_model_len:,} tokens per request: {tokens / self.max_model_len:.2f}x",
        )

    async def _capture_graphs(self) -> None:
        d = self.durations
        self.gpus.write("cuda graphs")
        if self.fault and self.fault.at("hang", "graphs"):
            await self.hang()
        started = time.time()
        self.gpus.set_util(35.0)
        for mode, count, seconds in (
            ("PIECEWISE", 51, d.piecewise_graphs),
            ("FULL", 35, d.full_graphs),
        ):
            bar_started = time.time()
            steps = 5
            for step in range(steps + 1):
                if step:
                    await self.pause(seconds / steps)
                if self.fault and self.fault.at("nccl", "graphs") and mode == "FULL":
                    rank = self.tp - 1
                    raise FatalStartup(
                        failures.engine_after_worker(failures.NCCL_ERROR.split(": ", 1)[1]),
                        (rank, failures.worker_nccl()),
                    )
                done = count * step // steps
                self.gpus.set_part("graphs", GRAPH_POOL_GIB * done / count)
                self.gpus.write(min_interval=0.2)
                self.writer.raw(
                    "\r"
                    + default_bar(
                        f"Capturing CUDA graphs ({mode})", done, count, time.time() - bar_started
                    )
                    + ("\n" if step == steps else "")
                )
        self.gpus.set_util(0.0)
        self.gpus.write()
        seconds = time.time() - started
        self.each_worker(
            "graphs",
            lambda r: (
                f"Graph capturing finished in {seconds:.0f} secs, took {GRAPH_POOL_GIB:.2f} GiB"
            ),
        )

    # --- serving -------------------------------------------------------------------------

    def _display_host(self) -> str:
        host = self.args.host
        return "0.0.0.0" if host in (None, "") else host

    async def serve(self) -> None:
        assert self.api is not None
        self.writer.api("tasks", "Supported tasks: ['generate']")
        self.writer.api(
            "serving", f"Starting vLLM server on http://{self._display_host()}:{self.args.port}"
        )
        self.writer.api("routes", "Available routes are:")
        for path, methods in self.api.route_listing():
            self.writer.api("route", f"Route: {path}, Methods: {methods}")
        self.writer.uvicorn(f"Started server process [{os.getpid()}]")
        self.writer.uvicorn("Waiting for application startup.")
        self._tasks.append(asyncio.create_task(self.engine.run()))
        if not self.args.disable_log_stats:
            self._tasks.append(
                asyncio.create_task(log_stats(self.engine, self.stats_interval, self.writer.api))
            )
        assert self.http is not None
        await self.http.start()
        self.writer.uvicorn("Application startup complete.")
        self.status = "ready"
        self.gpus.write("ready")
        await self._stop.wait()

    # --- engine callbacks ----------------------------------------------------------------

    def _on_decode_iteration(self, iteration: int) -> None:
        if self.status != "ready" or self.fault is None or iteration != CRASH_AFTER_ITERATIONS:
            return
        if self.fault.at("hang", "decode"):
            self.engine.hung = True
            self._tasks.append(asyncio.get_running_loop().create_task(self._shm_warnings()))
        elif self.fault.kind == "crash":
            self._engine_died(segv=self.fault.where == "segv")

    async def _shm_warnings(self) -> None:
        """A hung worker: the engine core warns every minute, requests never finish."""
        while True:
            await asyncio.sleep(SHM_WARNING_S)
            self.core("shm", failures.SHM_WAIT, "WARNING")

    def _engine_died(self, *, segv: bool) -> None:
        """A worker failed mid-decode: the chain of errors vLLM prints, requests fail with
        500, /health answers 503, and the server shuts down (unless told to keep alive)."""
        self.engine.hung = True
        self.engine_dead = True
        if segv:
            for pid in self.worker_pids[:1]:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            self.core(
                "worker_died",
                "Worker proc VllmWorker-0 died unexpectedly (exit code: -11), shutting down "
                "executor.",
                "ERROR",
            )
            error = "Worker proc VllmWorker-0 died unexpectedly"
        else:
            self.worker(
                0,
                "worker_exception",
                "WorkerProc hit an exception.\n" + failures.decode_crash(),
                "ERROR",
            )
            error = "CUDA error: an illegal memory access was encountered"
        self.core(
            "core_fatal",
            "EngineCore encountered a fatal error.\n" + failures.engine_fatal(error),
            "ERROR",
        )
        self.writer.api("output_handler", failures.output_handler(), "ERROR")
        self.engine.flush_probe()
        self.gpus.set_util(0.0)
        self.gpus.write("failed")
        self.engine.abort_all()  # their handlers see engine_dead and answer 500
        if not self.keep_alive_on_death:
            self._exit_code = 1
            asyncio.get_running_loop().call_later(0.2, self._begin_shutdown)

    # --- exits ---------------------------------------------------------------------------

    async def _shutdown(self, signum: int) -> None:
        """vLLM exits as uvicorn does, whatever the signal (or an engine death)."""
        await self.uvicorn_shutdown()

    def fail(self, error: FatalStartup) -> None:
        """The engine failed to start: the worker's traceback (the root cause), the engine
        core's, then the API server's uncaught RuntimeError on stderr."""
        if error.worker is not None:
            rank, text = error.worker
            self.worker(rank, "worker_failed", "WorkerProc failed to start.\n" + text, "ERROR")
        self.core("core_failed", "EngineCore failed to start.\n" + error.engine, "ERROR")
        self.writer.raw(failures.api_server_init())
        self.gpus.set_util(0.0)
        self.gpus.write("failed")
        self._kill_children()

    def _kill_children(self) -> None:
        for pid in [*self.worker_pids, self.engine_pid]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    async def run(self) -> int:
        from specmon.backends.vllm.sim.http import VllmApi
        from specmon.sim.asgi import UvicornServing

        self.install_signals(asyncio.get_running_loop())
        # vLLM binds its socket before starting the engine and listens once it is ready:
        # connections are refused while loading, and a taken port fails at once.
        self.api = VllmApi(self)
        self.http = UvicornServing(
            self.api.app(), self._display_host(), self.args.port, self.writer
        )
        try:
            self.http.bind()
        except OSError as error:
            self.writer.raw(
                failures.launch_error(f"OSError: [Errno {error.errno}] {error.strerror}")
            )
            self._kill_children()
            return 1
        try:
            await self.startup()
        except LaunchFailure as failure:
            self.writer.raw(failures.launch_error(failure.text))
            self._kill_children()
            return 1
        except FatalStartup as error:
            self.fail(error)
            return 1
        try:
            await self.serve()
        finally:
            await self.wind_down()
            self._kill_children()
        return self._exit_code


def _shard_bar(n: int, total: int, elapsed: float) -> str:
    """vLLM's _BAR_FORMAT: one line per update on stderr (its format ends in a newline)."""
    from specmon.sim.logwriter import safetensors_bar

    return safetensors_bar(n, total, elapsed) + "\n"


def main_entry(launch: VllmLaunch, gpu_state_path: Path | None) -> int:
    """Fork the EngineCore and worker processes, then run the API server to the end."""
    engine_pids = procs.spawn_rank_processes(1, name="VLLM::EngineCor")
    worker_pids = procs.spawn_rank_processes(launch.tp, name="VLLM::Worker_TP")
    server = VllmServer(
        launch, worker_pids=worker_pids, engine_pid=engine_pids[0], gpu_state_path=gpu_state_path
    )
    code = run_to_exit(server)
    sys.stdout.flush()
    return code
