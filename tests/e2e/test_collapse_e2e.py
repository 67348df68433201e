"""Issue 31 end to end, on the simulator's vLLM personality through the host session: a good
run (the draft's config.json names the layers it was trained on), then a relaunch after that
config.json gained the embedding output ([0, 2, 40, 77]). The second run's acceptance
collapses; the session says so with the cause, and so do `watch --json` (a second client),
`advise --json` (a third) and the console (a fourth), each from the records on the host."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest
from support import hosts
from support.console import local_console, wait_until
from support.hosts import kill_everything_under
from support.profiles import vllm_sim_profile_toml
from support.sim import free_port
from support.waiting import until

from specmon.experiments.bench.runner import BenchSettings, run_benchmark
from specmon.experiments.sweep import session_base_url
from specmon.launch.config import load_config
from specmon.session.host import HostSession
from specmon.session.local import LocalTransport
from specmon.state.collapse import MIN_DRAFTS
from specmon.tui.widgets.collapse_banner import CollapseBanner

PROFILE = "vsim"
AUX_KEY = "eagle_aux_hidden_state_layer_ids"
TRAINED = [2, 40, 77]  # vLLM's default for an 80-layer target: what the draft was trained on
LOAD = BenchSettings(requests=3, max_tokens=256, warmup=0, concurrency=1)


def models(root: Path) -> tuple[Path, Path]:
    target = root / "Llama-3.3-70B-Instruct"  # the simulator sizes its weights by the name
    draft = root / "draft"
    for path, config in (
        (target, {"architectures": ["LlamaForCausalLM"], "hidden_size": 8192,
                  "num_hidden_layers": 80, "vocab_size": 128256}),
        (draft, {"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 8192,
                 "vocab_size": 128256, "draft_vocab_size": 32000, AUX_KEY: TRAINED}),
    ):  # fmt: skip
        path.mkdir(parents=True)
        (path / "config.json").write_text(json.dumps(config))
    return target, draft


def config_for(tmp_path: Path, target: Path, draft: Path):
    text = vllm_sim_profile_toml(PROFILE, free_port(), k=3, time_scale="0.002")
    text = text.replace('"meta-llama/Llama-3.3-70B-Instruct"', json.dumps(str(target)))
    text = text.replace('"yuhuili/EAGLE3-LLaMA3.3-Instruct-70B"', json.dumps(str(draft)))
    path = tmp_path / "specmon.toml"
    path.write_text(text)
    return load_config(path)


async def cli(tmp_path: Path, state: Path, *args: str, timeout: float = 90) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "specmon", "--config", str(tmp_path / "specmon.toml"), *args,
        "--state-dir", str(state), "--gpu-agent", "none",
        cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "SPECMON_DATA_DIR": str(tmp_path / "data")},
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode == 0, err.decode()
    return out.decode()


async def run_under_load(session: HostSession, what: str) -> str:
    """Launch the profile (replacing the run), wait for ready, send LOAD, and wait until the
    session has counted enough drafts to compare; the run's id."""
    store = session.bus.store
    run_id = await session.launch(PROFILE)
    await until(lambda: store.run_state == "ready" and store.run.run_id == run_id, 60, what)
    await run_benchmark(await session_base_url(session), LOAD, backend="vllm")
    await until(lambda: store.accept_by_position.server.drafts >= MIN_DRAFTS, 30, "drafts")
    return run_id


async def test_a_relaunch_with_the_embedding_output_wired_in_is_explained(tmp_path: Path):
    target, draft = models(tmp_path / "models")
    config = config_for(tmp_path, target, draft)
    state = tmp_path / "state"
    session = HostSession(
        LocalTransport(),
        profiles=config.profiles,
        options=hosts.test_options(state, gpu_agent="none"),
    )
    seen = session.bus.subscribe(bounded=False)
    try:
        await session.start()
        store = session.bus.store
        good = await run_under_load(session, "the good run")
        good_p1 = store.accept_by_position.ratios()[0]
        assert store.collapse is None  # nothing earlier to compare with

        # The "fix": the embedding output added to the layers the draft reads.
        config_json = draft / "config.json"
        config_json.write_text(config_json.read_text().replace("[2, 40, 77]", "[0, 2, 40, 77]"))
        bad = await run_under_load(session, "the relaunch")
        await until(lambda: store.collapse is not None, 20, "the collapse")
        collapse = store.collapse
        assert (collapse.run_id, collapse.reference_run) == (bad, good)
        assert collapse.measure == "position_1" and collapse.cycles >= MIN_DRAFTS
        # the good run as its record holds it: its final summary (a few drafts more than read here)
        assert collapse.reference_value == pytest.approx(good_p1, abs=0.02) and good_p1 > 0.55
        assert collapse.value < 0.3 < 0.7 * collapse.reference_value
        print(f"\nposition 1: {collapse.reference_value:.3f} (run {good}) -> {collapse.value:.3f} "
              f"(run {bad}, {collapse.cycles} drafts)")  # fmt: skip
        first = collapse.diagnoses[0]
        assert first.code == "aux_layers_changed"
        assert "[2, 40, 77] -> [0, 2, 40, 77]" in first.message
        assert f"({AUX_KEY}" in first.message
        assert collapse.message.startswith(
            f"acceptance {collapse.value:.2f} at position 1 against "
            f"{collapse.reference_value:.2f} in run {good} (same draft): changed since: "
            "auxiliary layers [2, 40, 77] -> [0, 2, 40, 77]"
        )
        # Both runs' records hold what the comparison used (for any later client).
        records = {r.run_id: r for r in await session.status()}
        assert records[good].acceptance["drafts"] >= MIN_DRAFTS
        assert records[bad].fingerprint["aux_layer_ids"] == [0, *TRAINED]
        assert records[good].fingerprint["draft"]["fields"][AUX_KEY] == TRAINED

        # Other clients on the same host, each from the records: watch, advise.
        watched = await cli(tmp_path, state, "watch", "local", "--json", "--duration", "4")
        events = [json.loads(line) for line in watched.splitlines()]
        (event,) = [e for e in events if e["kind"] == "acceptance_collapse"]
        assert event["reference_run"] == good and not event["cleared"]
        assert event["diagnoses"][0]["code"] == "aux_layers_changed"
        advised = json.loads(
            await cli(tmp_path, state, "advise", "local", "--json", "--cycles", "50",
                      "--timeout", "30", "--ledger", str(tmp_path / "ledger.sqlite3"))
        )  # fmt: skip
        diagnosis = advised["diagnosis"]
        assert diagnosis[0]["code"] == "aux_layers_changed"
        assert {"field": AUX_KEY.join(("draft.config.", "")), "before": TRAINED,
                "after": [0, *TRAINED]} in diagnosis[0]["changed"]  # fmt: skip
        assert advised["collapse"]["reference_run"] == good
        # `specmon diff`: every difference between the two runs' records, the field named.
        ledger = ("--ledger", str(tmp_path / "ledger.sqlite3"))
        diffed = json.loads(
            await cli(tmp_path, state, "diff", "local", good, bad, "--json", *ledger)
        )
        assert diffed["runs"] == [good, bad]
        fields = {c["field"]: c for c in diffed["changes"]}
        assert fields[f"draft.config.{AUX_KEY}"] == {
            "field": f"draft.config.{AUX_KEY}", "before": TRAINED, "after": [0, *TRAINED]
        }  # fmt: skip
        assert diffed["diagnoses"][0]["code"] == "aux_layers_changed"
        assert not any(f.startswith(("flag ", "env ")) for f in fields)  # the same profile
        text = await cli(tmp_path, state, "diff", "local", "latest~1", "latest", *ledger)
        assert f"run {good} ({PROFILE}) -> run {bad} ({PROFILE}):" in text
        assert f"draft.config.{AUX_KEY}: [2, 40, 77] -> [0, 2, 40, 77]" in text
        assert "not compared: sampling" in text
        told = [e for e in _drain(seen) if e.kind == "acceptance_collapse"]
        assert told and not any(e.cleared for e in told)
        assert len(told) <= 3, [e.value for e in told]  # once, then only when it moves 0.05
    except BaseException:
        await session.close()
        kill_everything_under(state)  # the server outlives a session: stopped here
        raise
    await session.close()

    # The console, opened on the host afterwards, shows the banner from the records alone.
    with local_console(config, state, gpu_agent="none") as app:
        async with app.run_test(size=(140, 44)) as pilot:
            banner = app.main.query_one(CollapseBanner)
            await wait_until(pilot, lambda: banner.display, 30, "the collapse banner")
            text = str(banner.render())
            assert f"against {collapse.reference_value:.2f} in run {good}" in text
            assert "aux_layers_changed" in text and "[2, 40, 77] -> [0, 2, 40, 77]" in text


def _drain(queue) -> list:
    out = []
    while not queue.empty():
        out.append(queue.get_nowait()[1])
    return out
