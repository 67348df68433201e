"""The vLLM backend: launch rendering, vLLM's own launch rules (each with vLLM's reason), the
relaunch form's fields, key flags, inference from the command, env families, the baseline
without speculation, sweep grids over keys of --speculative-config, and the store fed a vLLM
log (phases, the draft's bar, acceptance by position)."""

from __future__ import annotations

import json

import pytest
from support.paths import TESTS

from specmon.backends import backend_for_command, detect_backend, get_backend
from specmon.launch.config import (
    Profile,
    SpeculativeSettings,
    parse_config_text,
    render_profile_toml,
)
from specmon.launch.spec import LaunchSpec, env_name_problem, form_values, validate_form
from specmon.model.events import RunInfo
from specmon.state.store import StateStore

VLLM = get_backend("vllm")
LOGS = TESTS / "logs"

PROFILE_TOML = """
[profiles.v]
command = ["vllm", "serve"]
model_path = "meta-llama/Llama-3.3-70B-Instruct"
draft_model_path = "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"
tp = 8
port = 8000
host_bind = "0.0.0.0"
mem_fraction_static = 0.9
extra_args = ["--enforce-eager"]

[profiles.v.speculative]
method = "eagle3"
num_speculative_tokens = 3
draft_tensor_parallel_size = 1

[profiles.v.env]
NCCL_PROTO = "LL"
VLLM_LOGGING_LEVEL = "DEBUG"
"""


def profile(text: str = PROFILE_TOML, name: str = "v") -> Profile:
    return parse_config_text(text, None).profiles[name]


def problems(args: list[str], env: dict[str, str] | None = None) -> list[str]:
    return VLLM.validate_launch(args, env or {})


# --- rendering -------------------------------------------------------------------------------


def test_a_vllm_profile_renders_vllm_serve_with_the_speculative_config_json():
    spec = profile().to_launch_spec()
    assert spec.backend.name == "vllm"
    assert spec.command == ("vllm", "serve", "meta-llama/Llama-3.3-70B-Instruct")
    assert spec.args[:8] == (
        "--tensor-parallel-size",
        "8",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--gpu-memory-utilization",
        "0.9",
    )
    assert spec.flag("speculative-config") is not None
    assert json.loads(spec.flag("speculative-config") or "") == {
        "method": "eagle3",
        "model": "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B",
        "num_speculative_tokens": 3,
        "draft_tensor_parallel_size": 1,
    }
    assert spec.args[-1] == "--enforce-eager"  # a switch, bare
    assert spec.env_dict() == {"NCCL_PROTO": "LL", "VLLM_LOGGING_LEVEL": "DEBUG"}
    assert spec.problems() == []
    assert "'vllm' serve" not in spec.shell_command()  # the command word quoted only if needed


def test_a_module_entry_point_takes_the_model_as_a_flag():
    text = PROFILE_TOML.replace(
        'command = ["vllm", "serve"]',
        'command = ["{python}", "-m", "vllm.entrypoints.openai.api_server"]',
    )
    spec = profile(text).to_launch_spec(python="/venv/bin/python")
    assert spec.command == ("/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server")
    assert spec.args[:2] == ("--model", "meta-llama/Llama-3.3-70B-Instruct")
    assert spec.problems() == []


def test_the_backend_is_inferred_from_vllm_commands():
    for command in (
        ["vllm", "serve"],
        ["/opt/venv/bin/vllm", "serve", "/m"],
        ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        ["python3", "-m", "vllm.entrypoints.launchers.api_server.entry"],
        ["python3", "-m", "specmon.sim.vllm", "serve"],
    ):
        assert backend_for_command(command) == "vllm", command
    assert backend_for_command(["python3", "-m", "specmon.sim"]) == "sglang"
    text = '[profiles.p]\nmodel_path = "/m"\ncommand = ["vllm", "serve"]\n'
    assert profile(text, "p").backend == "vllm"
    assert Profile("p", "/m", backend="vllm").command == ("vllm", "serve")


def test_vllm_environment_families_may_be_set():
    assert "VLLM_" in VLLM.env_prefixes
    assert env_name_problem("VLLM_SKIP_P2P_CHECK") is None
    assert env_name_problem("VLLM") is not None
    assert problems([], {"VLLM_SKIP_P2P_CHECK": "maybe"}) == [
        "VLLM_SKIP_P2P_CHECK: 'maybe' is not 1/0/true/false"
    ]
    assert any(p.startswith("NCCL_PROTO:") for p in problems([], {"NCCL_PROTO": "Fast"}))


def test_the_profile_round_trips_through_toml_with_vllm_keys():
    original = profile()
    assert original.speculative == SpeculativeSettings(
        algorithm="eagle3", num_speculative_tokens=3, draft_tensor_parallel_size=1
    )
    text = render_profile_toml(original)
    assert 'method = "eagle3"' in text and "algorithm" not in text
    assert profile(text) == original


def test_speculative_keys_are_checked_per_backend():
    bad = PROFILE_TOML.replace("method = ", "algorithm = ")
    with pytest.raises(Exception, match=r"speculative\.algorithm: unknown key.*known: method"):
        profile(bad)
    sglang_keys = PROFILE_TOML.replace("num_speculative_tokens = 3", "num_steps = 3")
    with pytest.raises(Exception, match="num_steps: unknown key"):
        profile(sglang_keys)
    with pytest.raises(Exception, match="method: 'eagle9' is not one of"):
        profile(PROFILE_TOML.replace('"eagle3"', '"eagle9"'))


# --- vLLM's rules ----------------------------------------------------------------------------

SC = "--speculative-config"


def test_draft_tp_is_one_or_the_target_tp():
    base = ["--tensor-parallel-size", "8", SC]
    assert (
        problems([*base, '{"method":"eagle3","model":"/d","draft_tensor_parallel_size":8}']) == []
    )
    assert (
        problems([*base, '{"method":"eagle3","model":"/d","draft_tensor_parallel_size":1}']) == []
    )
    assert problems([*base, '{"method":"eagle3","model":"/d","draft_tensor_parallel_size":4}']) == [
        "draft_tensor_parallel_size: speculative_draft_tensor_parallel_size=4 cannot be other "
        "value than 1 or target model tensor_parallel_size=8"
    ]


def test_eagle_eagle3_and_draft_model_need_a_draft_model():
    for method in ("eagle", "eagle3", "draft_model"):
        assert problems([SC, json.dumps({"method": method, "num_speculative_tokens": 3})]) == [
            f'draft_model: method {method} reads a draft model: set "model" in --speculative-config'
        ]
    assert problems([SC, '{"method":"ngram","num_speculative_tokens":3}']) == []
    assert problems([SC, '{"method":"mtp","num_speculative_tokens":1}']) == []


def test_tensor_parallel_size_inside_the_config_is_refused_with_vllms_reason():
    found = problems([SC, '{"method":"eagle3","model":"/d","tensor_parallel_size":1}'])
    assert found == [
        "draft_tensor_parallel_size: 'tensor_parallel_size' is not a valid argument in the "
        "speculative_config. Please pass 'draft_tensor_parallel_size' instead."
    ]


def test_the_033_shortcuts_cannot_repeat_a_key_of_the_json():
    found = problems([SC, '{"method":"eagle3","model":"/d","num_speculative_tokens":3}',
                      "--spec-tokens", "4"])  # fmt: skip
    assert found == [
        '--spec-tokens: sets "num_speculative_tokens", which --speculative-config also sets; '
        "vLLM refuses both: give it in one place"
    ]
    # the shortcuts alone are a speculative config
    assert problems(["--spec-method", "eagle3", "--spec-model", "/d", "--spec-tokens", "3"]) == []
    assert problems(["--spec-method", "eagle3"]) == [
        'draft_model: method eagle3 reads a draft model: set "model" in --speculative-config'
    ]


def test_removed_v0_flags_are_refused_with_the_replacement_named():
    found = problems(["--speculative-model", "/d", "--num-speculative-tokens", "3"])
    assert found == [
        '--speculative-model: was removed from vLLM with the V0 engine; use "model" in '
        "--speculative-config (or --spec-model on 0.33+)",
        "--num-speculative-tokens: was removed from vLLM with the V0 engine; use "
        '"num_speculative_tokens" in --speculative-config (or --spec-tokens on 0.33+)',
    ]
    # vLLM's argparse reads underscores as dashes
    assert problems(["--num_speculative_tokens", "3"])[0].startswith("--num_speculative_tokens:")


def test_the_speculative_config_must_be_a_json_object_with_a_known_method():
    assert problems([SC, "{method: eagle3}"])[0].startswith(
        "--speculative-config: is not valid JSON"
    )
    assert problems([SC, "[1]"]) == [
        "--speculative-config: must be a JSON object ({...}), got list"
    ]
    assert problems([SC, '{"method":"eagel3","model":"/d"}'])[0].startswith(
        "method: 'eagel3' is not a vLLM speculative method; one of eagle3, eagle"
    )
    assert problems([SC, '{"num_speculative_tokens":3}'])[0].startswith(
        'method: is missing: vLLM needs "method" or a draft "model"'
    )
    assert problems([SC, '{"method":"eagle3","model":"/d","num_speculative_tokens":0}']) == [
        "num_speculative_tokens: 0 is not a positive whole number"
    ]


def test_flag_schema_switches_render_bare_and_values_are_checked():
    assert VLLM.flag_kind("--enforce-eager") == "switch"
    assert VLLM.flag_kind("trust_remote_code") == "switch"
    assert VLLM.flag_kind("max-model-len") == "value"
    assert VLLM.flag_kind("num_speculative_tokens") == "value"  # a setting of the JSON
    spec = profile().to_launch_spec().with_flags({"trust-remote-code": "true"})
    assert spec.args[-1] == "--trust-remote-code"
    assert problems(["--enforce-eager", "yes"])[0].startswith("--enforce-eager: is a switch")
    assert problems(["--max-model-len"]) == ["--max-model-len: needs a value"]
    assert problems(["--gpu-memory-utilization", "1.5"]) == [
        "--gpu-memory-utilization: '1.5' is not a fraction greater than 0 and at most 1 (e.g. 0.9)"
    ]
    assert problems(["--tensor-parallel-size", "0"]) == [
        "--tensor-parallel-size: '0' is not a whole number from 1 to 64"
    ]
    assert problems(["--port", "8000", "--port", "8001"]) == [
        "--port: given more than once; give it once"
    ]
    assert problems(["--some-future-flag", "x"]) == []  # vLLM's own argparse judges it


def test_a_profile_with_a_rule_broken_is_refused_at_its_key():
    bad = PROFILE_TOML.replace("draft_tensor_parallel_size = 1", "draft_tensor_parallel_size = 4")
    with pytest.raises(Exception, match=r"profiles\.v\.speculative\.draft_tensor_parallel_size"):
        profile(bad)


# --- key flags, the baseline, settings -------------------------------------------------------


def test_key_flags_show_spec_k_and_tp():
    spec = profile().to_launch_spec()
    flags = spec.key_flags()
    assert (flags["spec"], flags["k"], flags["tp"]) == ("eagle3", "3", "8")
    assert flags["NCCL_PROTO"] == "LL" and flags["mem_fraction"] == "0.9"
    from specmon.tui.formatting import key_flags

    run = RunInfo(run_id="r", backend="vllm", argv=spec.argv, env=spec.env)
    assert " ".join(f"{k}={v}" for k, v in key_flags(run)[:3]) == "spec=eagle3 k=3 tp=8"
    assert VLLM.key_flags(["--spec-method", "ngram", "--spec-tokens", "5"], {})["k"] == "5"


def test_the_baseline_drops_the_speculative_config_and_the_shortcuts():
    spec = profile().to_launch_spec().with_flags({"spec-tokens": None})
    assert VLLM.speculation_flags(spec.args) == {"speculative-config"}
    base = spec.without_speculation()
    assert not base.has_flag("speculative-config") and base.problems() == []
    assert base.key_flags()["spec"] == "off"
    short = LaunchSpec(
        "vllm", ("vllm", "serve", "/m"), ("--spec-method", "ngram", "--spec-tokens", "3")
    )
    assert short.without_speculation().args == ()


def test_named_settings_edit_one_key_of_the_json():
    spec = profile().to_launch_spec()
    five = spec.with_flags({"num_speculative_tokens": "5"})
    assert five.flag("num_speculative_tokens") == "5"
    assert json.loads(five.flag("speculative-config") or "")["num_speculative_tokens"] == 5
    assert five.args.count("--speculative-config") == 1
    no_draft_tp = five.with_flags({"draft_tensor_parallel_size": None})
    assert "draft_tensor_parallel_size" not in json.loads(no_draft_tp.flag(SC) or "")
    ngram = spec.with_flags({"method": "ngram", "draft_model": None})
    assert json.loads(ngram.flag(SC) or "") == {
        "method": "ngram",
        "num_speculative_tokens": 3,
        "draft_tensor_parallel_size": 1,
    }
    assert ngram.problems() == []


def test_a_sweep_grid_over_num_speculative_tokens_and_nccl_with_a_baseline():
    from specmon.experiments.bench.runner import BenchSettings
    from specmon.experiments.sweep import SweepPlan, parse_grid, plan_points

    config = parse_config_text(PROFILE_TOML, None)
    axes = parse_grid(["num_speculative_tokens=1,2,3,5", "NCCL_PROTO=LL,Simple"])
    plan = SweepPlan("h", "v", axes, True, BenchSettings())
    points = plan_points(config, plan)
    assert len(points) == 9 and points[0].is_baseline
    assert not points[0].spec.has_flag("speculative-config")
    ks = [json.loads(p.spec.flag(SC) or "")["num_speculative_tokens"] for p in points[1:]]
    assert ks == [1, 1, 2, 2, 3, 3, 5, 5]
    assert [p.spec.env_dict()["NCCL_PROTO"] for p in points[1:3]] == ["LL", "Simple"]
    with pytest.raises(Exception, match="draft_tensor_parallel_size=2 cannot be other value"):
        plan_points(config, SweepPlan("h", "v", parse_grid(["draft_tensor_parallel_size=2"]),
                                      False, BenchSettings()))  # fmt: skip


# --- the relaunch form -----------------------------------------------------------------------


def test_the_form_shows_vllms_fields_and_checks_them_with_vllms_rules():
    names = [(f.name, f.shown_as) for f in VLLM.form_fields()]
    assert names[:5] == [
        ("method", "method"),
        ("draft_model", "draft model"),
        ("num_speculative_tokens", "num speculative tokens"),
        ("draft_tensor_parallel_size", "draft TP"),
        ("gpu-memory-utilization", "GPU memory utilisation"),
    ]
    assert {"NCCL_PROTO", "NCCL_ALGO", "NCCL_P2P_LEVEL"} <= {f.name for f in VLLM.form_fields()}
    spec = profile().to_launch_spec()
    values = form_values(spec)
    assert values["method"] == "eagle3" and values["num_speculative_tokens"] == "3"
    assert values["draft_model"] == "yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"
    assert validate_form(values, base=spec) == {}
    bad = {**values, "draft_tensor_parallel_size": "4"}
    assert validate_form(bad, base=spec) == {
        "draft_tensor_parallel_size": "speculative_draft_tensor_parallel_size=4 cannot be "
        "other value than 1 or target model tensor_parallel_size=8"
    }
    no_draft = {**values, "draft_model": ""}
    assert "draft_model" in validate_form(no_draft, base=spec)


# --- detection, endpoints, probe -------------------------------------------------------------


def test_a_vllm_log_is_detected_as_vllms():
    text = (LOGS / "vllm-0.33-dp-docker-ray.log").read_text()
    assert detect_backend(text) == "vllm"
    assert VLLM.detect_log("") == 0.0
    assert detect_backend((LOGS / "sglang-oom-traceback.log").read_text()) == "sglang"


def test_openai_completions_request_and_reply():
    body = VLLM.generate_body("hi", 64, stream=True)
    assert body["max_tokens"] == body["min_tokens"] == 64 and body["ignore_eos"] is True
    assert body["stream_options"] == {"include_usage": True}
    reply = {
        "choices": [{"text": "ok", "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 64},
    }
    assert VLLM.generate_text(reply) == "ok"
    assert VLLM.generate_meta(reply) == {
        "completion_tokens": 64,
        "prompt_tokens": 3,
        "finish_reason": {"type": "length"},
    }
    assert VLLM.generate_text({"choices": []}) == "" and VLLM.generate_meta("x") is None
    assert VLLM.server_info_values({"version": "0.33.0"}) == (("version", "0.33.0"),)
    assert VLLM.ready_on_health(200) and not VLLM.ready_on_health(503)
    assert not VLLM.ready_on_health(None)  # refused while loading: not ready, not a failure


def test_the_probe_ships_the_vllm_hook():
    targets = VLLM.probe_targets()
    assert targets is not None and targets.pythonpath
    assert {"sitecustomize.py", "specmon_probe_vllm.py", "specmon_probe_hook.py"} <= set(
        targets.files
    )


# --- the store fed a vLLM log ----------------------------------------------------------------


def test_the_store_walks_vllms_loading_phases_and_keeps_the_targets_shard_progress():
    parser = VLLM.new_log_parser()
    events = parser.parse_lines((LOGS / "vllm-0.33-dp-docker-ray.log").read_text().splitlines())
    store = StateStore()
    store.apply(RunInfo(run_id="r", backend="vllm"), at=0.0)
    assert store.phases == VLLM.loading_phases
    seen_total: list[tuple[int, int | None]] = []
    for at, event in enumerate(events, start=1):
        store.apply(event, at=float(at))
        if event.kind in ("weights_loaded", "load_end"):
            seen_total.append((store.loading.shards_done, store.loading.shards_total))
    assert store.loading.done_phases == list(VLLM.loading_phases)
    assert store.loading.shards_total == 17 and store.loading.shards_done == 17
    assert all(total == 17 and done == 17 for done, total in seen_total)
    assert store.run_state == "ready"
    last = [e for e in events if e.kind == "spec_decode"][-1]
    assert last.per_position and len(last.per_position) == 3  # type: ignore[attr-defined]
    # the latest line is the server's report; the view is the run's, weighted by drafts
    assert store.accept_by_position.reported == list(last.per_position)  # type: ignore[attr-defined]
    lines = [e for e in events if e.kind == "spec_decode" and e.per_position and e.drafted]  # type: ignore[attr-defined]
    weights = [e.drafted // 3 for e in lines]  # type: ignore[attr-defined]
    expected = [
        sum(round(e.per_position[i] * w) for e, w in zip(lines, weights, strict=True))  # type: ignore[attr-defined]
        / sum(weights)
        for i in range(3)
    ]
    assert store.accept_by_position.ratios() == pytest.approx(expected)
    assert store.accept_len[-1].value == last.mean_accept_len  # type: ignore[attr-defined]
    assert store.last_decode is not None and store.last_decode.tokens is None


def test_the_draft_bar_does_not_reset_the_target_progress():
    from specmon.model.events import LoadBegin, ShardProgress, WeightsLoaded

    store = StateStore()
    store.apply(RunInfo(run_id="r", backend="vllm"), at=0.0)
    store.apply(LoadBegin(), at=1.0)
    store.apply(LoadBegin(), at=1.1)  # vLLM announces the same load twice
    store.apply(ShardProgress(done=5, total=30), at=2.0)
    assert store.loading.loads_seen == 1 and store.loading.phase == "weights"
    store.apply(ShardProgress(done=30, total=30), at=3.0)
    store.apply(WeightsLoaded(role="target", seconds=2.0), at=3.5)
    store.apply(ShardProgress(done=0, total=1), at=4.0)
    store.apply(ShardProgress(done=1, total=1), at=4.1)
    store.apply(WeightsLoaded(role="draft", seconds=0.2), at=4.2)
    assert (store.loading.shards_done, store.loading.shards_total) == (30, 30)
    assert store.loading.phase == "draft weights" and "weights" in store.loading.done_phases


def test_several_engines_add_up_and_the_exporter_reads_the_reported_positions():
    from specmon.exporter.collector import loading_progress
    from specmon.model.events import Decode, SpecDecode

    store = StateStore()
    store.apply(RunInfo(run_id="r", backend="vllm"), at=0.0)
    for engine, tps in ((0, 100.0), (1, 120.0), (0, 110.0)):
        store.apply(
            Decode(
                running_req=1,
                tokens=None,
                token_usage=0.1,
                gen_throughput=tps,
                queue_req=0,
                engine=engine,
            ),
            at=1.0,
        )
    assert store.throughput[-1].value == pytest.approx(230.0)
    store.apply(SpecDecode(mean_accept_len=2.4, per_position=(0.9, 0.5)), at=2.0)
    assert store.accept_by_position.ratios() == [0.9, 0.5]
    assert store.accept_by_position_history[-1] == (2.0, (0.9, 0.5))
    assert 0.0 <= loading_progress(store) <= 1.0


# --- /metrics when the log is quiet ----------------------------------------------------------


def metrics_page(drafts: int, accepted: tuple[int, ...], generated: int) -> str:
    lines = [
        "# TYPE vllm:spec_decode_num_drafts counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}',
        "# TYPE vllm:spec_decode_num_draft_tokens counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {drafts * 3}',
        "# TYPE vllm:spec_decode_num_accepted_tokens counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {sum(accepted)}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos counter",
        *(
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",'
            f'position="{i}"}} {n}'
            for i, n in enumerate(accepted)
        ),
        "# TYPE vllm:generation_tokens counter",
        f'vllm:generation_tokens_total{{engine="0",model_name="m"}} {generated}',
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="m"} 2.0',
        "# TYPE vllm:num_requests_waiting gauge",
        'vllm:num_requests_waiting{engine="0",model_name="m"} 1.0',
        "# TYPE vllm:kv_cache_usage_perc gauge",
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25',
    ]
    return "\n".join(lines) + "\n"


def test_metrics_pages_become_decode_and_spec_decode_events_from_counter_rates():
    reader = VLLM.new_metrics_reader()
    assert reader is not None
    assert reader.read(metrics_page(0, (0, 0, 0), 0), at=0.0) == []  # the first page: no rate
    events = reader.read(metrics_page(100, (80, 60, 40), 580), at=2.0)
    decode, spec = events
    assert (decode.kind, decode.gen_throughput, decode.running_req, decode.queue_req) == (
        "decode",
        290.0,
        2,
        1,
    )
    assert decode.token_usage == 0.25 and decode.tokens is None
    assert spec.kind == "spec_decode"
    assert spec.mean_accept_len == pytest.approx(2.8)
    assert spec.per_position == pytest.approx((0.8, 0.6, 0.4))
    assert spec.draft_acceptance_rate == pytest.approx(0.6)
    assert reader.read("not metrics {", at=3.0) == []


def test_metrics_events_are_published_only_while_the_log_is_quiet(tmp_path):
    from support.hosts import local_session

    from specmon.model.events import Decode
    from specmon.session.host import LOG_STATS_QUIET_S

    session = local_session(tmp_path / "state", {})
    store = session.bus.store
    assert session._log_stats_quiet(None)  # no decode seen yet
    logged = Decode(running_req=1, tokens=None, token_usage=0.1, gen_throughput=9.0, queue_req=0)
    import time

    store.apply(logged, at=time.time())
    assert not session._log_stats_quiet(None)  # the log just spoke
    own = Decode(running_req=1, tokens=None, token_usage=0.1, gen_throughput=8.0, queue_req=0)
    store.apply(own, at=time.time())
    assert session._log_stats_quiet(own)  # the latest decode is the poller's own
    store.apply(logged, at=time.time() - LOG_STATS_QUIET_S - 1)
    assert session._log_stats_quiet(None)  # the log's last decode is old


def test_speculation_is_read_from_metrics_where_the_info_endpoint_does_not_say():
    assert VLLM.speculation_in_metrics(metrics_page(0, (0, 0, 0), 0)) is True
    no_spec = "\n".join(
        line for line in metrics_page(0, (0, 0, 0), 0).splitlines() if "spec_decode" not in line
    )
    assert VLLM.speculation_in_metrics(no_spec + "\n") is False
    assert VLLM.speculation_in_metrics("") is None  # no vllm: samples (--disable-log-stats)
    assert VLLM.speculation_in_metrics("bad {") is None
    from dataclasses import replace

    from specmon.experiments.bench.runner import BenchResult

    fields = {f: None for f in BenchResult.__dataclass_fields__}
    result = BenchResult(**fields)  # type: ignore[arg-type]
    assert result.speculative is None
    assert replace(result, metrics_speculative=False).speculative is False
    info = replace(result, server_info={"speculative_algorithm": "EAGLE3"})
    assert replace(info, metrics_speculative=False).speculative is True  # the info wins


def test_bench_info_merges_the_served_model_and_the_version():
    assert VLLM.info_merged and VLLM.info_paths == ("/v1/models", "/version")
    models = {
        "object": "list",
        "data": [{"id": "llama", "root": "/models/llama", "max_model_len": 8}],
    }
    assert VLLM.bench_info(models) == {"model_path": "/models/llama", "max_model_len": 8}
    assert VLLM.bench_info({"version": "0.33.0"}) == {"version": "0.33.0"}
    assert VLLM.bench_info([1]) == {}
    assert VLLM.server_info_values(models) == (
        ("model", "llama"),
        ("model_path", "/models/llama"),  # as bench_info records it (the advisor's ledger key)
        ("max_model_len", "8"),
    )
    same = {"data": [{"id": "/models/llama", "root": "/models/llama"}]}
    assert VLLM.server_info_values(same) == (("model", "/models/llama"),)


def test_a_benchmarks_acceptance_length_comes_from_the_counters_rise():
    before, after = metrics_page(10, (8, 6, 4), 100), metrics_page(110, (88, 66, 44), 700)
    assert VLLM.accept_length_between(before, after) == pytest.approx(2.8)
    assert VLLM.accept_length_between(after, after) is None  # no drafts in between
    assert VLLM.accept_length_between("bad {", after) is None


def test_a_file_may_name_the_built_in_vllm_demo_as_its_default_profile():
    config = parse_config_text('default_profile = "demo-vllm"\n', None)
    assert config.default_profile == "demo-vllm"
    with pytest.raises(Exception, match="no profile named 'demo-vlm'"):
        parse_config_text('default_profile = "demo-vlm"\n', None)


def test_a_sweep_points_accept_length_falls_back_to_the_metrics_figure(tmp_path):
    """vLLM's replies carry no acceptance length; the ledger's sweep table reads the one the
    benchmark computed from /metrics instead of showing none."""
    from dataclasses import replace

    from specmon.experiments.bench.runner import BenchSettings, RequestResult, summarize
    from specmon.experiments.ledger import BenchContext, Ledger

    results = [
        RequestResult(prompt_id=f"p{i}", ok=True, latency_s=1.0, completion_tokens=100)
        for i in range(3)
    ]
    result = summarize(
        settings=BenchSettings(requests=3, concurrency=1, max_tokens=64),
        base_url="http://127.0.0.1:1",
        prompt_set_version="v1",
        prompt_set_digest="d" * 64,
        started_at=1.0,
        duration_s=3.0,
        results=results,
        metrics_accept_len=2.75,
        server_info={"model_path": "m", "version": "0.33.0"},
    )
    result = replace(result, metrics_speculative=True)
    assert result.accept_len is None and result.speculative is True
    with Ledger(tmp_path / "l.sqlite3") as ledger:
        sweep = ledger.start_sweep("k", "h", "p", {})
        ledger.record_sweep_point(
            sweep,
            {"num_speculative_tokens": "3"},
            is_baseline=False,
            status="ok",
            benchmark=(result, BenchContext(host="h")),
        )
        (point,) = ledger.sweep_points(sweep)
    assert point.accept_len == 2.75
