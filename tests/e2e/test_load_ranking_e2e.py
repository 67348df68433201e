"""Issue 29 item 3 end to end: under load the simulator ranks draft lengths differently.

Four simulators (no speculation, 1, 3 and 6 draft steps) as real processes, each measured
over real HTTP by the benchmark runner `specmon bench` and `specmon sweep` use, at one request
at a time and at 16 concurrent requests. At one request 3 steps win and speculation gains ~21%
over the baseline (the measured host); at 16 the verify's extra tokens touch more experts and
cost all-reduce volume, so 1 step wins and the gain is gone (docs/simulator.md, "Load").

The figure compared is the bench's steady tok/s (while every request streams: the model's
decode rate), not its overall one: at 16 a 2.4 s run's overall tok/s is ~20% ramp-up (16
connections, prompts sent and prefilled: 0.45 s on an idle machine, up to 0.8 s on a busy one,
where the client sends slowly), an additive delay that shrank the model's 9% between 1 and 3
steps and whose jitter reversed it on a loaded 2-core machine. The simulators themselves keep
the model's pace there (their cycles' wall times match the model's to 0.1%).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from support.sim import start_sim

from specmon.experiments.bench.runner import BenchSettings, run_benchmark
from specmon.sim import perf

BASELINE_ARGS = ("--model-path", "moonshotai/Kimi-K2.5", "--tp", "8", "--enable-metrics")
TIME_SCALE = 0.002
STEPS = (1, 3, 6)
HIGH = 16  # where the model puts 1 step furthest ahead of 3 (9%) and the gain at ~0
LOADS = {
    1: BenchSettings(requests=1, concurrency=1, max_tokens=192, warmup=0),
    HIGH: BenchSettings(requests=HIGH, concurrency=HIGH, max_tokens=64, warmup=0),
}


def sim_args(steps: int | None) -> dict[str, object]:
    if steps is None:
        return {"base_args": BASELINE_ARGS}
    return {
        "args": [
            "--speculative-num-steps",
            str(steps),
            "--speculative-num-draft-tokens",
            str(steps + 1),
        ]
    }


def predicted(steps: int | None, load: int) -> float:
    settings = perf.SpecSettings(num_steps=steps or 0, topk=1, num_draft_tokens=(steps or 0) + 1)
    return load * perf.expected_tokens_per_second(settings, load)


async def test_the_best_step_count_at_one_request_is_not_the_best_at_sixteen(tmp_path: Path):
    measured: dict[tuple[int, int | None], float] = {}
    with contextlib.ExitStack() as stack:
        sims = {
            steps: stack.enter_context(
                start_sim(tmp_path / f"sim{steps}", time_scale=TIME_SCALE, **sim_args(steps))
            )
            for steps in (None, *STEPS)
        }
        for sim in sims.values():
            sim.wait_ready()
        for load, settings in LOADS.items():
            for steps, sim in sims.items():
                result = await run_benchmark(sim.url(""), settings)
                assert all(r.ok for r in result.requests), result.requests
                assert result.tok_s_steady is not None, result
                measured[(load, steps)] = result.tok_s_steady

    table = {
        key: (round(value, 1), round(predicted(key[1], key[0]), 1))
        for key, value in measured.items()
    }  # (measured, model), shown when an assertion fails

    def best(load: int) -> int:
        return max(STEPS, key=lambda k: measured[(load, k)])

    def gain(load: int) -> float:
        return measured[(load, best(load))] / measured[(load, None)]

    assert best(1) == 3, table
    assert best(HIGH) == 1, table
    assert gain(1) > 1.1, table
    assert gain(HIGH) < gain(1) - 0.1, table
    # The simulator runs at its model's pace, and the steady figure leaves the prefills and the
    # ramp-up out (0.96-1.03 of the model measured, idle or under 8 busy loops).
    for (load, steps), value in measured.items():
        assert 0.85 * predicted(steps, load) < value < 1.05 * predicted(steps, load), table
