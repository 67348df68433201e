"""The helper's `model-configs` (the draft's wiring, read on the host): a local directory or a
Hugging Face cache id, regular files only, size-bounded, a cache symlink kept inside its
repository, a malformed file told in one line, nothing executed."""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
from pathlib import Path

import pytest

from specmon.remote import helper

DRAFT = {
    "architectures": ["LlamaForCausalLMEagle3"],
    "hidden_size": 4096,
    "vocab_size": 128256,
    "draft_vocab_size": 32000,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 30, 58]},
}


def run(request: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(request)))
    monkeypatch.setattr(sys, "stdout", out)
    helper.main(["model-configs", "--state-dir", str(tmp_path / "state")])
    return json.loads(out.getvalue().splitlines()[-1])


def write_json(path: Path, data: object) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = json.dumps(data).encode()
    path.write_bytes(raw)
    return raw


def hf_repo(hub: Path, model_id: str, files: dict[str, bytes], rev: str = "a" * 40) -> Path:
    """A cache repository as huggingface_hub writes one: snapshot files link into blobs/."""
    repo = hub / ("models--" + model_id.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(rev)
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    (repo / "blobs").mkdir()
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(os.path.relpath(blob, snap))
    return repo


def test_local_directory_config_and_template(tmp_path: Path, monkeypatch) -> None:
    draft = tmp_path / "draft"
    raw = write_json(draft / "config.json", DRAFT)
    target = tmp_path / "target"
    write_json(target / "config.json", {"hidden_size": 4096, "num_hidden_layers": 61})
    write_json(target / "tokenizer_config.json", {"chat_template": "{{ messages }}"})
    reply = run({"models": {"draft": str(draft), "target": str(target)}}, tmp_path, monkeypatch)
    assert reply["ok"] is True
    d, t = reply["models"]["draft"], reply["models"]["target"]
    assert d["config"] == DRAFT and d["source"] == "local" and d["error"] is None
    assert d["config_sha256"] == hashlib.sha256(raw).hexdigest()
    assert d["chat_template_sha256"] is None  # a draft has no tokenizer of its own
    assert t["chat_template_sha256"] == hashlib.sha256(b"{{ messages }}").hexdigest()


def test_chat_template_file_wins(tmp_path: Path, monkeypatch) -> None:
    model = tmp_path / "m"
    write_json(model / "config.json", {})
    write_json(model / "tokenizer_config.json", {"chat_template": "old"})
    (model / "chat_template.jinja").write_bytes(b"new")
    reply = run({"models": {"target": str(model)}}, tmp_path, monkeypatch)
    assert reply["models"]["target"]["chat_template_sha256"] == hashlib.sha256(b"new").hexdigest()


def test_hf_cache_id_at_refs_main(tmp_path: Path, monkeypatch) -> None:
    raw = json.dumps(DRAFT).encode()
    hf_repo(tmp_path / "hf" / "hub", "org/draft-eagle3", {"config.json": raw})
    reply = run(
        {"models": {"draft": "org/draft-eagle3"}, "env": {"HF_HOME": str(tmp_path / "hf")}},
        tmp_path,
        monkeypatch,
    )
    d = reply["models"]["draft"]
    assert d["error"] is None and d["source"] == "hf_cache" and d["revision"] == "a" * 40
    assert d["config"] == DRAFT


def test_hf_cache_symlink_outside_the_repository_is_refused(tmp_path: Path, monkeypatch) -> None:
    repo = hf_repo(tmp_path / "hub", "org/m", {})
    outside = tmp_path / "elsewhere.json"
    write_json(outside, {"hidden_size": 1})
    (repo / "snapshots" / ("a" * 40) / "config.json").symlink_to(outside)
    reply = run(
        {"models": {"target": "org/m"}, "env": {"HF_HUB_CACHE": str(tmp_path / "hub")}},
        tmp_path,
        monkeypatch,
    )
    t = reply["models"]["target"]
    assert t["config"] is None and "outside the cache" in t["error"]


def test_missing_malformed_oversized_and_not_regular(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "empty").mkdir()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text('{"hidden_size": 4096,\n')
    big = tmp_path / "big"
    big.mkdir()
    (big / "config.json").write_bytes(b" " * (helper.MODEL_CONFIG_BYTES + 1))
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "config.json")
    reply = run(
        {
            "models": {
                "nodir": str(tmp_path / "nothing"),
                "noid": "org/not-cached",
                "empty": str(tmp_path / "empty"),
                "bad": str(bad),
                "big": str(big),
                "fifo": str(fifo),
            },
            "env": {"HF_HOME": str(tmp_path / "hf")},
        },
        tmp_path,
        monkeypatch,
    )
    m = reply["models"]
    assert "no such directory" in m["nodir"]["error"]
    assert "not in the Hugging Face cache" in m["noid"]["error"]
    assert "no config.json" in m["empty"]["error"]
    assert m["bad"]["error"].startswith("config.json is not JSON")
    assert "more than" in m["big"]["error"]
    assert "not a regular file" in m["fifo"]["error"]
    for entry in m.values():
        assert entry["config"] is None and "\n" not in entry["error"]


def test_no_models_is_an_error(tmp_path: Path, monkeypatch) -> None:
    assert run({}, tmp_path, monkeypatch) == {"ok": False, "error": "model-configs: no models"}
