"""The mutants mutmut's full run left in secrets, vLLM's flags, the ledger's baselines, the
remote helper's stop and the exporter's collector: each test pins behaviour a user sees
(a masked value, a rule's exact message, a baseline found, a metric's value) at the edge a
surviving mutant moved (docs/testing.md, "The mutants left, and why")."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.process_groups import POLITE, start_group

from specmon.backends import RUN_INFO_LABELS, Problem
from specmon.backends.vllm.flags import (
    env_value_problem,
    flag_kind,
    setting_flags,
    token_tree,
    vllm_launch_problems,
)
from specmon.exporter.collector import MAX_SERIES_PER_HOST, MB, SpecmonCollector, WatchedHost
from specmon.model.events import (
    ConnectionState,
    GpuSample,
    KvCache,
    LoadBegin,
    ProbeTiming,
    RunInfo,
    ServerError,
    ShardProgress,
)
from specmon.model.secrets import (
    MASK,
    is_secret_name,
    mask_secrets_in_text,
    redact_env,
    redact_settings,
)
from specmon.remote import helper as remote_helper
from specmon.remote.agent import GpuReading
from specmon.state.store import EventBus

# --- secrets ------------------------------------------------------------------------------


def test_a_secret_echoed_with_only_the_word_secret_is_masked() -> None:
    assert mask_secrets_in_text("client_secret='s3cr3t'") == "client_secret='***'"
    assert mask_secrets_in_text("--client-secret abc") == f"--client-secret {MASK}"


def test_a_flag_name_that_only_ends_in_a_secret_word_is_no_secret_axis() -> None:
    assert not is_secret_name("--Xtoken")
    assert is_secret_name("--x-token")


def test_redact_env_takes_pairs_as_well_as_a_mapping() -> None:
    pairs = [("HF_TOKEN", "hf_abc"), ("CUDA_VISIBLE_DEVICES", "0")]
    assert redact_env(pairs) == {"HF_TOKEN": MASK, "CUDA_VISIBLE_DEVICES": "0"}


def test_an_empty_secret_setting_is_shown_empty() -> None:
    assert redact_settings({"api_key": "", "hf_token": None}) == {"api_key": "", "hf_token": None}


# --- vLLM's flags -------------------------------------------------------------------------

LONG = "9" * 30 + "x" * 15  # 45 characters: each message shows its first 40


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--port", LONG],
            Problem("--port", f"{LONG[:40]!r} is not a whole number from 1 to 65535"),
        ),
        (["--port="], Problem("--port", "'' is not a whole number from 1 to 65535")),
        (
            ["--gpu-memory-utilization", LONG],
            Problem(
                "--gpu-memory-utilization",
                f"{LONG[:40]!r} is not a fraction greater than 0 and at most 1 (e.g. 0.9)",
            ),
        ),
        (
            [f"--enforce-eager={LONG}"],
            Problem(
                "--enforce-eager",
                f"is a switch and takes no value (got {LONG[:40]!r}); give it bare, or leave it "
                "out to turn it off",
            ),
        ),
    ],
)
def test_a_long_or_empty_value_is_quoted_to_forty_characters(
    args: list[str], expected: Problem
) -> None:
    assert vllm_launch_problems(args, {}) == [expected]


def test_a_long_unknown_method_is_quoted_to_forty_characters() -> None:
    method = "m" * 45
    problems = vllm_launch_problems(["--speculative-config", f'{{"method":"{method}"}}'], {})
    assert [p.subject for p in problems] == ["method"]
    assert problems[0].message.startswith(f"{method[:40]!r} is not a vLLM speculative method")


@pytest.mark.parametrize("level", ["info", "INFO", "error", "Error", "debug", "CRITICAL"])
def test_every_logging_level_vllm_reads_is_accepted_in_any_case(level: str) -> None:
    assert env_value_problem("VLLM_LOGGING_LEVEL", level) is None


def test_a_long_wrong_logging_level_is_quoted_to_thirty_characters() -> None:
    value = "v" * 35
    assert env_value_problem("VLLM_LOGGING_LEVEL", value) == (
        f"{value[:30]!r} is not DEBUG, INFO, WARNING, ERROR or CRITICAL"
    )


def test_a_flag_is_known_by_its_whole_name() -> None:
    assert flag_kind("--Xport") is None
    assert flag_kind("--port") == "value"


def test_clearing_a_setting_that_is_not_set_leaves_no_config() -> None:
    assert setting_flags([], {"num_speculative_tokens": None}) == {"speculative-config": None}


def test_a_setting_on_a_config_turned_off_starts_a_new_config() -> None:
    changes = {"speculative-config": False, "num_speculative_tokens": "3"}
    assert setting_flags([], changes) == {"speculative-config": '{"num_speculative_tokens":3}'}


def test_a_token_tree_longer_than_ten_thousand_characters_is_not_read() -> None:
    def tree_args(length: int) -> list[str]:
        text = "[(0,)" + " " * (length - 6) + "]"
        return ["--speculative-config", f'{{"speculative_token_tree":"{text}"}}']

    assert token_tree(tree_args(10_000)) == (1, 1)
    assert token_tree(tree_args(10_001)) is None


# --- the remote helper's stop -------------------------------------------------------------

RUN_ID = "20261203-120000-abcd"


def stop_run(
    state: Path, record: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[dict[str, object]]]:
    """``stop`` of a run whose run.json is ``record``: its exit code and its JSON lines."""
    rdir = state / "runs" / RUN_ID
    rdir.mkdir(parents=True, mode=0o700)
    (rdir / "run.json").write_text(json.dumps(record))
    code = remote_helper.main(
        ["stop", "--state-dir", str(state), "--run-id", RUN_ID, "--by", "me@console"]
    )
    return code, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_a_leader_that_exited_unreaped_is_already_stopped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], started: list[subprocess.Popen[bytes]]
) -> None:
    """A zombie leader (ended, its parent not yet waiting) holds nothing: no signal is sent."""
    leader = start_group(started, "print('ready', flush=True)\n")
    ticks = remote_helper.proc_start_ticks(leader.pid)
    deadline = time.time() + 10
    while remote_helper.proc_state(leader.pid) != "Z" and time.time() < deadline:
        time.sleep(0.01)
    assert remote_helper.proc_state(leader.pid) == "Z"
    record = {"pid": leader.pid, "pgid": leader.pid, "start_ticks": ticks}
    assert stop_run(tmp_path, record, capsys) == (
        0,
        [
            {"step": "group_gone", "seconds": 0.0, "detail": "already stopped"},
            {"ok": True, "already": True},
        ],
    )


def test_a_group_that_ends_before_its_sigterm_is_stopped_cleanly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], started: list[subprocess.Popen[bytes]]
) -> None:
    """The leader lives, but its group has no process left when the signal goes (it ended in
    between): the stop reports the group gone instead of failing on the signal."""
    leader = start_group(started, POLITE)
    ended = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    ended.wait(timeout=30)
    record = {
        "pid": leader.pid,
        "pgid": ended.pid,
        "start_ticks": remote_helper.proc_start_ticks(leader.pid),
    }
    code, lines = stop_run(tmp_path, record, capsys)
    assert code == 0
    assert [line.get("step") for line in lines] == ["sigterm", "exited", "group_gone", None]
    assert lines[-1] == {"ok": True, "left": []}


# --- the exporter's collector -------------------------------------------------------------

SGLANG_ARGV = ("python3", "-m", "sglang.launch_server", "--model-path", "m/K")


def collected(
    bus: EventBus, profiles: dict[str, str] | None = None
) -> dict[str, list[tuple[dict[str, str], float]]]:
    """One scrape of one host, as ``name -> [(labels, value)]`` per sample."""
    collector = SpecmonCollector(
        lambda: [WatchedHost("gpu-a", bus)], backend_of_profile=profiles, clock=lambda: 20.0
    )
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in collector.collect():
        for sample in family.samples:
            out.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return out


def run_info(run: RunInfo, profiles: dict[str, str] | None = None) -> dict[str, str]:
    bus = EventBus()
    bus.publish(run, at=1.0)
    [(labels, _)] = collected(bus, profiles)["specmon_run_info"]
    return labels


def test_the_run_backend_comes_from_the_record_then_the_profile_then_the_command() -> None:
    unknown = ("./serve.sh",)
    by_profile = run_info(RunInfo(run_id="r1", profile="p", argv=unknown), {"p": "vllm"})
    assert (by_profile["backend"], by_profile["profile"]) == ("vllm", "p")
    assert by_profile["nccl_proto"] == by_profile["nccl_algo"] == ""
    by_record = run_info(RunInfo(run_id="r1", backend="vllm", argv=unknown))
    assert (by_record["backend"], by_record["profile"]) == ("vllm", "")
    by_command = run_info(RunInfo(run_id="r1", profile="q", argv=SGLANG_ARGV), {"p": "vllm"})
    assert by_command["backend"] == "sglang"


def test_a_run_of_a_server_no_backend_knows_has_every_label_empty() -> None:
    labels = run_info(RunInfo(run_id="r1", argv=("./serve.sh",)))
    assert labels == {
        "host": "gpu-a",
        "run_id": "r1",
        **dict.fromkeys((*RUN_INFO_LABELS, "backend", "profile"), ""),
        "nccl_proto": "",
        "nccl_algo": "",
        "nccl_p2p_level": "",
    }


def test_gpu_memory_is_exported_in_bytes() -> None:
    bus = EventBus()
    reading = GpuReading(index=0, mem_used_mb=1000.0, mem_total_mb=80000.0)
    bus.publish(GpuSample(wall=1.0, gpus=(reading,)), at=1.0)
    families = collected(bus)
    assert families["specmon_gpu_memory_used_bytes"] == [({"host": "gpu-a", "gpu": "0"}, 1000 * MB)]
    assert families["specmon_gpu_memory_total_bytes"] == [
        ({"host": "gpu-a", "gpu": "0"}, 80000 * MB)
    ]


def loading_bus() -> EventBus:
    bus = EventBus()
    bus.publish(RunInfo(run_id="r1", argv=SGLANG_ARGV), at=1.0)
    bus.publish(LoadBegin(), at=2.0)
    return bus


def test_loading_progress_counts_phases_done_and_the_first_by_its_shards() -> None:
    bus = loading_bus()
    phases = bus.store.phases
    bus.publish(ShardProgress(done=16, total=64), at=3.0)
    families = collected(bus)
    assert families["specmon_loading_progress_ratio"] == [
        ({"host": "gpu-a", "run_id": "r1"}, 0.25 / len(phases))
    ]
    current = [(s["phase"], v) for s, v in families["specmon_loading_phase"]]
    assert current == [(phase, 1.0 if phase == phases[0] else 0.0) for phase in phases]
    bus.publish(ShardProgress(done=70, total=64), at=4.0)  # a bar past its end: all of it
    [(_, progress)] = collected(bus)["specmon_loading_progress_ratio"]
    assert progress == 1 / len(phases)
    bus.publish(KvCache(tokens=1000), at=5.0)
    [(_, progress)] = collected(bus)["specmon_loading_progress_ratio"]
    assert bus.store.loading.done_phases == [phases[0]]
    assert progress == 1 / len(phases)


def gpu_host(gpus: int) -> EventBus:
    """A connected host with an error counted, a probe cycle and ``gpus`` GPUs reporting
    utilization only (one series each)."""
    bus = EventBus()
    bus.publish(ConnectionState(host="h", state="connected"), at=1.0)
    bus.publish(ServerError(category="oom", message="x"), at=1.0)
    bus.publish(ProbeTiming(wall=1.0, draft_ms=2, verify_ms=20, extend_ms=1, cycle_ms=23), at=1.0)
    readings = tuple(GpuReading(index=i, util_gpu=50.0) for i in range(gpus))
    bus.publish(GpuSample(wall=1.0, gpus=readings), at=1.0)
    return bus


def test_a_host_at_the_series_cap_keeps_all_and_past_it_drops_gpu_series_first() -> None:
    one = collected(gpu_host(1))
    fixed = sum(len(v) for k, v in one.items() if k != "specmon_exporter_series_dropped") - 1
    at_cap = MAX_SERIES_PER_HOST - fixed
    full = collected(gpu_host(at_cap))
    assert len(full["specmon_gpu_utilization_ratio"]) == at_cap
    assert full["specmon_exporter_series_dropped"] == [({"host": "gpu-a"}, 0.0)]
    over = collected(gpu_host(at_cap + 3))
    assert len(over["specmon_gpu_utilization_ratio"]) == at_cap
    assert over["specmon_exporter_series_dropped"] == [({"host": "gpu-a"}, 3.0)]
    assert ({"host": "gpu-a", "category": "oom"}, 1.0) in over["specmon_server_errors_total"]
    assert over["specmon_spec_cycle_seconds_count"] == [({"host": "gpu-a"}, 1.0)]


# Ignores SIGTERM and holds 256 MB: after SIGKILL its memory takes a moment to be freed, during
# which it is still a live process of the group.
HEAVY_STUBBORN = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "ballast = bytearray(256 * 1024 * 1024)\n"
    "for i in range(0, len(ballast), 4096):\n"
    "    ballast[i] = 1\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def test_the_stop_waits_for_a_killed_group_to_be_gone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], started: list[subprocess.Popen[bytes]]
) -> None:
    """SIGKILL is not instant: the report comes once the group is gone, not while a killed
    process is still tearing down (a large server's takes seconds)."""
    leader = start_group(started, HEAVY_STUBBORN)
    record = {
        "pid": leader.pid,
        "pgid": leader.pid,
        "start_ticks": remote_helper.proc_start_ticks(leader.pid),
    }
    rdir = tmp_path / "runs" / RUN_ID
    rdir.mkdir(parents=True, mode=0o700)
    (rdir / "run.json").write_text(json.dumps(record))
    code = remote_helper.main(
        ["stop", "--state-dir", str(tmp_path), "--run-id", RUN_ID, "--by", "me", "--grace", "0.1"]
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line.get("step") for line in lines] == ["sigterm", "sigkill", "group_gone", None]
    assert (code, lines[-1]) == (0, {"ok": True, "left": []})
