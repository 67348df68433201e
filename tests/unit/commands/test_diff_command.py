"""`specmon diff HOST RUN_A RUN_B` (issue 31 item 2) over a host whose runs are RunStatus
records: every difference under its likely cause, the same lines as DiffReport, run ids by
unique prefix or latest~N, an unknown or ambiguous one a one-line usage error naming the
candidates (exit 2), a benchmark's sampling from the ledger (none created by looking), and a
record's text never reaching the terminal raw."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from specmon.cli import main
from specmon.experiments.ledger import BenchContext, Ledger, recorded_sampling
from specmon.model.terminal_text import safe_text
from specmon.state.run_diff import DiffReport, RunFacts, find_run
from specmon.state.run_status import RunStatus
from tests.unit.experiments.test_ledger import bench_result

AUX = "eagle_config.eagle_aux_hidden_state_layer_ids"
ARGV = ("python3", "-m", "sglang.launch_server", "--model-path", "/m/t",
        "--speculative-draft-model-path", "/m/d", "--speculative-num-steps", "3")  # fmt: skip


def fingerprint(ids: list[int]) -> dict[str, Any]:
    return {
        "v": 1,
        "draft": {"path": "/m/d", "config_sha256": str(ids), "revision": None,
                  "fields": {AUX: ids, "hidden_size": 7168}},
        "target": {"path": "/m/t", "config_sha256": "t", "revision": None, "fields": {}},
        "chat_template_sha256": "c",
        "aux_layer_ids": ids,
        "aux_source": "checkpoint",
        "aux_captured": [i + 1 for i in ids],
    }  # fmt: skip


def run(run_id: str, started: float, ids: list[int], profile: str = "kimi", **env: str):
    return RunStatus(
        run_id=run_id, profile=profile, argv=ARGV, env=env, pid=None, pgid=None,
        started_at=started, alive=False, port=30000, fingerprint=fingerprint(ids),
        server_version="0.5.9",
    )  # fmt: skip


RUNS = [
    run("20261204-0931-aa", 1.0, [2, 30, 58], NCCL_PROTO="LL"),
    run("20261204-1015-bb", 2.0, [0, 2, 30, 58], profile="kimi\x1b[2J", NCCL_PROTO="Simple"),
    run("20261204-1102-cc", 3.0, [0, 2, 30, 58], NCCL_PROTO="Simple"),
]


class HostRuns:
    """The session `specmon diff` opens: the host's runs as its records say."""

    def __init__(self, runs: list[RunStatus]) -> None:
        self.runs = runs
        self.started = self.closed = False

    async def start(self, *, streams: bool = True) -> None:
        assert not streams
        self.started = True

    async def status(self) -> list[RunStatus]:
        return list(reversed(self.runs))  # in no particular order: diff sorts by start

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> HostRuns:
    import specmon.commands.printers as printers

    session = HostRuns(RUNS)
    monkeypatch.setattr(printers, "session_from_args", lambda args, config, **kw: session)
    monkeypatch.setenv("SPECMON_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SPECMON_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)  # no ./specmon.toml: the built-in config
    return session


def diff(*args: str) -> list[str]:
    return ["diff", "box", *args]


def test_text_groups_each_difference_under_its_cause(host, tmp_path, capsys) -> None:
    assert main(diff("20261204-0931", "20261204-1015")) == 0
    out = capsys.readouterr().out
    assert host.started and host.closed
    assert "\x1b" not in out
    lines = out.splitlines()
    assert lines[0] == "run 20261204-0931-aa (kimi) -> run 20261204-1015-bb (kimi): 4 differences"
    assert lines[1].startswith("  aux_layers_changed: auxiliary layers [2, 30, 58] -> [0, 2, 30")
    assert f"      draft.config.{AUX}: [2, 30, 58] -> [0, 2, 30, 58]" in lines[2:5]
    env_at = lines.index("  env_changed: the environment changed: env NCCL_PROTO LL -> Simple")
    assert lines[env_at + 1] == "      env NCCL_PROTO: LL -> Simple"
    assert lines[-1] == "  not compared: sampling (no benchmark of both runs in the ledger)"
    # the same lines as the console's: one formatter
    facts = [RunFacts.from_status(r) for r in RUNS[:2]]
    raw = DiffReport.of(*facts).lines()
    assert "\x1b[2J" in raw[0] and [safe_text(line) for line in raw] == lines
    assert not (tmp_path / "data").exists()  # no ledger is made by looking


def test_json_and_no_difference_exit_zero(host, capsys) -> None:
    assert main(diff("latest~1", "latest", "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["runs"] == ["20261204-1015-bb", "20261204-1102-cc"]
    assert set(report) == {"runs", "changes", "diagnoses", "not_compared"}
    assert report["changes"] == [] and [d["code"] for d in report["diagnoses"]] == [
        "no_recorded_change"
    ]
    assert main(diff("20261204-1015", "20261204-1102")) == 0
    text = capsys.readouterr().out
    assert "-bb (kimi) -> run 20261204-1102-cc (kimi): no recorded difference" in text
    assert "  no_recorded_change: nothing the records keep changed" in text
    assert main(diff("20261204-0931", "20261204-1102", "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    assert [d["code"] for d in report["diagnoses"]] == ["aux_layers_changed", "env_changed"]
    assert {"field": "env NCCL_PROTO", "before": "LL", "after": "Simple"} in report["changes"]
    assert report["not_compared"] == ["sampling (no benchmark of both runs in the ledger)"]


@pytest.mark.parametrize(
    ("wanted", "said"),
    [
        ("20261204", "run '20261204' is ambiguous: 20261204-0931-aa, 20261204-1015-bb, 2026"),
        ("nope", "no run 'nope' on this host (the latest: 20261204-0931-aa, 20261204-1015-bb"),
        ("latest~3", "'latest~3': the host has 3 runs"),
        ("latest~x", "'latest~x': the host has 3 runs"),
    ],
)
def test_an_unknown_or_ambiguous_run_is_one_line(host, capsys, wanted: str, said: str) -> None:
    assert main(diff(wanted, "latest")) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and said in captured.err, captured.err
    assert "Traceback" not in captured.err


def test_find_run_prefers_an_exact_id_and_cleans_the_candidates() -> None:
    runs = [run("r1", 1.0, [1]), run("r1-x\x1b[31m", 2.0, [1]), run("r1-y", 3.0, [1])]
    assert find_run(runs, "r1") is runs[0]  # exact, though a prefix of two others
    assert find_run(runs, "r1-y") is runs[2] and find_run(runs, "latest~2") is runs[0]
    with pytest.raises(Exception, match="ambiguous") as raised:
        find_run(runs, "r1-")
    assert "\x1b" not in str(raised.value)


def test_sampling_comes_from_the_runs_benchmarks_in_the_ledger(host, tmp_path, capsys) -> None:
    path = tmp_path / "ledger.sqlite3"
    greedy = {"temperature": 0.0, "max_new_tokens": 256, "ignore_eos": True}
    with Ledger(path) as ledger:
        for run_id, sampling in (
            ("20261204-1015-bb", greedy),
            ("20261204-1102-cc", {**greedy, "temperature": 0.7}),
        ):
            result = replace(bench_result(50.0, speculative=True), sampling=sampling)
            ledger.record_benchmark(result, BenchContext("box", run_id=run_id))
    assert recorded_sampling(["20261204-1102-cc", "other"], path) == {
        "20261204-1102-cc": {**greedy, "temperature": 0.7}
    }
    assert main(diff("latest~1", "latest", "--ledger", str(path), "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["changes"] == [{"field": "sampling.temperature", "before": 0.0, "after": 0.7}]
    assert [d["code"] for d in report["diagnoses"]] == ["sampling_changed"]
    assert report["not_compared"] == []
    missing = tmp_path / "none.sqlite3"
    assert main(diff("latest~1", "latest", "--ledger", str(missing))) == 0
    assert "not compared: sampling" in capsys.readouterr().out and not missing.exists()
