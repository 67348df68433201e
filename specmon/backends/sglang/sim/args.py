"""The simulator's command line: SGLang's ``launch_server`` flags (0.5.9 names) and its checks.

A launch profile swaps ``python -m sglang.launch_server`` for ``python -m specmon.sim`` and
nothing else changes, so the parser accepts the flags SGLang has (most are stored and shown in
``/server_info`` only) and rejects unknown ones the way argparse does, exit code 2.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
SIMULATED_ALGORITHMS = ("EAGLE", "EAGLE3")

ENV_HELP = """\
environment (as SGLang reads it):
  NCCL_PROTO, NCCL_ALGO, NCCL_P2P_LEVEL      all-reduce tuning (matters with --disable-custom-all-reduce)
  SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN  1 lets the draft take the target's context length
  SGLANG_ENABLE_SPEC_V2, SGLANG_HEALTH_CHECK_TIMEOUT (default 20 s)

environment (simulator):
  SPECMON_SIM_TIME_SCALE   start-up time factor (default 1.0 = ~15 min; 0.02 = ~20 s); decode is always real-time
  SPECMON_SIM_SEED         seed for noise and acceptance draws (default 0)
  SPECMON_SIM_SHARDS       target checkpoint shards (default 64)
  SPECMON_SIM_GPUS         GPUs on the simulated host (default 8)
  SPECMON_SIM_GPU_STATE    GPU state file for `python -m specmon.sim.gpu_agent`
                           (default: specmon-sim-gpus.json next to the file stdout goes to, else cwd)
  SPECMON_SIM_FAULT        oom | oom:kv | oom:load | nccl | hang:load | hang:graphs | hang:decode
                           | crash | crash:segv
  SPECMON_SIM_DIST_TIMEOUT seconds node 0 waits for the other nodes (600 x time scale, >= 60)
  SPECMON_SIM_PEER_LOST_S  seconds a node outlives another node's death (default 0)
  SPECMON_PROBE_FILE       write per-cycle draft/verify timing records (JSON lines) here
  SPECMON_SIM_SGLANG_VERSION  0.5.9 (default) | 0.5.18: the version /metrics and /server_info imitate
  SPECMON_SIM_TRAINED_AUX_LAYERS  layers the EAGLE-3 draft was trained on, e.g. 2,30,58 (default:
                           SGLang's default for the target); other ids in the draft's config.json
                           (eagle_config.eagle_aux_hidden_state_layer_ids) lower acceptance
"""

# Flags SGLang has that change nothing in the simulation: (flag, kind, default).
# kind: "flag" store_true, "int", "float", "str", "ints" (nargs +).
_PASSIVE_FLAGS: tuple[tuple[str, str, Any], ...] = (
    ("--tokenizer-path", "str", None),
    ("--tokenizer-mode", "str", "auto"),
    ("--skip-tokenizer-init", "flag", False),
    ("--load-format", "str", "auto"),
    ("--trust-remote-code", "flag", False),
    ("--dtype", "str", "auto"),
    ("--kv-cache-dtype", "str", "auto"),
    ("--quantization", "str", None),
    ("--revision", "str", None),
    ("--download-dir", "str", None),
    ("--served-model-name", "str", None),
    ("--chat-template", "str", None),
    ("--is-embedding", "flag", False),
    ("--device", "str", "cuda"),
    ("--base-gpu-id", "int", 0),
    ("--max-running-requests", "int", None),
    ("--max-total-tokens", "int", None),
    ("--max-prefill-tokens", "int", 16384),
    ("--chunked-prefill-size", "int", None),
    ("--schedule-policy", "str", "fcfs"),
    ("--schedule-conservativeness", "float", 1.0),
    ("--page-size", "int", 1),
    ("--stream-interval", "int", 1),
    ("--random-seed", "int", None),
    ("--watchdog-timeout", "float", 300.0),
    ("--log-level", "str", "info"),
    ("--log-level-http", "str", None),
    ("--log-requests", "flag", False),
    ("--log-requests-level", "int", 2),
    ("--show-time-cost", "flag", False),
    ("--enable-metrics-for-all-schedulers", "flag", False),
    ("--enable-cache-report", "flag", False),
    ("--api-key", "str", None),
    ("--attention-backend", "str", None),
    ("--sampling-backend", "str", None),
    ("--disable-radix-cache", "flag", False),
    ("--disable-cuda-graph", "flag", False),
    ("--disable-cuda-graph-padding", "flag", False),
    ("--cuda-graph-max-bs", "int", None),
    ("--cuda-graph-bs", "ints", None),
    ("--disable-overlap-schedule", "flag", False),
    ("--enable-torch-compile", "flag", False),
    ("--enable-dp-attention", "flag", False),
    ("--enable-nccl-nvls", "flag", False),
    ("--enable-symm-mem", "flag", False),
    ("--enable-mixed-chunk", "flag", False),
    ("--tool-call-parser", "str", None),
    ("--reasoning-parser", "str", None),
    ("--skip-server-warmup", "flag", False),
    ("--warmups", "str", None),
    ("--speculative-accept-threshold-single", "float", 1.0),
    ("--speculative-accept-threshold-acc", "float", 1.0),
    ("--speculative-draft-model-revision", "str", None),
    ("--speculative-attention-mode", "str", "prefill"),
)


class SimArgumentParser(argparse.ArgumentParser):
    """argparse as SGLang uses it: usage plus one error line on stderr, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = SimArgumentParser(
        prog="python -m specmon.sim",
        description=(
            "Simulated SGLang EAGLE-3 server (0.5.9 log format, HTTP API and metrics) on a "
            "simulated 8-GPU host. Takes `python -m sglang.launch_server` flags."
        ),
        epilog=ENV_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--model-path", "--model", required=True, help="target model path or name")
    add("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    add("--port", type=int, default=30000, help="HTTP port (default 30000)")
    add("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    add("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    add("--pp-size", dest="pp_size", type=int, default=1)
    add("--ep-size", "--expert-parallel-size", dest="ep_size", type=int, default=1)
    add("--context-length", type=int, default=None)
    add("--mem-fraction-static", type=float, default=None)
    add("--disable-custom-all-reduce", action="store_true", help="fall back to NCCL")
    add("--enable-metrics", action="store_true", help="serve Prometheus /metrics")
    add("--decode-log-interval", type=int, default=40, help="decode iterations per log line")
    add("--nnodes", type=int, default=1, help="nodes the server spans (TP ranks split evenly)")
    add("--node-rank", type=int, default=0, help="this node's rank; only node 0 serves HTTP")
    add(
        "--dist-init-addr",
        dest="dist_init_addr",
        default=None,
        help="HOST:PORT where node 0 waits for the others",
    )
    add("--speculative-algorithm", choices=SPECULATIVE_ALGORITHMS, default=None)
    add("--speculative-draft-model-path", "--speculative-draft-model", default=None)
    add("--speculative-num-steps", type=int, default=None)
    add("--speculative-eagle-topk", type=int, default=None)
    add("--speculative-num-draft-tokens", type=int, default=None)
    for flag, kind, default in _PASSIVE_FLAGS:
        if kind == "flag":
            add(flag, action="store_true", help=argparse.SUPPRESS)
        elif kind == "ints":
            add(flag, type=int, nargs="+", default=default, help=argparse.SUPPRESS)
        else:
            converter = {"int": int, "float": float, "str": str}[kind]
            add(flag, type=converter, default=default, help=argparse.SUPPRESS)
    return parser


class LaunchFailure(Exception):
    """A launch SGLang refuses before logging starts: ``text`` is printed as-is, then exit 1."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass
class SimLaunch:
    """The parsed launch: ServerArgs-like fields, the env that matters, and start-up warnings."""

    args: argparse.Namespace
    env: dict[str, str]
    warnings: list[str] = field(default_factory=list)
    explicit_max_running_requests: bool = False

    @property
    def speculative(self) -> bool:
        return self.args.speculative_algorithm is not None

    def server_args_dict(self) -> dict[str, Any]:
        """Every modelled ServerArgs field, as ``/server_info`` returns them."""
        data = dict(vars(self.args))
        data["tokenizer_path"] = data.get("tokenizer_path") or data["model_path"]
        data["served_model_name"] = data.get("served_model_name") or data["model_path"]
        return data


def env_true(env: Mapping[str, str], name: str) -> bool:
    """SGLang's get_bool_env_var: "true" or "1", case-insensitive."""
    return env.get(name, "false").strip().lower() in ("true", "1")


_TOPK_ADJUST = (
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
    "speculative_eagle_topk == 1"
)
_MAX_RUNNING_RESET = (
    "Max running requests is reset to 48 for speculative decoding. You can override this "
    "by explicitly setting --max-running-requests."
)
_OVERLAP_DISABLED = (
    "Overlap scheduler is disabled when spec v2 is off or using unsupported speculative "
    "algorithm. You can set env SGLANG_ENABLE_SPEC_V2=True to enable the experimental "
    "overlap scheduler. "
)


def _assertion_traceback() -> str:
    """The bare AssertionError SGLang raises in ServerArgs.__post_init__ (no logging yet)."""
    return (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "<frozen runpy>", line 88, in _run_code\n'
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py", line 24, in <module>\n'
        "    server_args = prepare_server_args(sys.argv[1:])\n"
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/server_args.py", line 4417, in prepare_server_args\n'
        "    return ServerArgs.from_cli_args(raw_args)\n"
        '  File "<string>", line 312, in __init__\n'
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/server_args.py", line 612, in __post_init__\n'
        "    self._handle_speculative_decoding()\n"
        '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/server_args.py", line 2031, in _handle_speculative_decoding\n'
        "    assert (\n"
        "AssertionError\n"
    )


def _check_nodes(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The multi-node flags: ranks split evenly over the nodes, node 0's address known."""
    from specmon.sim.rendezvous import parse_init_addr

    if args.nnodes < 1:
        parser.error("argument --nnodes: must be a positive integer")
    if not 0 <= args.node_rank < args.nnodes:
        parser.error(f"argument --node-rank: must be in 0..{args.nnodes - 1}")
    if args.nnodes == 1:
        return
    if args.tp_size % args.nnodes:
        raise LaunchFailure(
            f"specmon.sim: --tp {args.tp_size} does not split evenly over --nnodes {args.nnodes}\n"
        )
    if args.dist_init_addr is None:
        raise LaunchFailure(f"specmon.sim: --nnodes {args.nnodes} needs --dist-init-addr\n")
    try:
        parse_init_addr(args.dist_init_addr)
    except ValueError as error:
        parser.error(f"argument --dist-init-addr: {error}")


def parse_launch(argv: Sequence[str], env: Mapping[str, str] | None = None) -> SimLaunch:
    """Parse and check a launch like SGLang's ServerArgs; argparse errors exit 2 as usual.

    Raises LaunchFailure for what SGLang rejects with a traceback or a message of its own.
    """
    environ = dict(os.environ if env is None else env)
    parser = build_parser()
    args = parser.parse_args(list(argv))
    launch = SimLaunch(args=args, env=environ)
    launch.explicit_max_running_requests = args.max_running_requests is not None
    for name in ("tp_size", "port", "decode_log_interval"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"argument --{name.replace('_', '-')}: must be a positive integer")
    if args.mem_fraction_static is not None and not 0.0 < args.mem_fraction_static < 1.0:
        parser.error("argument --mem-fraction-static: must be between 0 and 1")
    _check_nodes(parser, args)
    gpus = int(environ.get("SPECMON_SIM_GPUS", "8") or 8)
    per_node = args.tp_size * args.dp_size // args.nnodes
    if per_node > gpus:
        raise LaunchFailure(
            f"RuntimeError: CUDA error: invalid device ordinal (this simulated host has {gpus} "
            f"GPUs; --tp {args.tp_size} over {args.nnodes} node(s) needs {per_node})\n"
        )
    if args.speculative_algorithm is None:
        return launch  # SGLang ignores the other speculative flags then
    if args.speculative_algorithm == "NEXTN":
        args.speculative_algorithm = "EAGLE"
    if args.speculative_algorithm not in SIMULATED_ALGORITHMS:
        raise LaunchFailure(
            f"specmon.sim: --speculative-algorithm {args.speculative_algorithm} is not "
            f"simulated (only {', '.join(SIMULATED_ALGORITHMS)}, and NEXTN as EAGLE)\n"
        )
    if args.speculative_draft_model_path is None:
        raise LaunchFailure(
            "ValueError: --speculative-draft-model-path is required for "
            f"--speculative-algorithm {args.speculative_algorithm}\n"
        )
    if args.speculative_num_steps is None:
        if args.speculative_eagle_topk is not None or args.speculative_num_draft_tokens is not None:
            raise LaunchFailure(_assertion_traceback())
        # auto_choose_speculative_params: (3, 1, 4) for most models
        args.speculative_num_steps, args.speculative_eagle_topk = 3, 1
        args.speculative_num_draft_tokens = 4
    for name in ("num_steps", "eagle_topk", "num_draft_tokens"):
        value = getattr(args, f"speculative_{name}")
        if value is not None and value < 1:
            parser.error(f"argument --speculative-{name.replace('_', '-')}: must be >= 1")
    if args.speculative_eagle_topk is None:
        args.speculative_eagle_topk = 1
    if args.speculative_num_draft_tokens is None:
        args.speculative_num_draft_tokens = args.speculative_num_steps + 1
    if (
        args.speculative_eagle_topk == 1
        and args.speculative_num_draft_tokens != args.speculative_num_steps + 1
    ):
        launch.warnings.append(_TOPK_ADJUST)
        args.speculative_num_draft_tokens = args.speculative_num_steps + 1
    if not launch.explicit_max_running_requests:
        launch.warnings.append(_MAX_RUNNING_RESET)
        args.max_running_requests = 48
    if not env_true(environ, "SGLANG_ENABLE_SPEC_V2"):
        launch.warnings.append(_OVERLAP_DISABLED)
    return launch
