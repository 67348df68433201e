"""The simulated SGLang server: start-up phases with SGLang's log lines, faults, warm-up,
readiness, the HTTP API, and SGLang's signal handling.

Start-up durations are a real host's (about 15 minutes for 64 shards) times
``SPECMON_SIM_TIME_SCALE``; decode is always real-time (see specmon.sim.engine).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specmon.backends.draft_wiring import DraftWiring, resolve, target_layer_count
from specmon.backends.sglang.sim.args import SimLaunch, env_true
from specmon.backends.sglang.sim.metrics import VERSION_ENV, SimMetrics, StartupFacts, parse_version
from specmon.sim import faults, perf, procs
from specmon.sim.engine import Engine
from specmon.sim.logwriter import LogWriter, default_bar, safetensors_bar
from specmon.sim.rendezvous import (
    DEFAULT_TIMEOUT_S,
    PEER_LOST,
    PEER_LOST_ENV,
    TIMEOUT_ENV,
    Rendezvous,
    RendezvousError,
    parse_init_addr,
)
from specmon.sim.serving import SimServerBase, probe_path, run_to_exit

# The HTTP stack (starlette and uvicorn, then httpx for the warm-up: ~100 ms of imports)
# loads on a thread while the simulated start-up runs; serve() waits for it without blocking
# the event loop (an import on the loop's thread would stall /health during warm-up).
HTTP_SERVER_MODULE = "specmon.backends.sglang.sim.http"
WARM_UP_MODULE = "specmon.backends.sglang.sim.warmup"


def _load_http_stack(server_loaded: threading.Event) -> None:
    try:
        importlib.import_module(HTTP_SERVER_MODULE)
    finally:
        server_loaded.set()
    # httpx's package imports its command-line client (rich, click, pygments: half of its
    # import time) and falls back to a stub when that import fails; the simulator never
    # runs it, so it takes the fallback.
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]
    importlib.import_module(WARM_UP_MODULE)


SGLANG_VERSION = "0.5.9"  # the default; SPECMON_SIM_SGLANG_VERSION picks another (metrics)
TARGET_CONTEXT_LEN = 262144
TARGET_LAYERS = 61  # Kimi-K2.5 (text_config.num_hidden_layers)
DRAFT_DERIVED_CONTEXT_LEN = 8192
KV_BYTES_PER_TOKEN = 61 * 576 * 2  # MLA: 61 layers x (512 + 64) bf16 values
DRAFT_KV_BYTES_PER_TOKEN = 256  # one Llama layer, 8 KV heads x 128 over TP8, bf16, K or V
KV_SHARE_OF_POOL = 0.84  # of the memory pool; the rest is kept for the draft and graphs
DEFAULT_MEM_FRACTION_STATIC = 0.85
DRAIN_LIMIT_S = 30.0


@dataclass(frozen=True, slots=True)
class Durations:
    """Seconds each start-up step takes on the real host (before the time scale)."""

    before_init: float = 13.0
    init_distributed: float = 3.9
    before_load: float = 2.0
    per_shard: float = 12.5
    before_kv: float = 1.5
    before_graphs: float = 2.0
    target_graphs: float = 21.4
    draft_init: float = 1.0
    draft_load: float = 2.1
    draft_kv: float = 0.5
    draft_graphs: float = 6.0
    draft_extend_graphs: float = 4.9
    scheduler_info: float = 1.0
    uvicorn: float = 3.0


# Target memory per rank (GiB), from the reference transcript (Kimi-K2.5, TP8).
TARGET_WEIGHTS_GIB = 73.71
INIT_DISTRIBUTED_GIB = 1.12
TARGET_GRAPHS_GIB = 2.55
DRAFT_WEIGHTS_GIB = 0.46
DRAFT_GRAPHS_GIB = 0.45
DRAFT_EXTEND_GRAPHS_GIB = 0.21
MEMORY_POOL_EXTRA_GIB = 0.29


class FatalStartup(Exception):
    """A scheduler failed: ``text`` per failing rank, then the launcher kills the tree."""

    def __init__(self, text: str, ranks: list[int | None]) -> None:
        super().__init__(text.splitlines()[-1] if text else "")
        self.text = text
        self.ranks = ranks


def draft_wiring(launch: SimLaunch, version: str | None = None) -> DraftWiring | None:
    """The EAGLE-3 draft's auxiliary layers against those it was trained on (None: no EAGLE-3).

    DraftConfigError (one line) for an unusable draft ``config.json``.
    """
    args = launch.args
    if not launch.speculative or args.speculative_algorithm != "EAGLE3":
        return None
    return resolve(
        "sglang",
        args.speculative_draft_model_path,
        launch.env,
        target_layers=target_layer_count(args.model_path, TARGET_LAYERS),
        version=version,
    )


def model_profile(model_path: str) -> dict[str, Any]:
    """What the simulated target looks like (Kimi-K2.5 is a VLM: warm-up uses chat)."""
    lowered = model_path.lower()
    vlm = "k2.5" in lowered or "k25" in lowered or "-vl" in lowered
    return {
        "architecture": "KimiK25ForConditionalGeneration",
        "model_type": "kimi_k25",
        "has_image_understanding": vlm,
    }


class SimServer(SimServerBase):
    """One simulated launch, from ``server_args=`` to exit."""

    def __init__(
        self, launch: SimLaunch, *, rank_pids: list[int], gpu_state_path: Path | None
    ) -> None:
        self.launch = launch
        args = launch.args
        env = launch.env
        self.local_tp = args.tp_size // args.nnodes  # the TP ranks this node runs
        self.init_sim(
            env,
            default_shards=64,
            gpu_state_path=gpu_state_path,
            local_gpus=self.local_tp,
            child_pids=rank_pids,
        )
        self.health_check_timeout = float(env.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20") or 20)
        self.writer = LogWriter()
        self.rank_pids = rank_pids
        self.tp = args.tp_size
        self.rank_base = args.node_rank * self.local_tp  # node 1 of 2x8 runs TP8..TP15
        self.ranks: list[int | None] = (
            list(range(self.rank_base, self.rank_base + self.local_tp)) if self.tp > 1 else [None]
        )
        self.rendezvous = self._rendezvous(args, env)
        self.durations = Durations()
        self.settings = perf.SpecSettings.from_launch(
            args.speculative_num_steps if launch.speculative else None,
            args.speculative_eagle_topk if launch.speculative else None,
            args.speculative_num_draft_tokens if launch.speculative else None,
            args.disable_custom_all_reduce,
            env,
        )
        self.status = "starting"  # starting -> ready -> shutting_down
        self.started_at = time.time()
        self.version = parse_version(env.get(VERSION_ENV))
        self.wiring = draft_wiring(launch, self.version)
        if self.wiring is not None and not self.wiring.matched:
            self.settings = replace(self.settings, miswired=True)
        self.load_seconds = 0.0
        self.draft_load_seconds = 0.0
        self.kv_seconds = 0.0
        self.graph_seconds: dict[str, float] = {}  # by SGLang's capture phase
        self.graph_gib: dict[str, float] = {}
        self.max_total_num_tokens = 0
        self.context_len = args.context_length or TARGET_CONTEXT_LEN
        self.capture_bs: list[int] = []
        self.metrics: SimMetrics | None = None
        self.last_heartbeat = time.time()
        self.engine = Engine(
            self.settings,
            self.writer,
            log_rank=self.ranks[0],
            decode_log_interval=args.decode_log_interval,
            max_running_requests=args.max_running_requests or 48,
            max_total_tokens=1,
            seed=self.seed + 1,
            probe_path=probe_path(env),
            on_decode_iteration=self._on_decode_iteration,
            on_busy=self._on_busy,
            on_event=self._on_engine_event,
        )
        self._ready_iterations = 0
        self._http_server_loaded = threading.Event()
        self._http_stack = threading.Thread(
            target=_load_http_stack, args=(self._http_server_loaded,), daemon=True
        )
        self._http_stack.start()  # after the rank forks (main_entry), before the event loop

    # --- helpers ---------------------------------------------------------------------------

    def child_pids(self) -> list[int]:
        return self.rank_pids

    def each_rank(self, message_for_rank: Any) -> None:
        """Every TP rank logs its own copy, in the order the processes happen to get there."""
        order = list(self.ranks)
        self.rng.shuffle(order)
        if None not in order and 0 in order:  # rank 0 tends to be first; keep it near the top
            order.remove(0)
            order.insert(self.rng.randrange(min(3, len(order) + 1)), 0)
        for rank in order:
            self.writer.rank(rank, message_for_rank(rank))

    def mem(self, rank: int | None) -> Any:
        return self.gpus.ranks[(rank or self.rank_base) - self.rank_base]

    def _rendezvous(self, args: Any, env: dict[str, str]) -> Rendezvous | None:
        """This node's side of the meeting at --dist-init-addr (None on a single node)."""
        if args.nnodes <= 1:
            return None
        host, port = parse_init_addr(args.dist_init_addr)
        timeout = env.get(TIMEOUT_ENV)
        return Rendezvous(
            nnodes=args.nnodes,
            node_rank=args.node_rank,
            host=host,
            port=port,
            ranks_per_node=self.local_tp,
            # Scaled like the rest of start-up, but never below a minute: the other nodes'
            # launches (ssh, python start-up) take real time whatever the scale.
            timeout_s=float(timeout) if timeout else max(DEFAULT_TIMEOUT_S * self.scale, 60.0),
        )

    def _on_peer_lost(self) -> None:
        """Another node's process is gone: after SPECMON_SIM_PEER_LOST_S (default at once;
        NCCL's watchdog can take minutes), NCCL's error on this node's ranks, then the exit
        SGLang's launcher takes when a scheduler fails (SIGQUIT, tree killed)."""
        delay = float(self.launch.env.get(PEER_LOST_ENV, "0") or 0)
        if delay > 0:
            asyncio.get_running_loop().call_later(delay, self._die_of_lost_peer)
        else:
            self._die_of_lost_peer()

    def _die_of_lost_peer(self) -> None:
        if self.status == "shutting_down":
            return
        self.writer.enabled = True
        for rank in self.ranks:
            self.writer.rank(rank, PEER_LOST)
        self.writer.main(faults.SIGQUIT_LAUNCH)
        self.engine.flush_probe()
        self.gpus.set_util(0.0)
        self.gpus.write("failed")
        procs.kill_process_tree(self.rank_pids)

    # --- start-up --------------------------------------------------------------------------

    async def startup(self) -> None:
        d = self.durations
        args = self.launch.args
        self.writer.main(f"server_args={self._server_args_repr()}")
        self.gpus.write("init")
        await self.pause(d.before_init)
        self.each_rank(lambda r: "Init torch distributed begin.")
        init_started = time.time()
        await self.pause(d.init_distributed)
        if self.rendezvous is not None:
            try:
                await self.rendezvous.meet()
            except RendezvousError as error:
                raise FatalStartup(error.text + "\n", list(self.ranks)) from None
            self.rendezvous.watch(self._on_peer_lost)
        self.gpus.set_part("distributed", INIT_DISTRIBUTED_GIB)
        self.each_rank(
            lambda r: (
                f"Init torch distributed ends. elapsed={time.time() - init_started:.2f} s, "
                f"mem usage={INIT_DISTRIBUTED_GIB:.2f} GB"
            )
        )
        self.gpus.write("init")
        self.init_avail = {r: self.mem(r).avail_gib for r in self.ranks}
        await self.pause(d.before_load)
        await self._load_target()
        await self._allocate_kv(args.mem_fraction_static or DEFAULT_MEM_FRACTION_STATIC)
        await self._capture_target_graphs()
        if self.launch.speculative:
            await self._load_draft()
        self.writer.rank(
            self.ranks[0],
            f"max_total_num_tokens={self.max_total_num_tokens}, chunked_prefill_size="
            f"{args.chunked_prefill_size or 8192}, max_prefill_tokens={args.max_prefill_tokens}, "
            f"max_running_requests={args.max_running_requests or 48}, "
            f"context_len={self.context_len}, "
            f"available_gpu_mem={self.mem(self.ranks[0]).avail_gib:.2f} GB",
        )
        self.engine.max_total_tokens = self.max_total_num_tokens
        await self.pause(d.scheduler_info + d.uvicorn)

    def _server_args_repr(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self.launch.server_args_dict().items())
        return f"ServerArgs({fields})"

    async def _load_target(self) -> None:
        d = self.durations
        self.each_rank(lambda r: f"Load weight begin. avail mem={self.mem(r).avail_gib:.2f} GB")
        self.gpus.write("loading weights")
        started = time.time()
        self.writer.raw("\r" + safetensors_bar(0, self.shards, 0.0) + "\n")
        fail_at = self.shards * 3 // 5
        for shard in range(1, self.shards + 1):
            if self.hangs_at_shard(shard):
                await self.hang()
            await self.pause(d.per_shard * 64 / self.shards)
            if self.fault and self.fault.at("oom", "load") and shard == fail_at:
                raise FatalStartup(self._oom_text("load", 0, 1.15), [self.ranks[0]])
            share = TARGET_WEIGHTS_GIB * shard / self.shards
            for rank in self.ranks:
                self.gpus.set_part(
                    "weights",
                    share + (0.02 if rank == 0 else 0.0),
                    range((rank or 0) - self.rank_base, (rank or 0) - self.rank_base + 1),
                )
            self.gpus.set_util(4.0)
            self.gpus.write(min_interval=0.2)
            self.writer.raw(
                "\r" + safetensors_bar(shard, self.shards, time.time() - started) + "\n"
            )
        self.writer.raw(
            "\r" + safetensors_bar(self.shards, self.shards, time.time() - started) + "\n\n"
        )
        self.load_seconds = time.time() - started
        self.gpus.set_util(0.0)
        self.gpus.write()
        self.each_rank(
            lambda r: (
                f"Load weight end. elapsed={time.time() - started:.2f} s, "
                f"type={model_profile(self.launch.args.model_path)['architecture']}, "
                f"dtype=torch.bfloat16, avail mem={self.mem(r).avail_gib:.2f} GB, "
                f"mem usage={self.mem(r).parts['weights']:.2f} GB."
            )
        )

    def _oom_text(self, where: str, gpu: int, tried_gib: float) -> str:
        rank = self.mem(gpu)
        free_mib = self.rng.uniform(180.0, 900.0)
        return faults.oom_traceback(
            where,
            gpu,
            tried_gib,
            total_gib=rank.used_gib + rank.avail_gib - 0.59,
            free_mib=free_mib,
            in_use_gib=rank.used_gib + rank.avail_gib - 0.59 - free_mib / 1024,
        )

    async def _allocate_kv(self, mem_fraction_static: float) -> None:
        d = self.durations
        started = time.time()
        await self.pause(d.before_kv)
        rank0 = self.ranks[0]
        pool_gib = self.mem(rank0).avail_gib - self.init_avail[rank0] * (1 - mem_fraction_static)
        kv_gib = pool_gib * KV_SHARE_OF_POOL
        if self.fault and self.fault.at("oom", "kv"):
            raise FatalStartup(self._oom_text("kv", 0, max(kv_gib, 1.0)), list(self.ranks))
        tokens = int(kv_gib * (1 << 30) / KV_BYTES_PER_TOKEN)
        if tokens <= 0:
            raise FatalStartup(
                faults.not_enough_memory_traceback(mem_fraction_static), list(self.ranks)
            )
        kv_gib = tokens * KV_BYTES_PER_TOKEN / (1 << 30)
        self.max_total_num_tokens = tokens
        self.kv_seconds = time.time() - started
        self.gpus.set_part("kv", kv_gib + MEMORY_POOL_EXTRA_GIB)
        self.gpus.write("kv cache")
        self.each_rank(
            lambda r: f"KV Cache is allocated. #tokens: {tokens}, KV size: {kv_gib:.2f} GB"
        )
        self.each_rank(lambda r: f"Memory pool end. avail mem={self.mem(r).avail_gib:.2f} GB")

    def _capture_sizes(self) -> list[int]:
        args = self.launch.args
        if args.cuda_graph_bs:
            return sorted(set(args.cuda_graph_bs))
        max_bs = args.cuda_graph_max_bs or (args.max_running_requests or 48)
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8)]
        return [bs for bs in sizes if bs <= max_bs] or [1]

    async def _capture(self, seconds: float, graph_gib: float, part: str, label: str) -> None:
        """tqdm's capture bar on TP0 (largest batch first), memory growing as graphs land."""
        sizes = sorted(self.capture_bs, reverse=True)
        started = time.time()
        rank0 = self.ranks[0]

        def desc(bs: int) -> str:
            return f"Capturing batches (bs={bs} avail_mem={self.mem(rank0).avail_gib:.2f} GB)"

        self.writer.raw("\r" + default_bar(desc(sizes[0]), 0, len(sizes), 0.0))
        self.gpus.set_util(35.0)
        for done, bs in enumerate(sizes, start=1):
            await self.pause(seconds / len(sizes))
            self.gpus.set_part(part, graph_gib * done / len(sizes))
            self.gpus.write(label, min_interval=0.2)
            next_bs = sizes[done] if done < len(sizes) else bs
            self.writer.raw(
                "\r" + default_bar(desc(next_bs), done, len(sizes), time.time() - started)
            )
        self.writer.raw(
            "\r"
            + default_bar(desc(sizes[-1]), len(sizes), len(sizes), time.time() - started)
            + "\n"
        )
        self.gpus.set_util(0.0)
        self.gpus.write()
        target = "target_verify" if self.launch.speculative else "decode"
        phase = {"graphs": target, "draft_graphs": "draft_decode"}.get(part, "draft_extend")
        self.graph_seconds[phase] = time.time() - started
        self.graph_gib[phase] = graph_gib

    async def _capture_target_graphs(self) -> None:
        d = self.durations
        await self.pause(d.before_graphs)
        self.capture_bs = self._capture_sizes()
        self.each_rank(
            lambda r: (
                "Capture cuda graph begin. This can take up to several minutes. "
                f"avail mem={self.mem(r).avail_gib:.2f} GB"
            )
        )
        self.gpus.write("target graphs")
        if self.fault and self.fault.at("hang", "graphs"):
            await self.hang()
        self.writer.rank(self.ranks[0], f"Capture cuda graph bs {self.capture_bs}")
        started = time.time()
        if self.fault and self.fault.at("nccl", "graphs"):
            await self.pause(d.target_graphs / 3)
            raise FatalStartup(faults.nccl_traceback(), [self.ranks[-1]])
        await self._capture(d.target_graphs, TARGET_GRAPHS_GIB, "graphs", "target graphs")
        self.each_rank(
            lambda r: (
                f"Capture cuda graph end. Time elapsed: {time.time() - started:.2f} s. "
                f"mem usage={TARGET_GRAPHS_GIB:.2f} GB. avail mem={self.mem(r).avail_gib:.2f} GB."
            )
        )

    async def _load_draft(self) -> None:
        d = self.durations
        env = self.launch.env
        await self.pause(d.draft_init)
        if self.context_len > DRAFT_DERIVED_CONTEXT_LEN:
            if not env_true(env, "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"):
                raise FatalStartup(
                    faults.context_length_traceback(self.context_len, DRAFT_DERIVED_CONTEXT_LEN),
                    list(self.ranks),
                )
            self.each_rank(
                lambda r: (
                    f"Warning: Target model's context_length ({self.context_len}) is greater "
                    f"than the derived context_length ({DRAFT_DERIVED_CONTEXT_LEN}). This may lead to "
                    "incorrect model outputs or CUDA errors. Note that the derived context_length may "
                    "differ from max_position_embeddings in the model's config."
                )
            )
            self.each_rank(
                lambda r: (
                    f"Overriding the draft model's max_position_embeddings to {self.context_len}."
                )
            )
        self.each_rank(lambda r: "Init torch distributed begin.")
        self.each_rank(lambda r: "Init torch distributed ends. elapsed=0.00 s, mem usage=0.00 GB")
        self.each_rank(lambda r: f"Load weight begin. avail mem={self.mem(r).avail_gib:.2f} GB")
        self.gpus.write("draft weights")
        started = time.time()
        self.writer.raw("\r" + safetensors_bar(0, 1, 0.0) + "\n")
        await self.pause(d.draft_load)
        self.gpus.set_part("draft_weights", DRAFT_WEIGHTS_GIB)
        self.writer.raw("\r" + safetensors_bar(1, 1, time.time() - started) + "\n")
        self.writer.raw("\r" + safetensors_bar(1, 1, time.time() - started) + "\n\n")
        self.draft_load_seconds = time.time() - started
        self.each_rank(
            lambda r: (
                f"Load weight end. elapsed={time.time() - started:.2f} s, "
                f"type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, "
                f"avail mem={self.mem(r).avail_gib:.2f} GB, mem usage={DRAFT_WEIGHTS_GIB:.2f} GB."
            )
        )
        await self.pause(d.draft_kv)
        tokens = self.max_total_num_tokens
        half_gib = tokens * DRAFT_KV_BYTES_PER_TOKEN / (1 << 30)
        self.gpus.set_part("draft_kv", 2 * half_gib + 0.02)
        self.each_rank(
            lambda r: (
                f"KV Cache is allocated. #tokens: {tokens}, K size: {half_gib:.2f} GB, "
                f"V size: {half_gib:.2f} GB"
            )
        )
        self.each_rank(lambda r: f"Memory pool end. avail mem={self.mem(r).avail_gib:.2f} GB")
        self.gpus.write("draft graphs")
        steps = self.launch.args.speculative_num_steps
        if steps > 1:
            started = time.time()
            self.each_rank(
                lambda r: (
                    "Capture draft cuda graph begin. This can take up to several minutes. "
                    f"avail mem={self.mem(r).avail_gib:.2f} GB"
                )
            )
            await self._capture(d.draft_graphs, DRAFT_GRAPHS_GIB, "draft_graphs", "draft graphs")
            self.each_rank(
                lambda r: (
                    f"Capture draft cuda graph end. Time elapsed: {time.time() - started:.2f} s. "
                    f"mem usage={DRAFT_GRAPHS_GIB:.2f} GB. avail mem={self.mem(r).avail_gib:.2f} GB."
                )
            )
        started = time.time()
        self.each_rank(
            lambda r: (
                "Capture draft extend cuda graph begin. This can take up to several minutes. "
                f"avail mem={self.mem(r).avail_gib:.2f} GB"
            )
        )
        await self._capture(
            d.draft_extend_graphs, DRAFT_EXTEND_GRAPHS_GIB, "draft_extend_graphs", "draft graphs"
        )
        self.each_rank(
            lambda r: (
                f"Capture draft extend cuda graph end. Time elapsed: {time.time() - started:.2f} s. "
                f"mem usage={DRAFT_EXTEND_GRAPHS_GIB:.2f} GB. avail mem={self.mem(r).avail_gib:.2f} GB."
            )
        )

    # --- serving ---------------------------------------------------------------------------

    async def serve(self) -> None:
        """SGLang's HTTP server: uvicorn starts listening only now, after loading."""
        await asyncio.to_thread(self._http_server_loaded.wait)
        from specmon.backends.sglang.sim.http import SGLangApi
        from specmon.sim.asgi import UvicornServing

        args = self.launch.args
        self.writer.uvicorn(f"Started server process [{os.getpid()}]")
        self.writer.uvicorn("Waiting for application startup.")
        if args.enable_metrics:
            self.metrics = SimMetrics(
                args.served_model_name or args.model_path, self._startup_facts(), self.version
            )
        self._tasks.append(asyncio.create_task(self.engine.run()))
        self.http = UvicornServing(SGLangApi(self).app(), args.host, args.port, self.writer)
        await self.http.start()
        self.writer.uvicorn("Application startup complete.")
        self.writer.uvicorn(
            f"Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)"
        )
        self.gpus.write("warm-up")
        if not args.skip_server_warmup:
            await self._warm_up()
        self.status = "ready"
        self.gpus.write("ready")
        self.writer.main("The server is fired up and ready to roll!")
        await self._stop.wait()

    async def follow_node0(self) -> None:
        """A node other than 0 serves no HTTP: its schedulers run node 0's batches until the
        run ends (its own GPUs busy when node 0 decodes is not modelled)."""
        self.status = "ready"
        self.gpus.write("ready")
        await self._stop.wait()

    async def _warm_up(self) -> None:
        """Real HTTP requests to ourselves (httpx), as SGLang's warm-up thread makes them."""
        await asyncio.to_thread(self._http_stack.join)
        from specmon.backends.sglang.sim.warmup import warm_up

        args = self.launch.args
        host = "127.0.0.1" if args.host in ("0.0.0.0", "") else args.host
        host = "[::1]" if host == "::" else f"[{host}]" if ":" in host else host
        await warm_up(
            f"http://{host}:{args.port}",
            model=args.model_path,
            vlm=model_profile(args.model_path)["has_image_understanding"],
        )

    def _on_busy(self, fraction: float) -> None:
        self.last_heartbeat = time.time()
        super()._on_busy(fraction)

    def _on_decode_iteration(self, iteration: int) -> None:
        if self.status != "ready" or self.fault is None:
            return
        self._ready_iterations += 1
        trigger = self._ready_iterations == self.launch.args.decode_log_interval
        if trigger and self.fault.at("hang", "decode"):
            self.engine.hung = True  # the scheduler stalls; the HTTP process still logs
        elif trigger and self.fault.kind == "crash":
            self._crash(segv=self.fault.where == "segv")

    def _crash(self, *, segv: bool) -> None:
        if segv:
            self.writer.raw(
                "Fatal Python error: Segmentation fault\n\n"
                "Current thread 0x00007f3ac2bff640 (most recent call first):\n"
                '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/speculative/'
                'eagle_worker.py", line 702 in verify\n'
            )
            self.engine.flush_probe()
            procs.die_by_signal(self.rank_pids, signal.SIGSEGV)
        self.writer.rank(self.ranks[0], faults.decode_crash_traceback().rstrip("\n"))
        self.writer.main(
            f"SIGQUIT received. signum={signal.SIGQUIT!r}, frame=None. It usually means one child "
            "failed."
        )
        self.engine.flush_probe()
        procs.kill_process_tree(self.rank_pids)

    # --- signals and exit ------------------------------------------------------------------

    async def _shutdown(self, signum: int) -> None:
        """SIGINT: uvicorn's exit; SIGTERM: SGLang's graceful drain, then the tree killed."""
        if signum == signal.SIGINT:
            await self.uvicorn_shutdown()
            return
        self.writer.enabled = True
        engine = self.engine
        pending = [r.rid for r in [*engine.running, *engine.waiting]]
        self.writer.main(
            f"Gracefully exiting... Remaining number of requests {len(pending)}. "
            f"Remaining requests remaining_rids={pending}."
        )
        deadline = time.monotonic() + DRAIN_LIMIT_S
        while (
            (engine.running or engine.waiting) and not engine.hung and time.monotonic() < deadline
        ):
            await asyncio.sleep(0.05)
        engine.flush_probe()
        self.gpus.set_util(0.0)
        self.gpus.write("stopped")
        procs.kill_process_tree(self.rank_pids)

    def fail(self, error: FatalStartup) -> None:
        """A scheduler raised during start-up: its traceback, SIGQUIT to us, tree killed."""
        for rank in error.ranks:
            self.writer.rank(rank, error.text.rstrip("\n"))
        self.writer.main(faults.SIGQUIT_LAUNCH)
        self.gpus.write("failed")
        procs.kill_process_tree(self.rank_pids)

    def server_info(self) -> dict[str, Any]:
        data = self.launch.server_args_dict()
        rank0 = self.mem(self.ranks[0])
        data.update(
            max_total_num_tokens=self.max_total_num_tokens,
            max_req_input_len=self.context_len - 5,
            internal_states=[
                {
                    "last_gen_throughput": round(self.engine.stats.last_gen_throughput, 2),
                    "memory_usage": {
                        "weight": round(rank0.parts.get("weights", 0.0), 2),
                        "kvcache": round(rank0.parts.get("kv", 0.0), 2),
                        "token_capacity": self.max_total_num_tokens,
                        "graph": round(rank0.parts.get("graphs", 0.0), 2),
                    },
                    "effective_max_running_requests_per_dp": self.engine.max_running_requests,
                    "avg_spec_accept_length": round(self.engine.stats.avg_accept_length, 4),
                }
            ],
            version=self.version,
        )
        return data

    def _startup_facts(self) -> StartupFacts:
        """What the start-up measured, for the gauges SGLang sets once."""
        rank0 = self.mem(self.ranks[0])
        settings = self.settings
        return StartupFacts(
            startup_seconds=time.time() - self.started_at,
            load_seconds=self.load_seconds,
            draft_load_seconds=self.draft_load_seconds,
            kv_seconds=self.kv_seconds,
            max_total_num_tokens=self.max_total_num_tokens,
            context_len=self.context_len,
            page_size=1,
            weight_gib=round(
                rank0.parts.get("weights", 0.0) + rank0.parts.get("draft_weights", 0.0), 2
            ),
            kv_gib=round(rank0.parts.get("kv", 0.0) + rank0.parts.get("draft_kv", 0.0), 2),
            available_gib=round(rank0.avail_gib, 2),
            graph_seconds=dict(self.graph_seconds),
            graph_gib=dict(self.graph_gib),
            num_steps=settings.num_steps if settings.speculative else 0,
            num_draft_tokens=settings.num_draft_tokens if settings.speculative else 0,
        )

    def model_info(self) -> dict[str, Any]:
        args = self.launch.args
        profile = model_profile(args.model_path)
        return {
            "model_path": args.model_path,
            "tokenizer_path": args.tokenizer_path or args.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": profile["has_image_understanding"],
            "has_audio_understanding": False,
            "model_type": profile["model_type"],
            "architectures": [profile["architecture"]],
        }

    async def run(self) -> int:
        self.install_signals(asyncio.get_running_loop())
        try:
            await self.startup()
        except FatalStartup as error:
            self.fail(error)
            return 137
        try:
            if self.launch.args.node_rank > 0:
                await self.follow_node0()
            else:
                await self.serve()
        except OSError as error:  # the port is taken: uvicorn's message and exit code 1
            self.writer.uvicorn(
                f"[Errno {error.errno}] error while attempting to bind on address "
                f"({self.launch.args.host!r}, {self.launch.args.port}): "
                f"{(error.strerror or '').lower()}",
                "ERROR",
            )
            self.gpus.write("failed")
            procs.kill_process_tree(self.rank_pids)
        finally:
            await self.wind_down()
        return 0


def main_entry(launch: SimLaunch, gpu_state_path: Path | None) -> int:
    """Fork the rank processes, then run the server's event loop to the end."""
    rank_pids = procs.spawn_rank_processes(launch.args.tp_size // launch.args.nnodes)
    return run_to_exit(SimServer(launch, rank_pids=rank_pids, gpu_state_path=gpu_state_path))
