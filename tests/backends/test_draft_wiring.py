"""The per-server rule for EAGLE-3 auxiliary layers and the reading of the draft config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmon.backends import draft_wiring as dw
from specmon.backends.sglang import draft_wiring as sgl
from specmon.backends.vllm import draft_wiring as vll


@pytest.mark.parametrize("mod", [sgl, vll])
@pytest.mark.parametrize("version", [None, "0.5.9", "0.33.0"])
def test_default_rule(mod, version) -> None:
    assert mod.default_aux_layers(61, version) == [2, 30, 58]  # Kimi-K2.5
    assert mod.default_aux_layers(80, version) == [2, 40, 77]  # Llama-3.3-70B (vllm.md log)
    assert mod.default_aux_layers(32, version) == [2, 16, 29]


def test_sglang_reads_only_nested_key() -> None:
    nested = {"eagle_config": {dw.AUX_KEY: [0, 2, 30, 58]}}
    top = {dw.AUX_KEY: [1, 2, 3]}
    w = sgl.aux_layers(nested, 61)
    assert (w.layer_ids, w.source) == ((0, 2, 30, 58), "checkpoint")
    assert sgl.captured_inputs(w) == [1, 3, 31, 59]
    d = sgl.aux_layers(top, 61)
    assert (d.layer_ids, d.source) == ((2, 30, 58), "default")
    assert sgl.captured_inputs(d) == [2, 30, 58]
    assert sgl.startup_line(w) is None


def test_vllm_reads_only_top_level_key() -> None:
    top = {dw.AUX_KEY: [2, 30, 58]}
    nested = {"eagle_config": {dw.AUX_KEY: [1, 2, 3]}}
    w = vll.aux_layers(top, 61)
    assert (w.layer_ids, w.source) == ((2, 30, 58), "checkpoint")
    assert vll.startup_line(w) == "Using Eagle3 auxiliary layers from config: (2, 30, 58)"
    d = vll.aux_layers(nested, 61)
    assert d.source == "default"
    assert vll.startup_line(d) == "Using Eagle3 auxiliary layers from model: (2, 30, 58)"


def test_empty_list_means_unset_and_dispatch() -> None:
    assert dw.aux_layers("sglang", {"eagle_config": {dw.AUX_KEY: []}}, 61).source == "default"
    assert dw.aux_layers("vllm", None, 61).layer_ids == (2, 30, 58)


def test_load_config(tmp_path: Path) -> None:
    assert dw.load_config(tmp_path) is None  # no config.json: not an error
    assert dw.load_config(tmp_path / "nowhere") is None
    (tmp_path / "config.json").write_text(json.dumps({"eagle_config": {dw.AUX_KEY: [2]}}))
    assert dw.load_config(tmp_path) == {"eagle_config": {dw.AUX_KEY: [2]}}
    assert dw.load_config(tmp_path / "config.json") is not None


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '"x"'])
def test_malformed_config_is_one_clear_message(tmp_path: Path, text: str) -> None:
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(dw.DraftConfigError) as err:
        dw.load_config(tmp_path)
    msg = str(err.value)
    assert "config.json" in msg and "\n" not in msg


@pytest.mark.parametrize("bad", ["2,30", [2, "30"], [-1, 2], [True], {"a": 1}])
def test_bad_layer_ids(bad) -> None:
    with pytest.raises(dw.DraftConfigError, match="non-negative integers"):
        sgl.aux_layers({"eagle_config": {dw.AUX_KEY: bad}}, 61)


def test_parse_layer_list_and_range() -> None:
    assert dw.parse_layer_list("2,30,58") == (2, 30, 58)
    assert dw.parse_layer_list(" [0, 2, 30, 58] ") == (0, 2, 30, 58)
    for bad in ("", "a,b", "2,-1"):
        with pytest.raises(dw.DraftConfigError):
            dw.parse_layer_list(bad, "SPECMON_SIM_TRAINED_AUX_LAYERS")
    assert dw.out_of_range([2, 30, 61], 61) == [61]
