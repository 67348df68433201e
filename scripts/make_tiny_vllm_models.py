"""Write tiny Llama targets and an EAGLE-3 draft that a real vLLM (CPU build) serves in seconds.

Run with a Python that has torch, safetensors and tokenizers (the vLLM venv of the real-server
tests does): ``python scripts/make_tiny_vllm_models.py OUT_DIR``. It writes, all from a fixed
seed (the same bytes every run):

- ``tokenizer``: a byte-level BPE tokenizer trained on the spot (the ``tokenizers`` library) on
  generated English-like text; copied into each target.
- ``tiny-llama8``: ``LlamaForCausalLM``, 8 layers, hidden 128, 4 heads of 32, 2 KV heads.
- ``tiny-llama6``: the same with 6 layers. vLLM's EAGLE-3 takes auxiliary hidden states from
  target layers (2, L // 2, L - 3); for 6 layers that is (2, 3, 3), two distinct, while the
  draft's ``fc`` expects three: vLLM 0.32 starts, then dies at the first request
  (``CHECK_EQ(mat1.size(ndim - 1), K) failed. 256 vs 384``). The mismatched pair.
- ``tiny-eagle3``: a one-layer EAGLE-3 draft in vLLM's checkpoint format
  (vllm/model_executor/models/llama_eagle3.py, ``Eagle3LlamaForCausalLM``): architecture
  ``LlamaForCausalLMEagle3``; weights ``fc.weight`` [hidden, 3 * hidden], ``midlayer.*`` (one
  decoder layer whose q/k/v take 2 * hidden: the token embedding and the hidden state side by
  side, plus ``hidden_norm``), ``norm.weight`` and its own ``lm_head.weight``. No
  ``embed_tokens`` (vLLM shares the target's) and no ``d2t``/``t2d`` (the draft vocabulary is
  the target's).

Why the draft agrees with the target at some positions, honestly: every matrix is random, but
the blocks' output projections (``o_proj``, ``down_proj``) are small, so each residual stream
stays close to the token's own embedding. The target's ``lm_head`` row for token ``next[x]``
is the embedding of ``x``, so its greedy prediction after ``x`` is ``next[x]`` for a fixed
random map ``next`` (a bigram model dressed as a transformer). The draft's first step sees the
target's hidden state at ``x`` (through ``fc``, which averages the three auxiliary layers) and
its ``lm_head`` maps ``x`` to ``next[next[x]]``: exactly the token after next, so position 0 is
accepted nearly always. The draft's later steps feed back its own hidden state, still close to
``x``, and predict ``next[next[x]]`` again: right only where the chain has reached a fixed
point of ``next``. Acceptance by position is therefore high at 0 and lower after, depending on
the prompt (a prompt ending near a fixed point accepts everything).
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SEED = 20261201
VOCAB_SIZE = 512
HIDDEN = 128
INTERMEDIATE = 256
HEADS = 4
KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS
MAX_POSITIONS = 2048
SMALL = 0.002  # std of the blocks' output projections: the residual stays near the embedding
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]
FIXED_POINT_SHARE = 0.08  # share of ordinary tokens that predict themselves

_WORDS = tuple(
    [
        "the",
        "a",
        "draft",
        "target",
        "token",
        "model",
        "server",
        "decode",
        "verify",
        "accept",
        "reject",
        "layer",
        "cache",
        "batch",
        "request",
        "prompt",
        "speed",
        "rate",
        "length",
        "position",
        "hidden",
        "state",
        "weight",
        "shard",
        "graph",
        "compile",
        "engine",
        "worker",
        "rank",
        "memory",
        "block",
        "queue",
        "stream",
        "probe",
        "metric",
        "log",
        "line",
        "time",
        "second",
        "minute",
        "host",
        "port",
        "river",
        "stone",
        "cloud",
        "light",
        "north",
        "south",
        "east",
        "west",
        "green",
        "blue",
        "small",
        "large",
        "quick",
        "slow",
        "early",
        "late",
    ]
)


def corpus(rng: random.Random, sentences: int = 4000) -> list[str]:
    """English-like sentences from a fixed word list, for the tokenizer's training."""
    out = []
    for _ in range(sentences):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(4, 14))]
        out.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", ","]))
    return out


def train_tokenizer(rng: random.Random) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(rng), trainer=trainer)
    return tokenizer


def write_tokenizer(tokenizer: Tokenizer, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "model_max_length": MAX_POSITIONS,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
    }
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (directory / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")


def next_token_map(rng: random.Random, vocab: int) -> list[int]:
    """A random map over the ordinary tokens (specials are never predicted): a permutation
    whose fixed points are ``FIXED_POINT_SHARE`` of the tokens."""
    ordinary = list(range(len(SPECIAL_TOKENS), vocab))
    fixed = set(rng.sample(ordinary, int(len(ordinary) * FIXED_POINT_SHARE)))
    moving = [token for token in ordinary if token not in fixed]
    rng.shuffle(moving)  # one long cycle through the shuffled order: no fixed point among them
    mapping = list(range(vocab))
    for index, token in enumerate(moving):
        mapping[token] = moving[(index + 1) % len(moving)]
    for special in range(len(SPECIAL_TOKENS)):
        mapping[special] = len(SPECIAL_TOKENS)  # a special predicts the first ordinary token
    return mapping


def head_for(embeddings: torch.Tensor, mapping: list[int]) -> torch.Tensor:
    """An lm_head whose row y is the sum of the embeddings of the tokens x with mapping[x] = y,
    so argmax(head @ embedding[x]) = mapping[x]."""
    head = torch.zeros_like(embeddings)
    for token, predicted in enumerate(mapping):
        head[predicted] += embeddings[token]
    return head


def normal(generator: torch.Generator, *shape: int, std: float = 0.02) -> torch.Tensor:
    return torch.randn(*shape, generator=generator) * std


def llama_config(layers: int, vocab: int) -> dict[str, object]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": layers,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "vocab_size": vocab,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16",
    }


def decoder_layer(generator: torch.Generator, prefix: str, qkv_in: int) -> dict[str, torch.Tensor]:
    return {
        f"{prefix}input_layernorm.weight": torch.ones(HIDDEN),
        f"{prefix}post_attention_layernorm.weight": torch.ones(HIDDEN),
        f"{prefix}self_attn.q_proj.weight": normal(generator, HEADS * HEAD_DIM, qkv_in),
        f"{prefix}self_attn.k_proj.weight": normal(generator, KV_HEADS * HEAD_DIM, qkv_in),
        f"{prefix}self_attn.v_proj.weight": normal(generator, KV_HEADS * HEAD_DIM, qkv_in),
        f"{prefix}self_attn.o_proj.weight": normal(generator, HIDDEN, HEADS * HEAD_DIM, std=SMALL),
        f"{prefix}mlp.gate_proj.weight": normal(generator, INTERMEDIATE, HIDDEN),
        f"{prefix}mlp.up_proj.weight": normal(generator, INTERMEDIATE, HIDDEN),
        f"{prefix}mlp.down_proj.weight": normal(generator, HIDDEN, INTERMEDIATE, std=SMALL),
    }


def save(directory: Path, config: dict[str, object], weights: dict[str, torch.Tensor]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    tensors = {name: tensor.to(torch.bfloat16).contiguous() for name, tensor in weights.items()}
    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})


def target(
    directory: Path, layers: int, embeddings: torch.Tensor, mapping: list[int], tokenizer: Path
) -> None:
    generator = torch.Generator().manual_seed(SEED + layers)
    weights = {
        "model.embed_tokens.weight": embeddings,
        "model.norm.weight": torch.ones(HIDDEN),
        "lm_head.weight": head_for(embeddings, mapping),
    }
    for layer in range(layers):
        weights.update(decoder_layer(generator, f"model.layers.{layer}.", HIDDEN))
    save(directory, llama_config(layers, embeddings.shape[0]), weights)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(tokenizer / name, directory / name)


def eagle3_draft(directory: Path, embeddings: torch.Tensor, mapping: list[int]) -> None:
    generator = torch.Generator().manual_seed(SEED + 100)
    vocab = embeddings.shape[0]
    two_steps = [mapping[mapping[token]] for token in range(vocab)]
    identity = torch.eye(HIDDEN)
    weights = {
        # The average of the three auxiliary hidden states (each close to the embedding).
        "fc.weight": torch.cat([identity, identity, identity], dim=1) / 3,
        "midlayer.hidden_norm.weight": torch.ones(HIDDEN),
        "norm.weight": torch.ones(HIDDEN),
        "lm_head.weight": head_for(embeddings, two_steps),
    }
    weights.update(decoder_layer(generator, "midlayer.", 2 * HIDDEN))
    config = llama_config(1, vocab)
    config["architectures"] = ["LlamaForCausalLMEagle3"]
    config["draft_vocab_size"] = vocab
    config["target_hidden_size"] = HIDDEN
    save(directory, config, weights)


def main(out: Path) -> None:
    rng = random.Random(SEED)
    torch.manual_seed(SEED)
    tokenizer_dir = out / "tokenizer"
    tokenizer = train_tokenizer(rng)
    write_tokenizer(tokenizer, tokenizer_dir)
    vocab = tokenizer.get_vocab_size()
    mapping = next_token_map(rng, vocab)
    embeddings = torch.randn(vocab, HIDDEN, generator=torch.Generator().manual_seed(SEED))
    target(out / "tiny-llama8", 8, embeddings, mapping, tokenizer_dir)
    target(out / "tiny-llama6", 6, embeddings, mapping, tokenizer_dir)
    eagle3_draft(out / "tiny-eagle3", embeddings, mapping)
    (out / "next_token_map.json").write_text(json.dumps(mapping) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: make_tiny_vllm_models.py OUT_DIR")
    main(Path(sys.argv[1]))
