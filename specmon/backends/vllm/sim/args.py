"""``vllm serve`` flags (0.33 names) and vLLM's own checks on them.

A launch profile swaps ``vllm serve`` for ``python -m specmon.sim.vllm serve``; flags vLLM has
that change nothing in the simulation are accepted and listed in ``non-default args``, flags
vLLM removed (the V0 speculative ones) fail as argparse fails: exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

VLLM_VERSION = "0.33.0"
DEFAULT_PORT = 8000
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9

# vLLM's methods (config/speculative.py); those with a draft checkpoint load one.
SPEC_METHODS = (
    "ngram",
    "draft_model",
    "suffix",
    "custom_class",
    "eagle",
    "eagle3",
    "extract_hidden_states",
    "mtp",
    "deepseek_mtp",
    "qwen3_next_mtp",
    "dflash",
    "ngram_gpu",
    "dspark",
)
DRAFT_MODEL_METHODS = ("eagle", "eagle3", "draft_model")
SIMULATED_METHODS = ("eagle", "eagle3", "draft_model", "mtp", "deepseek_mtp", "qwen3_next_mtp")
SPEC_CONFIG_KEYS = (
    "method",
    "model",
    "num_speculative_tokens",
    "draft_tensor_parallel_size",
    "quantization",
    "max_model_len",
    "revision",
    "code_revision",
    "disable_by_batch_size",
    "prompt_lookup_max",
    "prompt_lookup_min",
    "draft_load_config",
    "parallel_drafting",
    "rejection_sample_method",
    "speculative_token_tree",
)

ENV_HELP = """\
environment (as vLLM reads it):
  NCCL_PROTO, NCCL_ALGO, NCCL_P2P_LEVEL  all-reduce tuning (shapes decode speed)
  VLLM_LOG_STATS_INTERVAL                seconds between stats lines (default 10)
  VLLM_KEEP_ALIVE_ON_ENGINE_DEATH        1: stay up after the engine died (/health 503)

environment (simulator):
  SPECMON_SIM_TIME_SCALE   start-up time factor (default 1.0 = ~2.8 min; 0.05 = ~10 s)
  SPECMON_SIM_SEED, SPECMON_SIM_SHARDS (default 30), SPECMON_SIM_GPUS (default 8)
  SPECMON_SIM_GPU_STATE    GPU state file for `python -m specmon.sim.gpu_agent`
  SPECMON_SIM_FAULT        oom | oom:kv | oom:load | nccl | hang:load | hang:graphs | hang:decode
                           | crash | crash:segv
  SPECMON_PROBE_FILE       write per-cycle draft/verify timing records (JSON lines) here
  SPECMON_SIM_TRAINED_AUX_LAYERS  layers the EAGLE-3 draft was trained on, e.g. 2,40,77 (default:
                           vLLM's default for the target); other ids in the draft's config.json
                           (top-level eagle_aux_hidden_state_layer_ids) lower acceptance
"""

# Flags vLLM has that change nothing here: (flag, aliases, kind, default).
_PASSIVE: tuple[tuple[str, tuple[str, ...], str, Any], ...] = (
    ("--tokenizer", (), "str", None),
    ("--revision", (), "str", None),
    ("--trust-remote-code", (), "flag", False),
    ("--dtype", (), "str", "auto"),
    ("--quantization", ("-q",), "str", None),
    ("--kv-cache-dtype", (), "str", "auto"),
    ("--load-format", (), "str", "auto"),
    ("--download-dir", (), "str", None),
    ("--seed", (), "int", 0),
    ("--max-num-batched-tokens", (), "int", None),
    ("--block-size", (), "int", None),
    ("--enable-prefix-caching", (), "bool", None),
    ("--enable-chunked-prefill", (), "bool", None),
    ("--chat-template", (), "str", None),
    ("--api-key", (), "str", None),
    ("--uvicorn-log-level", (), "str", "info"),
    ("--disable-uvicorn-access-log", (), "flag", False),
    ("--disable-log-requests", (), "flag", False),
    ("--enable-log-requests", (), "flag", False),
    ("--disable-custom-all-reduce", (), "flag", False),
    ("--distributed-executor-backend", (), "str", None),
    ("--compilation-config", ("-O",), "str", None),
    ("--generation-config", (), "str", "auto"),
    ("--enable-auto-tool-choice", (), "flag", False),
    ("--tool-call-parser", (), "str", None),
    ("--reasoning-parser", (), "str", None),
    ("--max-logprobs", (), "int", 20),
    ("--swap-space", (), "float", None),
    ("--aggregate-engine-logging", (), "flag", False),
    ("--pipeline-parallel-size", ("-pp",), "int", 1),
    ("--per-request-spec-decode-metrics", (), "str", None),
)


class VllmArgumentParser(argparse.ArgumentParser):
    """argparse as vLLM uses it: usage and one ``error:`` line on stderr, exit code 2."""


def _json_object(text: str) -> dict[str, Any]:
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


_json_object.__name__ = "loads"  # argparse names the type in "invalid loads value: ..."


def build_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """``vllm`` with its ``serve`` subcommand; returns (top-level parser, serve parser)."""
    top = VllmArgumentParser(prog="vllm", description="vLLM CLI (simulated by specmon)")
    commands = top.add_subparsers(dest="subcommand", required=True)
    serve = commands.add_parser(
        "serve",
        prog="vllm serve",
        usage="vllm serve [model_tag] [options]",
        description=(
            "Simulated vLLM 0.33 OpenAI-compatible server (log format, HTTP API and /metrics) "
            "on a simulated 8-GPU host. Takes `vllm serve` flags."
        ),
        epilog=ENV_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = serve.add_argument
    add("model_tag", nargs="?", default=None, help="model name or path")
    add("--model", default=None, help="model name or path (when no model_tag)")
    add("--host", default=None, help="host name (default: all interfaces)")
    add("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    add("--tensor-parallel-size", "-tp", dest="tensor_parallel_size", type=int, default=1)
    add("--data-parallel-size", "-dp", dest="data_parallel_size", type=int, default=1)
    add("--gpu-memory-utilization", type=float, default=DEFAULT_GPU_MEMORY_UTILIZATION)
    add("--max-model-len", type=int, default=None)
    add("--max-num-seqs", type=int, default=None)
    add("--served-model-name", nargs="+", default=None)
    add("--enforce-eager", action="store_true", help="no torch.compile, no CUDA graphs")
    add("--disable-log-stats", action="store_true", help="no stats lines, no vllm: metrics")
    add("--speculative-config", "-sc", type=_json_object, default=None, help="JSON")
    add("--spec-method", choices=SPEC_METHODS, default=None)
    add("--spec-model", default=None)
    add("--spec-tokens", type=int, default=None)
    for flag, aliases, kind, default in _PASSIVE:
        if kind == "flag":
            add(flag, *aliases, action="store_true", help=argparse.SUPPRESS)
        elif kind == "bool":
            add(
                flag,
                *aliases,
                action=argparse.BooleanOptionalAction,
                default=default,
                help=argparse.SUPPRESS,
            )
        else:
            converter = {"int": int, "float": float, "str": str}[kind]
            add(flag, *aliases, type=converter, default=default, help=argparse.SUPPRESS)
    return top, serve


class LaunchFailure(Exception):
    """vLLM refuses the launch after its first log lines: ``text`` is the traceback tail,
    printed on stderr, then exit 1."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


@dataclass
class VllmLaunch:
    """The parsed ``vllm serve`` launch and the environment that matters."""

    args: argparse.Namespace
    env: dict[str, str]
    non_default: dict[str, Any] = field(default_factory=dict)
    spec: dict[str, Any] | None = None  # the resolved speculative config

    @property
    def model(self) -> str:
        return str(self.args.model)

    @property
    def served_name(self) -> str:
        names = self.args.served_model_name
        return names[0] if names else self.model

    @property
    def tp(self) -> int:
        return int(self.args.tensor_parallel_size)

    @property
    def num_speculative_tokens(self) -> int | None:
        return None if self.spec is None else int(self.spec["num_speculative_tokens"])


def _value_error(message: str) -> LaunchFailure:
    return LaunchFailure(message)


def _merge_shortcuts(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> dict[str, Any] | None:
    """``-sc`` JSON with the 0.33 shortcuts folded in; a key given both ways is an error."""
    spec = dict(args.speculative_config) if args.speculative_config is not None else None
    shortcuts = (
        ("--spec-method", "method", args.spec_method),
        ("--spec-model", "model", args.spec_model),
        ("--spec-tokens", "num_speculative_tokens", args.spec_tokens),
    )
    for flag, key, value in shortcuts:
        if value is None:
            continue
        if spec is not None and key in spec:
            parser.error(
                f"argument {flag}: not allowed with '{key}' in argument --speculative-config/-sc"
            )
        spec = {} if spec is None else spec
        spec[key] = value
    return spec


def _resolve_spec(spec: dict[str, Any], tp: int) -> dict[str, Any]:
    """SpeculativeConfig's checks and defaults (config/speculative.py), vLLM's messages."""
    if "tensor_parallel_size" in spec:
        raise _value_error(
            "ValueError: 'tensor_parallel_size' is not a valid argument in the "
            "speculative_config. Please pass 'draft_tensor_parallel_size' instead."
        )
    unknown = sorted(set(spec) - set(SPEC_CONFIG_KEYS))
    if unknown:
        raise _value_error(
            f"pydantic_core._pydantic_core.ValidationError: 1 validation error for "
            f"SpeculativeConfig\n{unknown[0]}\n  Unexpected keyword argument "
            f"[type=unexpected_keyword_argument, input_value={spec[unknown[0]]!r}, "
            "input_type=str]"
        )
    method = spec.get("method")
    model = spec.get("model")
    if method is None and isinstance(model, str) and "eagle3" in model.lower():
        method = "eagle3"
    elif method is None and isinstance(model, str) and "eagle" in model.lower():
        method = "eagle"
    elif method is None and model is not None:
        method = "draft_model"
    if method is None:
        raise _value_error(
            "ValueError: speculative_config needs a 'method' (or a draft 'model' to detect it from)"
        )
    if method not in SPEC_METHODS:
        raise _value_error(
            f"ValueError: Unsupported speculative method: '{method}'. Choose one of: "
            + ", ".join(SPEC_METHODS)
        )
    if method in DRAFT_MODEL_METHODS and not model:
        raise _value_error(
            f"ValueError: method '{method}' needs a draft model: set 'model' in "
            "--speculative-config (or --spec-model)"
        )
    tokens = spec.get("num_speculative_tokens")
    if tokens is None:
        raise _value_error(
            "ValueError: num_speculative_tokens must be provided with speculative model."
        )
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
        raise _value_error(
            f"ValueError: Expected num_speculative_tokens to be greater than zero ({tokens})."
        )
    draft_tp = spec.get("draft_tensor_parallel_size", tp)
    if draft_tp not in (1, tp):
        raise _value_error(
            f"ValueError: speculative_draft_tensor_parallel_size={draft_tp} cannot be other "
            f"value than 1 or target model tensor_parallel_size={tp}"
        )
    if method not in SIMULATED_METHODS:
        raise _value_error(
            f"specmon.sim.vllm: speculative method '{method}' is not simulated (only "
            + ", ".join(SIMULATED_METHODS)
            + ")"
        )
    resolved = dict(spec)
    resolved.update(method=method, num_speculative_tokens=tokens)
    resolved["model"] = model if model else None
    resolved["draft_tensor_parallel_size"] = draft_tp
    return resolved


def parse_serve(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[VllmLaunch, argparse.ArgumentParser]:
    """Parse ``serve MODEL [flags]``; argparse errors exit 2. The speculative config is
    checked later (``check_launch``): vLLM checks it after its first log lines."""
    environ = dict(os.environ if env is None else env)
    top, serve = build_parser()
    argv = list(argv)
    if argv[:1] != ["serve"]:
        top.parse_args(argv)  # no or another subcommand: argparse's error, exit 2
    args = serve.parse_args(argv[1:])  # unknown flags: "vllm serve: error: ..."
    defaults = vars(serve.parse_args([]))
    if args.model_tag and args.model and args.model_tag != args.model:
        serve.error("argument --model: conflicts with the positional model_tag")
    args.model = args.model_tag or args.model or "Qwen/Qwen3-0.6B"  # vLLM's default model
    for name in ("tensor_parallel_size", "data_parallel_size", "port"):
        if getattr(args, name) < 1:
            serve.error(f"argument --{name.replace('_', '-')}: must be a positive integer")
    if not 0.0 < args.gpu_memory_utilization <= 1.0:
        serve.error("argument --gpu-memory-utilization: must be in (0, 1]")
    launch = VllmLaunch(args=args, env=environ)
    launch.non_default = {"model_tag": args.model_tag} if args.model_tag else {}
    for key, value in vars(args).items():
        if key in ("model_tag", "subcommand", "spec_method", "spec_model", "spec_tokens"):
            continue
        if key in defaults and value != defaults[key]:
            launch.non_default[key] = value
    launch.spec = _merge_shortcuts(serve, args)
    if launch.spec is not None:
        launch.non_default["speculative_config"] = dict(launch.spec)
    return launch, serve


def check_launch(launch: VllmLaunch) -> None:
    """What the engine config refuses (LaunchFailure) or the simulated host cannot run."""
    args = launch.args
    gpus = int(launch.env.get("SPECMON_SIM_GPUS", "8") or 8)
    if launch.tp * args.data_parallel_size > gpus:
        raise LaunchFailure(
            f"ValueError: World size ({launch.tp * args.data_parallel_size}) is larger than "
            f"the number of available GPUs ({gpus}) in this node."
        )
    if args.data_parallel_size != 1:
        raise LaunchFailure("specmon.sim.vllm: data parallelism (-dp > 1) is not simulated")
    if launch.spec is not None:
        launch.spec = _resolve_spec(launch.spec, launch.tp)
