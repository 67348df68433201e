"""Issue 31 item 4 over real HTTP: the simulator started with a draft whose config.json adds
the embedding output ([0, 2, 30, 58]) accepts far less than with the trained [2, 30, 58]."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from support.sim import VLLM_EAGLE3_ARGS, start_sim

AUX_KEY = "eagle_aux_hidden_state_layer_ids"
REQUESTS, TOKENS = 6, 150  # ~6 x 70 verifies per run: a few seconds of simulated decode


def draft_dir(root: Path, ids: list[int]) -> Path:
    d = root / "draft"
    d.mkdir(parents=True)
    config = {"architectures": ["LlamaForCausalLMEagle3"], AUX_KEY: ids}
    config["eagle_config"] = {AUX_KEY: ids, "use_aux_hidden_state": True}
    (d / "config.json").write_text(json.dumps(config))
    return d


def measure(base_url: str) -> tuple[float, float]:
    """Accepted drafts / drafted, and tokens per verify, over REQUESTS parallel /generate."""

    def one(i: int) -> dict:
        body = {
            "text": f"request {i}",
            "sampling_params": {"max_new_tokens": TOKENS, "ignore_eos": True},
        }
        response = httpx.post(f"{base_url}/generate", json=body, timeout=60)
        response.raise_for_status()
        return response.json()["meta_info"]

    with ThreadPoolExecutor(REQUESTS) as pool:
        metas = list(pool.map(one, range(REQUESTS)))
    accepted = sum(m["spec_accept_token_num"] for m in metas)
    drafted = sum(m["spec_draft_token_num"] for m in metas)
    tokens = sum(m["completion_tokens"] for m in metas)
    verifies = sum(m["spec_verify_ct"] for m in metas)
    return accepted / drafted, tokens / verifies


def run_sglang(root: Path, ids: list[int]) -> tuple[float, float]:
    draft = draft_dir(root, ids)
    with start_sim(root, args=["--speculative-draft-model-path", str(draft)]) as sim:
        sim.wait_ready()
        return measure(sim.url("").rstrip("/"))


def test_embedding_output_in_the_aux_layers_collapses_acceptance(tmp_path: Path) -> None:
    good_rate, good_len = run_sglang(tmp_path / "good", [2, 30, 58])
    bad_rate, bad_len = run_sglang(tmp_path / "bad", [0, 2, 30, 58])
    print(f"accept rate {good_rate:.3f} -> {bad_rate:.3f}, length {good_len:.2f} -> {bad_len:.2f}")
    assert 0.28 < good_rate < 0.45  # model: 0.363 (3 steps)
    assert 0.03 < bad_rate < 0.12  # model: 0.072
    assert bad_len < good_len - 0.5


def test_vllm_logs_the_layers_it_read(tmp_path: Path) -> None:
    draft = draft_dir(tmp_path, [0, 2, 30, 58])
    spec = json.dumps({"method": "eagle3", "model": str(draft), "num_speculative_tokens": 3})
    with start_sim(
        tmp_path,
        base_args=VLLM_EAGLE3_ARGS,
        args=["--speculative-config", spec],
        module="specmon.sim.vllm",
        time_scale=0.02,
    ) as sim:
        sim.wait_for_log("Using Eagle3 auxiliary layers from config: (0, 2, 30, 58)")


def test_a_malformed_draft_config_is_one_line(tmp_path: Path) -> None:
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "config.json").write_text("{oops")
    with start_sim(tmp_path, args=["--speculative-draft-model-path", str(draft)]) as sim:
        assert sim.proc.wait(timeout=30) == 2
    text = (tmp_path / "server.log").read_text()
    assert "draft checkpoint:" in text and "config.json: not valid JSON" in text
    assert "Traceback" not in text
