"""The simulator's performance model: what one decode cycle costs and how many tokens it yields.

Calibrated to the figures measured on a real Kimi-K2.5 / EAGLE-3 / TP8 host
(/work/shared/reference/figures.md, explained in docs/simulator.md), so that tuning in the
console moves tok/s the way it moved on that host. Under load (several running requests) the
verify forward grows with the tokens in flight (batch x verified tokens per request): more MoE
experts read, compute past a knee, all-reduce volume past a knee; calibrated from an H200
measurement (benchmarks/verify_load_h200.py) scaled to that host, so the best step count falls
as the load rises (docs/simulator.md, "Load"). Pure functions: no clock, no I/O.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass

# --- measured anchors -----------------------------------------------------------------------
DRAFT_MS_PER_STEP = 0.87 / 5  # draft phase 0.87 ms per cycle at 5 steps
EXTEND_MS = 0.26  # cycle at 5 steps = 28.7 ms / 0.962 = 29.83 ms, minus draft and verify
VERIFY_MS_PER_TOKEN = (28.7 - 25.6) / 3  # 6 tokens: 28.7 ms, 3 tokens: 25.6 ms
VERIFY_FIXED_MS = 25.6 - 3 * VERIFY_MS_PER_TOKEN  # graph replay + all-reduce latency
BASELINE_STEP_MS = 1000.0 / 62.9  # no speculation, batch 1, same server config
ALLREDUCE_SHARE = 0.45  # of verify (and of a plain decode step) in the measured config
TUNED_ALLREDUCE_FACTOR = 0.40  # LL + Ring + P2P SYS: 0.45 * (1 - 0.40) = 27% off verify

# --- acceptance: per-position conditional acceptance p_j = max(floor, first * decay^(j-1)) ---
ACCEPT_FIRST = 0.68
ACCEPT_DECAY = 0.66
ACCEPT_FLOOR = 0.34
# A draft fed other target layers than it was trained on (issue 31, figures.md: acceptance
# ~19% before fixing the wiring to [2, 30, 58], ~47% after): every position's chance is scaled
# so that position 1 lands on 0.19; the matched curve above is left exactly as it is.
MISWIRED_FIRST = 0.19
MISWIRED_SCALE = MISWIRED_FIRST / ACCEPT_FIRST

# --- load: what the other running requests' tokens add to a verify (docs/simulator.md, "Load")
# "Tokens in flight" n = batch x tokens verified per request (1 per request without
# speculation). At batch 1 the measured line above holds exactly; each term below is what n
# adds over the batch-1 forward of the same tokens per request, so it is 0 at batch 1.
#
# 1. MoE expert reads. Kimi-K2 routes each token to 8 of 384 experts per MoE layer; n tokens
#    touch E(1 - (1 - k/E)^n) distinct experts (uniform routing), each read once per forward.
MOE_EXPERTS = 384  # Kimi-K2 config: routed experts per MoE layer
MOE_TOP_K = 8  # Kimi-K2 config: experts per token
MOE_LAYERS = 60  # Kimi-K2 config: 61 layers, the first dense
_MISS = 1.0 - MOE_TOP_K / MOE_EXPERTS  # chance one token leaves a given expert untouched
# Per distinct expert read (all MoE layers of a rank), calibrated on the batch-1 anchors: the
# 3 -> 6 draft-token step (+3.1 ms) is the 22.1 more experts those tokens touch. 0.1405 ms.
EXPERT_READ_MS = 3 * VERIFY_MS_PER_TOKEN / (MOE_EXPERTS * (_MISS**3 - _MISS**6))
# 2. Compute past a knee (roofline-shaped: flat below, linear above), fitted on the H200 run 3
#    (docs/verify-load-h200/verify_load.json) and scaled to the modelled host below.
H200_DENSE_KNEE_TOKENS = 100.0  # fit: 4 Llama-8B layers' matmuls flat to here, then ...
H200_DENSE_US_PER_TOKEN = 3.02  # ... this per token in flight (1.745 GFLOP per token)
BENCH_DENSE_GFLOP_PER_TOKEN = 1.745  # 2 x 4 layers x 218M weights
H200_MOE_US_PER_EXPERT = 3.99  # fit: one Kimi-K2 MoE layer (one TP8 rank, bf16), per expert read
H200_MOE_FIXED_US = 58.3  # fit: the same layer's time with no expert read
H200_MOE_KNEE_TOKENS = 136.0  # fit: past here the grouped GEMM grows with tokens ...
H200_MOE_US_PER_TOKEN = 0.495  # ... by this per token in flight, per layer
H200_TFLOPS, H200_TBPS = 989.0, 4.8  # H200 SXM datasheet: bf16 dense tensor, HBM3e
HOST_TFLOPS, HOST_TBPS = 504.0, 1.792  # assumed: RTX PRO 6000 Blackwell datasheet, GDDR7
KIMI_DENSE_GFLOP_PER_TOKEN = 2.6  # assumed: Kimi-K2's non-expert weights (MLA, shared expert,
# dense layer, lm_head; ~10.4B) x 2 FLOP / 8 ranks
_RIDGE_RATIO = (HOST_TFLOPS / HOST_TBPS) / (H200_TFLOPS / H200_TBPS)  # 1.37: knee moves up
_FLOPS_RATIO = H200_TFLOPS / HOST_TFLOPS  # 1.96: a FLOP costs this much more on the host
DENSE_KNEE_TOKENS = H200_DENSE_KNEE_TOKENS * _RIDGE_RATIO  # 136.5
DENSE_MS_PER_TOKEN = (  # 0.0088
    H200_DENSE_US_PER_TOKEN
    / 1000.0
    * (KIMI_DENSE_GFLOP_PER_TOKEN / BENCH_DENSE_GFLOP_PER_TOKEN)
    * _FLOPS_RATIO
)
MOE_KNEE_TOKENS = H200_MOE_KNEE_TOKENS  # assumed to carry over: the kernel's tiles filling
# (2.8 tokens per expert), not a roofline
MOE_MS_PER_TOKEN = H200_MOE_US_PER_TOKEN / 1000.0 * MOE_LAYERS * _FLOPS_RATIO  # 0.058
# 3. All-reduce volume: TP8 all-reduces the hidden state (7168 x bf16 per token) twice per
#    layer; over PCIe its time is flat (latency) to a knee, then grows with the bytes.
HIDDEN_BYTES_PER_TOKEN = 7168 * 2
ALLREDUCES_PER_FORWARD = 2 * 61
TP_RANKS = 8
PCIE_ALLREDUCE_BUS_GBPS = 22.2  # assumed: NCCL busbw published for 8x RTX PRO 6000 on PCIe
# Gen5, default NCCL settings (voipmonitor/rtx6kpro, hardware/pcie-bandwidth.md)
NCCL_LATENCY_FLOOR_US = 24.0  # assumed: NCCL all-reduce flat to 64 KB there (same source)
_RING_BYTES_PER_TOKEN = 2 * (TP_RANKS - 1) / TP_RANKS * HIDDEN_BYTES_PER_TOKEN
ALLREDUCE_MS_PER_TOKEN = (  # 0.138
    ALLREDUCES_PER_FORWARD * _RING_BYTES_PER_TOKEN / (PCIE_ALLREDUCE_BUS_GBPS * 1e9) * 1000.0
)
ALLREDUCE_KNEE_TOKENS = (  # 21
    NCCL_LATENCY_FLOOR_US * 1e-6 * PCIE_ALLREDUCE_BUS_GBPS * 1e9 / _RING_BYTES_PER_TOKEN
)
# The draft model (one layer) and the draft extend: each extra running request adds this
# fraction of their batch-1 time (assumed; they are ~3% of a cycle).
BATCH_DRAFT_SLOWDOWN = 0.02

# Share of the full NCCL tuning gain that each setting brings on its own.
_PROTO_GAIN = {"LL": 0.5, "LL128": 0.25, "SIMPLE": 0.0}
_ALGO_GAIN = {"RING": 0.25, "TREE": 0.0}
_P2P_GAIN = {"SYS": 0.25, "PHB": 0.125, "PXB": 0.0625}


@dataclass(frozen=True, slots=True)
class SpecSettings:
    """The launch settings the model depends on; ``num_steps`` 0 means no speculation."""

    num_steps: int = 0
    topk: int = 1
    num_draft_tokens: int = 1
    disable_custom_all_reduce: bool = False
    nccl_proto: str | None = None
    nccl_algo: str | None = None
    nccl_p2p_level: str | None = None
    miswired: bool = False  # the draft reads other auxiliary layers than it was trained on

    @property
    def speculative(self) -> bool:
        return self.num_steps > 0

    @classmethod
    def from_launch(
        cls,
        num_steps: int | None,
        topk: int | None,
        num_draft_tokens: int | None,
        disable_custom_all_reduce: bool,
        env: Mapping[str, str],
    ) -> SpecSettings:
        return cls(
            num_steps=num_steps or 0,
            topk=topk or 1,
            num_draft_tokens=num_draft_tokens or ((num_steps or 0) + 1),
            disable_custom_all_reduce=disable_custom_all_reduce,
            nccl_proto=env.get("NCCL_PROTO") or None,
            nccl_algo=env.get("NCCL_ALGO") or None,
            nccl_p2p_level=env.get("NCCL_P2P_LEVEL") or None,
        )


@dataclass(frozen=True, slots=True)
class CycleCost:
    """Expected milliseconds of one decode iteration, by phase (all zero but verify without spec)."""

    draft_ms: float
    verify_ms: float
    extend_ms: float

    @property
    def cycle_ms(self) -> float:
        return self.draft_ms + self.verify_ms + self.extend_ms


def _first_listed(value: str | None) -> str | None:
    """The setting NCCL would use for all-reduce from a list such as ``LL,LL128`` or
    ``^LL128;allreduce:LL``: a per-op allreduce entry wins, a negation alone says nothing."""
    if not value:
        return None
    entries = [e.strip() for e in value.split(";") if e.strip()]
    for entry in entries:
        op, sep, rest = entry.partition(":")
        if sep and op.strip().lower() == "allreduce":
            entries = [rest]
            break
    for entry in entries:
        if ":" in entry or entry.startswith("^"):
            continue
        first = entry.split(",")[0].strip()
        if first:
            return first.upper()
    return None


def nccl_tuning_fraction(settings: SpecSettings) -> float:
    """0 (NCCL defaults) .. 1 (LL + Ring + P2P SYS): how much of the measured gain applies."""
    gain = _PROTO_GAIN.get(_first_listed(settings.nccl_proto) or "", 0.0)
    gain += _ALGO_GAIN.get(_first_listed(settings.nccl_algo) or "", 0.0)
    gain += _P2P_GAIN.get((settings.nccl_p2p_level or "").strip().upper(), 0.0)
    return min(1.0, gain)


def allreduce_factor(settings: SpecSettings) -> float:
    """All-reduce time relative to the measured configuration (NCCL defaults).

    The measured host has 8 GPUs on PCIe only, where SGLang's custom all-reduce does not run
    (it needs NVLink, or at most two PCIe GPUs), so NCCL carries every all-reduce with or
    without ``--disable-custom-all-reduce``: the flag changes nothing here, the NCCL
    variables always apply (the figures' -27% came from spec runs without the flag).
    """
    return 1.0 - (1.0 - TUNED_ALLREDUCE_FACTOR) * nccl_tuning_fraction(settings)


def _allreduce_scaled(ms: float, settings: SpecSettings) -> float:
    return ms * (1.0 - ALLREDUCE_SHARE) + ms * ALLREDUCE_SHARE * allreduce_factor(settings)


def experts_touched(tokens: float) -> float:
    """Distinct experts one MoE layer reads for ``tokens`` routed tokens: E(1 - (1 - k/E)^n)."""
    return MOE_EXPERTS * (1.0 - _MISS**tokens)


def _past(knee: float, tokens: float) -> float:
    return max(0.0, tokens - knee)


def load_ms(tokens_in_flight: float) -> float:
    """What a forward over ``tokens_in_flight`` tokens costs beyond its fixed part, from the
    three load terms (experts read, compute past its knee, all-reduce volume past its knee)."""
    n = tokens_in_flight
    return (
        EXPERT_READ_MS * experts_touched(n)
        + DENSE_MS_PER_TOKEN * _past(DENSE_KNEE_TOKENS, n)
        + MOE_MS_PER_TOKEN * _past(MOE_KNEE_TOKENS, n)
        + ALLREDUCE_MS_PER_TOKEN * _past(ALLREDUCE_KNEE_TOKENS, n)
    )


def batch_load_ms(batch_size: int, tokens_per_request: int) -> float:
    """What the other running requests add to one forward verifying ``tokens_per_request``
    tokens each: 0 at batch 1, where the measured figures already hold."""
    batch = max(1, batch_size)
    return load_ms(batch * tokens_per_request) - load_ms(tokens_per_request)


def cycle_cost(settings: SpecSettings, batch_size: int = 1) -> CycleCost:
    """Expected phase times of one iteration at ``batch_size`` running requests."""
    extra = max(0, batch_size - 1)
    if not settings.speculative:
        step = _allreduce_scaled(BASELINE_STEP_MS, settings) + batch_load_ms(batch_size, 1)
        return CycleCost(draft_ms=0.0, verify_ms=step, extend_ms=0.0)
    # topk > 1 drafts a tree: each step proposes topk candidates.
    draft = DRAFT_MS_PER_STEP * settings.num_steps * math.sqrt(settings.topk)
    verify = VERIFY_FIXED_MS + VERIFY_MS_PER_TOKEN * settings.num_draft_tokens
    return CycleCost(
        draft_ms=draft * (1 + BATCH_DRAFT_SLOWDOWN * extra),
        verify_ms=_allreduce_scaled(verify, settings)
        + batch_load_ms(batch_size, settings.num_draft_tokens),
        extend_ms=EXTEND_MS * (1 + BATCH_DRAFT_SLOWDOWN * extra),
    )


def position_accept_probability(position: int, topk: int = 1, miswired: bool = False) -> float:
    """Chance that draft token ``position`` (1-based) is accepted given all before it were."""
    base = max(ACCEPT_FLOOR, ACCEPT_FIRST * ACCEPT_DECAY ** (position - 1))
    if miswired:
        base *= MISWIRED_SCALE
    if topk > 1:  # more candidates per position: a modestly better chance one matches
        base = 1.0 - (1.0 - base) ** (1.0 + 0.25 * math.log2(topk))
    return base


def draft_depth(settings: SpecSettings) -> int:
    """How many draft positions can be accepted in one verify (a chain of num_steps)."""
    return min(settings.num_steps, max(0, settings.num_draft_tokens - 1))


def expected_accept_length(settings: SpecSettings) -> float:
    """Expected tokens per request per verify: accepted drafts + the bonus token."""
    if not settings.speculative:
        return 1.0
    total, chain = 1.0, 1.0
    for position in range(1, draft_depth(settings) + 1):
        chain *= position_accept_probability(position, settings.topk, settings.miswired)
        total += chain
    return total


def expected_tokens_per_second(settings: SpecSettings, batch_size: int = 1) -> float:
    """Per-request decode speed in tokens per second (the batch's total: times batch_size)."""
    return expected_accept_length(settings) / cycle_cost(settings, batch_size).cycle_ms * 1000.0


def sample_accepted(settings: SpecSettings, rng: random.Random) -> int:
    """Draw how many draft tokens one request gets accepted in one verify (0..depth)."""
    accepted = 0
    for position in range(1, draft_depth(settings) + 1):
        if rng.random() >= position_accept_probability(position, settings.topk, settings.miswired):
            break
        accepted += 1
    return accepted


def jittered(ms: float, rng: random.Random, spread: float = 0.03) -> float:
    """A measured time: the expected one with a little Gaussian noise, never below 60%."""
    return max(ms * 0.6, rng.gauss(ms, ms * spread))
