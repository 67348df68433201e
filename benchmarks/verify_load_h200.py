"""Verify cost against batch x verified tokens on a GPU: where speculation stops being free.

A speculative verify runs the target over ``tokens`` positions for each of ``batch`` running
requests. While the forward is memory-bound (weights read once for the whole batch) more
tokens cost almost nothing; once batch x tokens passes the GPU's ridge point each token adds
compute, and a MoE target reads more experts the more tokens it routes. This measures both
shapes in bf16 under CUDA graphs (no Python in the timed loop):

- dense: ``--layers`` Llama-3.1-8B-shaped decoder layers (hidden 4096, 32 query / 8 KV
  heads of 128, intermediate 14336, RMSNorm, SwiGLU), attention through SDPA over a KV cache
  of ``--context`` tokens per request plus the verified tokens (causal among them);
- moe: one Kimi-K2-shaped MoE layer as one GPU of TP8 holds it (384 experts, top-8 routing,
  hidden 7168, expert intermediate 2048 / 8 = 256, SwiGLU; tokens routed uniformly at random,
  fixed per point so the graph is static), i.e. the expert weights a verify must read.

Each figure is the median of ``--repeats`` timed runs of ``--replays`` graph replays (CUDA
events), printed in microseconds and as a ratio to 1 token per request at the same batch,
measured in the same run. Writes verify_load.json to ``--out``.

    python3 benchmarks/verify_load_h200.py --out /tmp/verify [--layers 4] [--context 1024]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

BATCHES = (1, 2, 4, 8, 16, 32, 64)
TOKENS = (1, 2, 3, 4, 5, 6, 7, 8)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--only", default="", help="comma list of shapes to run (default all)")
    args = parser.parse_args()
    try:
        import torch  # only on the GPU machine
    except ImportError:
        print("verify_load_h200: needs PyTorch with CUDA (the device machine)", file=sys.stderr)
        return 2

    if not torch.cuda.is_available():
        print("verify_load_h200: no CUDA device", file=sys.stderr)
        return 2
    batches = [int(b) for b in args.batches.split(",")]
    tokens = [int(t) for t in args.tokens.split(",")]
    torch.manual_seed(0)
    device = torch.device("cuda")
    started = time.time()
    dense = DenseStack(torch, device, args.layers, max(batches), args.context, max(tokens))
    moe = MoeSlice(torch, device)
    models = [("dense", dense), ("dense_matmuls", dense.matmuls_only()), ("moe", moe)]
    grouped = MoeGrouped(torch, device, moe)
    try:  # a fused grouped GEMM, as serving kernels read experts, where this torch has one
        time_graph(torch, grouped, 2, 2, argparse.Namespace(replays=1, repeats=1))
        models.append(("moe_grouped", grouped))
    except Exception as exc:
        print(f"moe_grouped unavailable: {type(exc).__name__}: {exc}"[:300], flush=True)
    if args.only:
        models = [(name, model) for name, model in models if name in args.only.split(",")]
    results: dict[str, dict[str, dict[str, float]]] = {name: {} for name, _ in models}
    for name, model in models:
        for batch in batches:
            row: dict[str, float] = {}
            for count in tokens:
                row[str(count)] = time_graph(torch, model, batch, count, args)
            results[name][str(batch)] = row
            print_row(name, batch, row, tokens)
    report = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "layers": args.layers,
        "context": args.context,
        "replays": args.replays,
        "repeats": args.repeats,
        "unit": "microseconds per forward (dense: all layers; moe: one layer)",
        "dense_shape": "Llama-3.1-8B layer: hidden 4096, heads 32/8x128, intermediate 14336",
        "moe_shape": "Kimi-K2 MoE layer, one GPU of TP8: 384 experts, top-8, hidden 7168, "
        "expert intermediate 256",
        "results": results,
        "seconds": round(time.time() - started, 1),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "verify_load.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


def print_row(name: str, batch: int, row: dict[str, float], tokens: list[int]) -> None:
    one = row[str(tokens[0])]
    ratios = " ".join(f"{row[str(t)] / one:5.2f}x" for t in tokens[1:])
    print(f"{name:5} batch {batch:3}: 1 token {one:8.1f} us | {ratios}", flush=True)


def time_graph(torch, model, batch: int, count: int, args: argparse.Namespace) -> float:
    """Median microseconds of one forward at (batch, count), replayed from a CUDA graph."""
    step = model.prepare(batch, count)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):
        graph.replay()
    samples = []
    for _ in range(args.repeats):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(args.replays):
            graph.replay()
        end.record()
        end.synchronize()
        samples.append(begin.elapsed_time(end) * 1000.0 / args.replays)
    del graph
    return round(statistics.median(samples), 2)


class DenseStack:
    """Llama-8B-shaped decoder layers with a per-request KV cache of ``context`` tokens."""

    HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTER = 4096, 32, 8, 128, 14336

    def __init__(self, torch, device, layers: int, max_batch: int, context: int, max_tokens: int):
        self.torch, self.context = torch, context
        bf16 = torch.bfloat16
        qkv = (self.HEADS + 2 * self.KV_HEADS) * self.HEAD_DIM

        def weight(rows: int, cols: int):
            return torch.randn(rows, cols, device=device, dtype=bf16) / math.sqrt(cols)

        self.layers = [
            {
                "qkv": weight(qkv, self.HIDDEN),
                "o": weight(self.HIDDEN, self.HEADS * self.HEAD_DIM),
                "gate_up": weight(2 * self.INTER, self.HIDDEN),
                "down": weight(self.HIDDEN, self.INTER),
                "norm1": torch.ones(self.HIDDEN, device=device, dtype=bf16),
                "norm2": torch.ones(self.HIDDEN, device=device, dtype=bf16),
                "k_cache": torch.randn(
                    max_batch,
                    self.KV_HEADS,
                    context + max_tokens + 8,
                    self.HEAD_DIM,
                    device=device,
                    dtype=bf16,
                ),
                "v_cache": torch.randn(
                    max_batch,
                    self.KV_HEADS,
                    context + max_tokens + 8,
                    self.HEAD_DIM,
                    device=device,
                    dtype=bf16,
                ),
            }
            for _ in range(layers)
        ]
        self.device = device
        self.attention = True

    def matmuls_only(self) -> DenseStack:
        """The same layers without attention: the weights' share alone."""
        twin = object.__new__(DenseStack)
        twin.__dict__.update(self.__dict__)
        twin.attention = False
        return twin

    def prepare(self, batch: int, count: int):
        torch = self.torch
        F = torch.nn.functional
        hidden = torch.randn(batch, count, self.HIDDEN, device=self.device, dtype=torch.bfloat16)
        end = self.context + count
        total = -(-end // 8) * 8  # keys padded to 8 (masked) so SDPA keeps its fast kernels
        # Verified tokens see the whole cache and the verified tokens before them.
        mask = torch.zeros(count, total, device=self.device, dtype=torch.bool)
        mask[:, : self.context] = True
        mask[:, self.context : end] = torch.ones(count, count, device=self.device).tril().bool()
        attention = self.attention

        def rms(x, weight):
            return (
                x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * weight
            )

        group = self.HEADS // self.KV_HEADS
        # Query heads packed per KV head (as FlashInfer/FA3 decode kernels do for GQA): the
        # cache is read once per KV head, not once per query head.
        packed_mask = mask.repeat_interleave(group, dim=0)
        hidden2d = hidden.view(batch * count, self.HIDDEN)
        kv_width = self.KV_HEADS * self.HEAD_DIM

        def step():
            x = hidden2d
            for layer in self.layers:
                h = rms(x, layer["norm1"])
                q, k, v = (h @ layer["qkv"].t()).split(
                    [self.HEADS * self.HEAD_DIM, kv_width, kv_width], dim=-1
                )
                k_all = layer["k_cache"][:batch, :, :total]
                v_all = layer["v_cache"][:batch, :, :total]
                k_all[:, :, self.context : end] = k.view(
                    batch, count, self.KV_HEADS, self.HEAD_DIM
                ).transpose(1, 2)
                v_all[:, :, self.context : end] = v.view(
                    batch, count, self.KV_HEADS, self.HEAD_DIM
                ).transpose(1, 2)
                if not attention:  # the matmuls alone
                    attn = q
                else:
                    packed = (
                        q.view(batch, count, self.KV_HEADS, group, self.HEAD_DIM)
                        .permute(0, 2, 1, 3, 4)
                        .reshape(batch, self.KV_HEADS, count * group, self.HEAD_DIM)
                    )
                    out = F.scaled_dot_product_attention(
                        packed, k_all, v_all, attn_mask=packed_mask
                    )
                    attn = (
                        out.view(batch, self.KV_HEADS, count, group, self.HEAD_DIM)
                        .permute(0, 2, 1, 3, 4)
                        .reshape(batch * count, self.HEADS * self.HEAD_DIM)
                    )
                x = x + attn @ layer["o"].t()
                h = rms(x, layer["norm2"])
                gate, up = (h @ layer["gate_up"].t()).chunk(2, dim=-1)
                x = x + (F.silu(gate) * up) @ layer["down"].t()
            return x

        return step


class MoeSlice:
    """One Kimi-K2-shaped MoE layer as one TP8 rank holds it: every expert's slice."""

    EXPERTS, TOP_K, HIDDEN, INTER = 384, 8, 7168, 256

    def __init__(self, torch, device):
        self.torch, self.device = torch, device
        bf16 = torch.bfloat16
        self.gate_up = (
            torch.randn(self.EXPERTS, 2 * self.INTER, self.HIDDEN, device=device, dtype=bf16) / 85
        )
        self.down = (
            torch.randn(self.EXPERTS, self.HIDDEN, self.INTER, device=device, dtype=bf16) / 16
        )
        self.generator = torch.Generator(device="cpu").manual_seed(0)

    def prepare(self, batch: int, count: int):
        torch = self.torch
        F = torch.nn.functional
        tokens = batch * count
        x = torch.randn(tokens, self.HIDDEN, device=self.device, dtype=torch.bfloat16)
        # Uniform top-8 routing, fixed for the point: which experts a verify must read.
        scores = torch.rand(tokens, self.EXPERTS, generator=self.generator)
        chosen = scores.topk(self.TOP_K, dim=-1).indices
        groups = []
        for expert in chosen.unique().tolist():
            rows = (chosen == expert).any(dim=-1).nonzero().flatten()
            groups.append((expert, rows.to(self.device)))
        out = torch.zeros_like(x)

        def step():
            out.zero_()
            for expert, rows in groups:
                h = x.index_select(0, rows)
                gate, up = (h @ self.gate_up[expert].t()).chunk(2, dim=-1)
                out.index_add_(0, rows, (F.silu(gate) * up) @ self.down[expert].t())
            return out

        self.touched = len(groups)
        return step


class MoeGrouped:
    """The same layer through torch's grouped GEMM: one kernel per projection over the
    experts the routing touched (tokens sorted by expert), as fused MoE kernels read them."""

    def __init__(self, torch, device, layer: MoeSlice):
        self.torch, self.device, self.layer = torch, device, layer

    def prepare(self, batch: int, count: int):
        torch, layer = self.torch, self.layer
        F = torch.nn.functional
        tokens = batch * count
        x = torch.randn(tokens, layer.HIDDEN, device=self.device, dtype=torch.bfloat16)
        scores = torch.rand(tokens, layer.EXPERTS, generator=layer.generator)
        chosen = scores.topk(layer.TOP_K, dim=-1).indices.flatten()
        order = chosen.argsort(stable=True)
        rows = (order // layer.TOP_K).to(self.device)
        counts = torch.bincount(chosen, minlength=layer.EXPERTS)
        offs = counts.cumsum(0).to(torch.int32).to(self.device)
        gate_up_t = layer.gate_up.transpose(-2, -1)
        down_t = layer.down.transpose(-2, -1)
        out = torch.zeros_like(x)

        def step():
            h = x.index_select(0, rows)
            gate, up = torch._grouped_mm(h, gate_up_t, offs=offs).chunk(2, dim=-1)
            y = torch._grouped_mm((F.silu(gate) * up).contiguous(), down_t, offs=offs)
            out.zero_()
            out.index_add_(0, rows, y)
            return out

        return step


if __name__ == "__main__":
    raise SystemExit(main())
